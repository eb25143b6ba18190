"""Data-driven balancer scenarios: a map and its load history in, the exact actions out.

Each scenario module has ``SCENARIOS``, a list built with ``S(name, given=..., now=..., expect=...)``:

* ``given``: ``servers`` (the live ones), ``ranges`` (``R(...)`` records), ``beats`` (heartbeats
  ``(t, server, {range id: load report})``, built with ``beats``), optional ``recent`` and
  ``in_flight``;
* ``settings``: overrides passed through ``Settings.set`` as strings, like the CLI does;
* ``now``: when the balancer runs;
* ``expect``: the actions in order, ``A(kind, range, key, target, **detail items that must match)``.

``tests/unit/test_balancer.py`` runs every scenario of every module listed in ``MODULES``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MODULES = ["split", "hotspots", "moves", "merges"]
MiB = 1 << 20

Beat = tuple[float, str, dict[str, dict]]


def R(rid: str, low: str, high: str | None, primary: str | None, table: str = "t", state: str = "serving") -> dict:
    """A range record as in the partition map."""
    return {"id": rid, "table": table, "low": low, "high": high, "primary": primary, "epoch": 1,
            "path": f"ranges/{rid}", "state": state}


def keys(spec: str) -> list[str]:
    """``"a*10 b*5"`` -> ``["a"] * 10 + ["b"] * 5`` (a sampled-keys list; ``*1`` may be omitted)."""
    out: list[str] = []
    for word in spec.split():
        key, _, n = word.partition("*")
        out += [key] * int(n or 1)
    return out


def load(rps: float = 0.0, sample: str | list[str] = "", mib: float = 0.0, **extra: Any) -> dict:
    """One range's load report: ``rps`` as reads/s, a key sample, a data size in MiB."""
    ks = keys(sample) if isinstance(sample, str) else list(sample)
    return {"reads_s": float(rps), "writes_s": 0.0, "entities_s": 0.0, "busy_s": 0.0, "lat_avg_ms": 1.0,
            "lat_max_ms": 2.0, "entities": 0, "bytes": int(mib * MiB), "sample": ks, **extra}


def beats(server: str, rid: str, t0: float, t1: float, rps: float = 0.0,
          sample: str | Callable[[float], list[str]] = "", mib: float = 0.0, step: float = 1.0) -> list[Beat]:
    """Heartbeats from ``server`` reporting ``rid`` at t0, t0+step, ... t1 (inclusive), all alike
    (``sample`` may be a function of the heartbeat's time)."""
    out: list[Beat] = []
    n = int(round((t1 - t0) / step))
    for i in range(n + 1):
        t = t0 + i * step
        ks = sample(t) if callable(sample) else sample
        out.append((t, server, {rid: load(rps, ks, mib)}))
    return out


def A(kind: str, rng: str, key: str | None = None, target: str | None = None, **detail: Any) -> dict:
    """An expected action; ``detail`` items must equal the action's."""
    return {"kind": kind, "range": rng, "key": key, "target": target, "detail": detail}


def S(name: str, *, given: dict, now: float, expect: list[dict], settings: dict | None = None) -> dict:
    """A scenario."""
    return {"name": name, "given": given, "now": float(now), "expect": expect, "settings": settings or {}}
