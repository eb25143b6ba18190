"""The server-wide budget of the replica-log rings (partition_server/store/replica_log.py: RingBudget)."""

from __future__ import annotations

import gc
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from partition_server.replication.protocol import RESEND_S
from partition_server.store.replica_log import (
    ReplicaLog,
    RingBudget,
    budget_limit,
    budget_share,
    configure_budget,
)
from tests.unit.replication_net import Net

KB = 1024


def fill(log: ReplicaLog, n: int, size: int = KB) -> None:
    for _ in range(n):
        log.append(log.last_seq + 1, b"x" * size)


def seqs(log: ReplicaLog) -> list[int]:
    return [s for s, _ in log.entries]


def test_budget_limit_keeps_what_in_sync_followers_lack_and_what_is_pinned() -> None:
    assert budget_limit(10, None, None) == 10  # a follower's ring: its own store holds every batch
    assert budget_limit(10, 7, None) == 7  # a primary's: batches after its commit point are kept
    assert budget_limit(10, 12, None) == 10
    assert budget_limit(10, 7, 4) == 4  # a snapshot pinned the ring at 4
    assert budget_limit(10, None, 3) == 3


@given(st.integers(0, 1 << 30), st.integers(0, 1000))
def test_budget_share_is_an_equal_part(budget: int, rings: int) -> None:
    share = budget_share(budget, rings)
    assert share * max(1, rings) <= budget < (share + 1) * max(1, rings)


def test_rings_under_the_budget_keep_their_own_bounds() -> None:
    b = RingBudget(100 * KB)
    a, c = ReplicaLog(budget=b, max_bytes=30 * KB), ReplicaLog(budget=b)
    fill(a, 40)
    fill(c, 20)
    assert a.nbytes == 30 * KB and c.nbytes == 20 * KB  # 50 KiB together: only a's own bound cut it
    assert b.usage() == {"bytes": 50 * KB, "batches": 50, "rings": 2}


def test_over_the_budget_a_growing_ring_drops_its_oldest_down_to_its_share() -> None:
    b = RingBudget(64 * KB)
    cold, hot = ReplicaLog(budget=b), ReplicaLog(budget=b)
    fill(cold, 16)  # 16 KiB, under its 32 KiB share: never trimmed
    fill(hot, 200)
    assert cold.nbytes == 16 * KB
    assert hot.nbytes <= 48 * KB and b.total() <= 64 * KB
    assert seqs(hot) == list(range(hot.last_seq - len(hot.entries) + 1, hot.last_seq + 1))  # the newest kept
    assert hot.reaches(hot.last_seq - 10) and not hot.reaches(0)


def test_a_ring_never_drops_a_batch_an_in_sync_follower_lacks() -> None:
    b = RingBudget(16 * KB)
    primary = ReplicaLog(budget=b)
    primary.needed_after = 5  # the commit point: some in-sync follower holds only up to batch 5
    fill(primary, 100)
    assert seqs(primary)[0] == 6 and primary.reaches(5)  # over its share, but every batch after 5 stays
    primary.needed_after = 90  # the follower caught up: the next append trims to the share
    fill(primary, 1)
    assert primary.nbytes <= 16 * KB and primary.reaches(90) and not primary.reaches(5)


def test_a_pinned_ring_keeps_what_the_snapshot_needs() -> None:
    b = RingBudget(8 * KB)
    log = ReplicaLog(budget=b)
    fill(log, 4)
    log.pin("f", 2)
    fill(log, 20)
    assert log.reaches(2)
    log.unpin("f")
    fill(log, 1)
    assert log.nbytes <= 8 * KB and not log.reaches(2)


def test_a_ring_gone_leaves_the_budget() -> None:
    b = RingBudget(8 * KB)
    fill(ReplicaLog(budget=b), 8)
    gc.collect()
    keep = ReplicaLog(budget=b)
    fill(keep, 8)
    assert keep.nbytes == 8 * KB and b.usage()["rings"] == 1  # the dropped ring's bytes count no more
    assert b.total() == b.usage()["bytes"] == 8 * KB


def test_a_ring_gone_cold_gives_back_what_it_holds_beyond_its_share() -> None:
    b = RingBudget(64 * KB)
    cold, hot = ReplicaLog(budget=b), ReplicaLog(budget=b)
    fill(cold, 60)  # alone under the budget: it keeps 60 KiB
    assert cold.nbytes == 60 * KB
    fill(hot, 40)  # the hot ring takes the room the cold one holds beyond its 32 KiB share
    assert cold.nbytes == 32 * KB and hot.nbytes == 32 * KB and b.total() == 64 * KB
    assert seqs(cold)[0] == 29  # its oldest went first


def test_the_running_total_matches_the_rings() -> None:
    b = RingBudget(100 * KB)
    rings = [ReplicaLog(budget=b, max_bytes=40 * KB) for _ in range(5)]
    for i in range(300):
        fill(rings[i * 7 % 5], 1, size=KB // 2 + i % 3 * 300)
    assert b.total() == sum(r.nbytes for r in rings) == b.usage()["bytes"] <= 100 * KB


def test_configure_budget_refuses_under_a_mib() -> None:
    import pytest

    from partition_server.store import replica_log

    before = replica_log.SERVER_BUDGET.max_bytes
    with pytest.raises(ValueError, match="at least 1 MiB"):
        configure_budget(1000)
    configure_budget(before)


def test_since_stops_at_a_ring_trimmed_under_it() -> None:
    log = ReplicaLog(budget=RingBudget(1 << 20))
    fill(log, 5)
    assert [s for s, _ in log.since(2)] == [3, 4, 5]
    log._drop_oldest()
    log._drop_oldest()
    log._drop_oldest()  # batch 3 is gone: a follower at 2 is beyond the ring
    assert not log.reaches(2) and log.since(3) == [(4, b"x" * KB), (5, b"x" * KB)]


def test_under_budget_pressure_in_sync_followers_keep_up_and_a_lost_one_is_rebuilt(tmp_path: Path) -> None:
    net = Net(tmp_path, budget=RingBudget(4 * KB))
    try:
        net.hello("b", "c")
        for _ in range(60):
            net.write()
            net.pump(only={"b", "c"} if net.n <= 5 else {"b"})  # c stops hearing after batch 5
        ring = net.p.outbox.log
        assert net.f["b"].applied == 60 and not net.p.followers["b"].behind_log
        assert ring.reaches(5)  # c is in the in-sync set: what it lacks is kept however far over budget
        net.p.configure({"a": "ea", "b": "eb", "c": "ec"}, ["a", "b"], ["c"])  # the coordinator drops c
        net.write()
        net.pump(only={"b"})
        assert not ring.reaches(5) and ring.nbytes <= 4 * KB  # now its batches may go
        net.sends(RESEND_S + 0.01)
        assert net.p.followers["c"].behind_log and net.p.report(net.t, 1.0)["rebuild"] == ["c"]
        for f in net.f.values():
            assert f.log.nbytes <= 4 * KB or f.log is ring
    finally:
        net.close()
