"""A range's share of its table's reserved throughput (``rangetable table set --reads N --writes N``).

The coordinator splits a table's reserved entities/s over its ranges by their observed demand
(:mod:`coordinator.map.capacity`) and sends each server its ranges' shares with the lease. Here each
share is a token bucket refilled at the share per second and holding one second of it: an operation
costs one token per entity it touches; a request that finds too few tokens is refused with
``ServerBusy`` (503), whose message says how long until the bucket holds enough (the retry hint).
Refused requests are demand too: the range reports used and refused entities per second, which is
what the next split of the table's capacity follows. Pure apart from the injectable clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rangetable.errors import TableError

MIN_RETRY_S = 0.01


class Bucket:
    """One token bucket (``rate`` tokens/s, at most ``rate`` held; rate 0: unlimited)."""

    __slots__ = ("rate", "tokens", "at")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.at = now

    def refill(self, now: float) -> None:
        """Add the tokens earned since the last refill."""
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def wait_s(self, cost: int) -> float:
        """Seconds until ``cost`` tokens (capped at one second's worth) are held."""
        need = min(cost, self.rate) - self.tokens
        return max(MIN_RETRY_S, need / self.rate) if need > 0 else 0.0


class RangeCapacity:
    """The read and write buckets of one range, and what it used and refused since the last report."""

    __slots__ = ("clock", "table", "buckets", "used", "refused")

    def __init__(self, table: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.table = table
        self.buckets: list[Bucket | None] = [None, None]  # reads, writes
        self.used = [0, 0]  # entities since the last report: reads, writes
        self.refused = [0, 0]

    @property
    def limited(self) -> bool:
        """True when either direction has a share."""
        return self.buckets[0] is not None or self.buckets[1] is not None

    def set_shares(self, reads: float, writes: float) -> None:
        """Limit the range to ``reads`` and ``writes`` entities/s (0: unlimited); a bucket keeps its
        tokens (up to the new rate) across a change."""
        now = self.clock()
        for i, rate in enumerate((reads, writes)):
            b = self.buckets[i]
            if rate <= 0:
                self.buckets[i] = None
            elif b is None:
                self.buckets[i] = Bucket(float(rate), now)
            else:
                b.refill(now)
                b.rate = float(rate)
                b.tokens = min(b.tokens, b.rate)

    def admit(self, write: bool, cost: int) -> None:
        """Take ``cost`` tokens (at least one) or raise ServerBusy with the time to wait."""
        i = 1 if write else 0
        b = self.buckets[i]
        cost = max(1, cost)
        if b is not None:
            b.refill(self.clock())
            wait = b.wait_s(cost)
            if wait:
                self.refused[i] += cost
                kind = "writes" if write else "reads"
                raise TableError("ServerBusy", f"Table {self.table!r}: this range is over its share of the reserved "
                                               f"{kind} ({b.rate:.0f} entities/s); retry in {wait * 1000:.0f} ms.")
            b.tokens -= cost
        self.used[i] += cost

    def charge(self, write: bool, cost: int) -> None:
        """Count ``cost`` entities an admitted request turned out to touch beyond the one it was
        admitted for (a scan's page): the bucket may go below zero, delaying the next request."""
        i = 1 if write else 0
        b = self.buckets[i]
        if b is not None:
            b.tokens -= cost
        self.used[i] += cost

    def report(self, dt: float) -> dict[str, float]:
        """Used and refused entities/s over the last ``dt`` seconds (zeros left out); counters reset."""
        out = {}
        for name, (r, w) in (("used", self.used), ("refused", self.refused)):
            if r:
                out[f"{name}_reads_s"] = round(r / dt, 1)
            if w:
                out[f"{name}_writes_s"] = round(w / dt, 1)
        self.used, self.refused = [0, 0], [0, 0]
        return out
