"""Per-PartitionKey throughput targets, as Azure enforces them (2000 entities/s per partition).

Off by default. With a target of N entities/s, each PartitionKey gets a token bucket refilled at N
per second and holding at most N tokens (one second of burst); an operation costs one token per
entity it touches. A request that finds the bucket empty is refused with ``ServerBusy`` (503), so
users can test their retry logic and key design against the limits they will meet in Azure.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rangetable.errors import TableError

MAX_BUCKETS = 100_000


class PartitionThrottle:
    """Token buckets keyed by PartitionKey; pure apart from the injectable clock."""

    def __init__(self, target: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.target = float(target)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # pk -> (tokens, last refill time)
        self.refused = 0

    @property
    def enabled(self) -> bool:
        """True when a target is set."""
        return self.target > 0

    def admit(self, pk: str, cost: int = 1) -> None:
        """Take ``cost`` tokens from the partition's bucket or raise ServerBusy."""
        if self.target <= 0:
            return
        now = self.clock()
        tokens, last = self._buckets.get(pk, (self.target, now))
        tokens = min(self.target, tokens + (now - last) * self.target)
        if tokens + 1e-9 < cost and not (cost > self.target and tokens + 1e-9 >= self.target):
            self._buckets[pk] = (tokens, now)
            self.refused += 1
            raise TableError("ServerBusy", f"partition {pk!r} is over its target of {self.target:g} entities/s")
        self._buckets[pk] = (tokens - cost, now)
        if len(self._buckets) > MAX_BUCKETS:
            self._forget(now)

    def _forget(self, now: float) -> None:
        full = [pk for pk, (t, last) in self._buckets.items() if t + (now - last) * self.target >= self.target]
        for pk in full:
            del self._buckets[pk]
