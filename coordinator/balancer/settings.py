"""The balancer's settings: defaults, and parsing the values ``rangetable balancer set`` sends.

Pure: the policy (:mod:`coordinator.balancer.policy`) reads them, the balancer loop
(:mod:`coordinator.control.balancer_loop`) keeps them in the meta store.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

MiB = 1 << 20
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass
class Settings:
    """Balancer settings; every field can be changed at run time with ``set``."""

    enabled: bool = True
    dry_run: bool = False  # the caller logs the actions instead of doing them
    split: bool = True
    move: bool = True
    merge: bool = True
    interval_s: float = 2.0  # how often the coordinator runs plan_actions
    hot_rps: float = 500.0  # load score (requests/s, see module doc) above which a range is hot
    hot_window_s: float = 6.0  # hot for this long -> load split
    split_size_bytes: int = 256 * MiB  # size split at the data median
    hot_key_share: float = 0.8  # one key >= this share of a hot range's samples -> hot_key warning
    append_share: float = 0.8  # share of each report's keys past the previous report's end -> append
    max_splits_per_round: int = 2
    server_imbalance: float = 1.25  # move when the hottest server > this x the mean
    move_min_rps: float = 50.0  # ... and hottest - coldest >= this (noise floor)
    max_concurrent_moves: int = 1  # moves in flight + planned (merges across servers count)
    move_cooldown_s: float = 10.0  # per range
    recent_split_s: float = 30.0  # a half this young is preferred for a move
    merge_cold_rps: float = 5.0
    merge_max_bytes: int = 32 * MiB
    merge_cooldown_s: float = 60.0  # cold for, and older than, this before a merge
    max_merges_per_round: int = 1
    warn_interval_s: float = 60.0  # repeat a hot_key / append_hotspot warning at most this often
    replica_move: bool = True  # rule 7: even out replica counts (replicated clusters)
    primary_spread: bool = True  # rule 8: even out primaries by leadership transfers
    replica_move_min_gap: int = 2  # act when the fullest server holds this many more replicas (primaries) than the emptiest
    max_replica_moves: int = 2  # replica moves in flight + planned
    replica_move_timeout_s: float = 60.0  # a new replica not in sync by then: the move is abandoned
    replica_move_cooldown_s: float = 60.0  # per range, after a split, merge or replica move

    def set(self, key: str, value: str) -> None:
        """Parse ``value`` for field ``key`` (``hot-rps`` = ``hot_rps``) and set it.

        Booleans take true/false/on/off/yes/no/1/0; sizes take a unit (``256MiB``, ``1GB``);
        raises ValueError on an unknown key, an unparsable value or one out of its range.
        """
        name = key.strip().lower().replace("-", "_")
        kinds = {f.name: type(f.default) for f in fields(self)}
        if name not in kinds:
            raise ValueError(f"unknown balancer setting {key!r}; known: {', '.join(sorted(kinds))}")
        parsed = _parse(name, kinds[name], value)
        _check(name, parsed)
        setattr(self, name, parsed)

    def to_dict(self) -> dict[str, Any]:
        """All settings as plain data."""
        return asdict(self)


def _parse(name: str, kind: type, value: str) -> Any:
    text = str(value).strip().lower()
    if kind is bool:
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{name}: expected on/off, true/false or 1/0, got {value!r}")
    try:
        if kind is int and name.endswith("_bytes"):
            num = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
            unit = text[len(num):].strip()
            if unit not in _UNITS:
                raise ValueError
            x = float(num.replace("_", "")) * _UNITS[unit]
            if not math.isfinite(x) or x != int(x):
                raise ValueError
            return int(x)
        if kind is int:
            return int(text.replace("_", ""))
        x = float(text)
    except ValueError:
        what = "size" if name.endswith("_bytes") else kind.__name__
        raise ValueError(f"{name}: not a valid {what}: {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    return x


def _check(name: str, v: Any) -> None:
    if isinstance(v, bool):
        return
    if name in ("hot_key_share", "append_share") and not 0 < v <= 1:
        raise ValueError(f"{name}: must be in (0, 1], got {v}")
    if name == "server_imbalance" and v < 1:
        raise ValueError(f"{name}: must be >= 1, got {v}")
    if name in ("interval_s", "replica_move_timeout_s") and v <= 0:
        raise ValueError(f"{name}: must be > 0, got {v}")
    if v < 0:
        raise ValueError(f"{name}: must be >= 0, got {v}")
