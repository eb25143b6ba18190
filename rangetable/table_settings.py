"""A table's settings beyond Azure's: its time to live (TTL) and its reserved throughput.

Pure functions, shared by the coordinator (which stores and checks them), the partition servers
(which apply them) and the CLI and clients (which parse what users type):

* a TTL is written ``30d``, ``12h``, ``90m``, ``45s`` (or a bare number of seconds); ``none`` (or 0)
  removes it. It is kept as whole seconds, 0 meaning "no TTL".
* an entity whose Timestamp is older than the TTL is *expired*: :func:`expired` is the one rule,
  applied wherever a partition server reads a current entity (gets, scans, the reads of writes and
  transactions), so expiry needs no write and takes effect, or stops, the moment the TTL changes.
* reserved throughput is ``reads`` and ``writes`` in entities per second (0: not reserved).
* the change feed (``partition_server/store/feed.py``) is on unless ``feed_off``; it keeps
  ``feed_retention_s`` seconds of changes (0: :data:`DEFAULT_FEED_RETENTION_S`, a day), written like a
  TTL, and the entity before each change too when ``feed_before``.

The settings travel as a dict ``{"ttl_s": int, "reads": int, "writes": int, "feed_off": 0 | 1,
"feed_retention_s": int, "feed_before": 0 | 1}`` with every field optional (missing = 0).
"""

from __future__ import annotations

import re
from typing import Any

from rangetable.errors import TableError

TICKS_PER_SECOND = 10_000_000  # a Timestamp counts 100 ns ticks
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TTL_S = 100 * 365 * 86400  # a hundred years
MAX_RATE = 10_000_000  # entities per second
FIELDS = ("ttl_s", "reads", "writes", "feed_off", "feed_retention_s", "feed_before")
FLAGS = ("feed_off", "feed_before")
DEFAULT_FEED_RETENTION_S = 24 * 3600
MIN_FEED_RETENTION_S = 60
MAX_FEED_RETENTION_S = 10 * 365 * 86400
_TTL = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")


def parse_ttl(text: str | int | None) -> int:
    """Seconds of a TTL written ``<n>[s|m|h|d]`` (``none``, ``off``, 0 or None: 0, no TTL); raises
    TableError(InvalidInput) for anything else."""
    if text is None:
        return 0
    if isinstance(text, bool):
        raise TableError("InvalidInput", f"Invalid TTL {text!r}: write it as <n>s, <n>m, <n>h, <n>d or none.")
    if isinstance(text, int):
        seconds = text
    else:
        if text.strip().lower() in ("none", "off", ""):
            return 0
        m = _TTL.match(text.lower())
        if m is None:
            raise TableError("InvalidInput", f"Invalid TTL {text!r}: write it as <n>s, <n>m, <n>h, <n>d or none.")
        seconds = int(m.group(1)) * UNITS[m.group(2) or "s"]
    if not 0 <= seconds <= MAX_TTL_S:
        raise TableError("InvalidInput", f"A TTL must be between 0 and {MAX_TTL_S} seconds (100 years).")
    return seconds


def format_ttl(seconds: int) -> str:
    """The shortest exact spelling of a TTL (``none`` for 0): 86400 → ``1d``, 90 → ``90s``."""
    if not seconds:
        return "none"
    for unit in ("d", "h", "m"):
        if seconds % UNITS[unit] == 0:
            return f"{seconds // UNITS[unit]}{unit}"
    return f"{seconds}s"


def ttl_ticks(seconds: int) -> int:
    """A TTL in Timestamp ticks (0: none)."""
    return seconds * TICKS_PER_SECOND


def expired(entity_ts: int, ttl: int, now: int) -> bool:
    """True when an entity written at ``entity_ts`` has outlived a TTL of ``ttl`` at ``now`` (all
    in ticks; ``ttl`` 0 means no TTL, so nothing expires)."""
    return ttl > 0 and entity_ts + ttl <= now


def oldest_live(ttl: int, now: int) -> int:
    """The smallest Timestamp still alive at ``now`` under ``ttl`` (ticks; 0 without a TTL):
    ``expired(ts, ttl, now)`` is exactly ``ts < oldest_live(ttl, now)``."""
    return now - ttl + 1 if ttl > 0 else 0


def check_rate(value: Any, name: str) -> int:
    """A reserved rate (entities/s; 0 = not reserved); TableError(InvalidInput) unless a whole number
    between 0 and :data:`MAX_RATE`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RATE:
        raise TableError("InvalidInput", f"{name} must be a whole number of entities per second, 0 to {MAX_RATE}.")
    return value


def parse_switch(text: str | bool | int, name: str) -> bool:
    """``on``/``off`` (also true/false, yes/no, 1/0) as a bool; TableError(InvalidInput) otherwise."""
    if isinstance(text, bool):
        return text
    if isinstance(text, int) and text in (0, 1):
        return bool(text)
    word = str(text).strip().lower()
    if word in ("on", "true", "yes", "1"):
        return True
    if word in ("off", "false", "no", "0"):
        return False
    raise TableError("InvalidInput", f"{name} must be on or off, not {text!r}.")


def parse_retention(text: str | int) -> int:
    """Seconds of a change-feed retention written as a TTL is (``7d``, ``12h``…), 1 minute to 10 years."""
    seconds = parse_ttl(text) if not isinstance(text, int) or isinstance(text, bool) else text
    if not MIN_FEED_RETENTION_S <= seconds <= MAX_FEED_RETENTION_S:
        raise TableError("InvalidInput", f"A feed retention must be between {MIN_FEED_RETENTION_S} seconds and "
                                         f"{MAX_FEED_RETENTION_S // 86400} days.")
    return seconds


def feed_settings(settings: dict) -> tuple[bool, bool, int]:
    """(feed on, before-images, retention in seconds) of a table's settings."""
    return (not settings.get("feed_off"), bool(settings.get("feed_before")),
            settings.get("feed_retention_s") or DEFAULT_FEED_RETENTION_S)


def check_settings(changes: Any, current: dict | None = None) -> dict[str, int]:
    """``current`` updated with ``changes`` (a dict of :data:`FIELDS`; ``ttl_s`` may be spelled as
    :func:`parse_ttl` reads it), every field checked; fields at 0 are left out, so a table with
    nothing set has ``{}``. Raises TableError(InvalidInput)."""
    if not isinstance(changes, dict):
        raise TableError("InvalidInput", "Table settings must be a map.")
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise TableError("InvalidInput", f"Unknown table settings: {', '.join(sorted(map(str, unknown)))}.")
    out = dict(current or {})
    for name, value in changes.items():
        if name == "ttl_s":
            out[name] = parse_ttl(value)
        elif name in FLAGS:
            out[name] = int(parse_switch(value, name))
        elif name == "feed_retention_s":
            out[name] = parse_retention(value)
        else:
            out[name] = check_rate(value, name)
    return {k: out[k] for k in FIELDS if out.get(k)}


def describe(settings: dict) -> dict[str, Any]:
    """Settings as shown to users: ``{"ttl": "30d" | "none", "reads": n, "writes": n, "feed": "on" | "off",
    "feed_retention": "1d", "feed_before_images": bool}``."""
    on, before, retention = feed_settings(settings)
    return {"ttl": format_ttl(settings.get("ttl_s", 0)), "reads": settings.get("reads", 0),
            "writes": settings.get("writes", 0), "feed": "on" if on else "off",
            "feed_retention": format_ttl(retention), "feed_before_images": before}
