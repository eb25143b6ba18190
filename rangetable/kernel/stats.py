"""Percentiles for the figures that benchmarks, drills and load reports print, and a step clock for
the durations of an operation's steps."""

from __future__ import annotations

import time
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p`` percentile (0 ≤ p ≤ 1) of ``values``; None when there are none."""
    if not values:
        return None
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def percentile_ms(seconds: Sequence[float], p: float, digits: int = 2) -> float:
    """The ``p`` percentile of durations in seconds, in milliseconds (0.0 when there are none)."""
    v = percentile(seconds, p)
    return 0.0 if v is None else round(v * 1000, digits)


class StepClock:
    """Times consecutive steps of one operation into ``steps`` (name → ms); a no-op when it is None."""

    def __init__(self, steps: dict[str, float] | None) -> None:
        self.steps = steps
        self._t = time.monotonic()

    def step(self, name: str) -> None:
        """Record the time since the previous step (or since creation) under ``name``."""
        if self.steps is None:
            return
        now = time.monotonic()
        self.steps[name] = round((now - self._t) * 1e3, 2)
        self._t = now
