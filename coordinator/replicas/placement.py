"""Where orphaned ranges go: a pure function, unit-tested in ``tests/unit/test_control_plane_units.py``."""

from __future__ import annotations

import heapq


def place_orphans(orphans: list[str], counts: dict[str, int]) -> dict[str, str]:
    """Give each orphaned range (in the given order) to the live server that then owns the fewest
    ranges (ties: the smaller id), counting the ranges placed so far.

    ``counts`` maps every live server to the number of ranges it owns now; with no live server
    nothing is placed. A dead server's ranges are thus spread over the least-loaded servers
    instead of all landing on one (HBase's master and PD spread a dead node's regions the same way).
    """
    heap = [(n, sid) for sid, n in counts.items()]
    heapq.heapify(heap)
    out: dict[str, str] = {}
    if not heap:
        return out
    for rid in orphans:
        n, sid = heapq.heappop(heap)
        out[rid] = sid
        heapq.heappush(heap, (n + 1, sid))
    return out
