"""How a table's reserved throughput is split over its ranges: in proportion to observed demand, not
evenly (DynamoDB's adaptive capacity), so a table whose load is skewed still gets what it reserved.

Pure functions. A range's demand is what it used plus what it refused (entities/s, from its load
reports), smoothed over reports. Every range keeps a floor (:data:`FLOOR` of the reservation, spread
evenly), so an idle range can start taking load and show demand; the rest goes to the ranges by
demand: when it covers every range's demand with :data:`HEADROOM` to spare, each gets that and the
surplus is spread evenly, otherwise it is divided in proportion to demand. The shares always add up
to the reservation.
"""

from __future__ import annotations

FLOOR = 0.1  # of the reservation, spread evenly over the ranges
HEADROOM = 1.25  # a range's share covers this multiple of its demand when the reservation allows
SMOOTHING = 0.5  # weight of the newest demand in the smoothed demand


def split_reservation(total: float, demand: dict[str, float]) -> dict[str, float]:
    """Each range's share of ``total`` entities/s given its (smoothed) ``demand``; sums to ``total``."""
    n = len(demand)
    if n == 0 or total <= 0:
        return {}
    floor = total * FLOOR / n
    rest = total - floor * n
    want = {rid: max(0.0, d * HEADROOM - floor) for rid, d in demand.items()}
    need = sum(want.values())
    if need <= rest:
        spare = (rest - need) / n
        return {rid: floor + w + spare for rid, w in want.items()}
    return {rid: floor + rest * w / need for rid, w in want.items()}


def smooth(previous: float | None, observed: float) -> float:
    """The smoothed demand after a new observation."""
    return observed if previous is None else previous + SMOOTHING * (observed - previous)
