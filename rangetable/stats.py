"""Percentiles for the figures that benchmarks, drills and load reports print."""

from __future__ import annotations

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
