"""The per-partition throughput target: token buckets with Azure's 2000 entities/s default."""

from __future__ import annotations

import pytest

from partition_server.throttle import PartitionThrottle
from rangetable.errors import TableError


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_off_by_default_admits_everything() -> None:
    th = PartitionThrottle(0)
    for _ in range(10_000):
        th.admit("p")
    assert not th.enabled


@pytest.mark.parametrize(
    "target, script, expected_refusals",
    [
        # (advance seconds, pk, cost) steps
        (10, [(0, "a", 1)] * 10 + [(0, "a", 1)], 1),  # an 11th op in the same instant is refused
        (10, [(0, "a", 1)] * 10 + [(0.1, "a", 1)], 0),  # 0.1 s refills one token
        (10, [(0, "a", 1)] * 10 + [(0, "b", 1)], 0),  # partitions are independent
        (10, [(0, "a", 5), (0, "a", 5), (0, "a", 1)], 1),  # a batch costs its entity count
        (10, [(0, "a", 100)], 0),  # a batch bigger than the target passes on a full bucket
        (10, [(0, "a", 1), (0, "a", 100)], 1),  # … but not on a partly used one
        (10, [(0, "a", 10), (5.0, "a", 10), (0, "a", 1)], 1),  # the bucket holds at most one second
    ],
)
def test_token_bucket(target: float, script: list, expected_refusals: int) -> None:
    clock = Clock()
    th = PartitionThrottle(target, clock)
    refused = 0
    for dt, pk, cost in script:
        clock.t += dt
        try:
            th.admit(pk, cost)
        except TableError as exc:
            assert exc.error_code == "ServerBusy" and exc.status_code == 503
            refused += 1
    assert refused == expected_refusals == th.refused
