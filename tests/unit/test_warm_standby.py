"""A standby's warm copy of the leader's meta store (coordinator/standby/warm.py), on real RocksDB.

The tests that start no process; those that do are in tests/integration/test_warm_standby.py.
"""
from __future__ import annotations

from coordinator.map.partition_map import PartitionMap
from coordinator.standby.warm import diff_raw


def _same_map(a: PartitionMap, b: PartitionMap) -> None:
    assert a == b  # tables, ranges, version, next_id
    for primary in set(a.primaries()) | set(b.primaries()):
        assert sorted(a.primary_ids(primary)) == sorted(b.primary_ids(primary))
    assert a.busy_ids() == b.busy_ids()
    assert not a.check()


def test_diff_raw() -> None:
    assert diff_raw({b"a": b"1", b"b": b"2"}, {b"b": b"3", b"c": b"4"}) == ({b"b": b"3", b"c": b"4"}, [b"a"])
    assert diff_raw({b"a": b"1"}, {b"a": b"1"}) == ({}, [])


def test_apply_keeps_the_indexes_as_load_builds_them() -> None:
    pm = PartitionMap()
    _, (puts, _) = pm.create_table("t", "s1")
    follower = PartitionMap.load(sorted(puts.items()))
    r = pm.ranges_of("t")[0]
    halves = [pm.new_range("t", "", "m", "s1", 2), pm.new_range("t", "m", None, "s2", 2)]
    follower.apply(*pm.replace([r], halves))
    follower.apply(*pm.update(pm.ranges_of("t")[1], state="moving"))
    _same_map(follower, pm)
    follower.apply(*pm.delete_table("t")[1])
    _same_map(follower, pm)
