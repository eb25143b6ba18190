"""Issue 24's cause, scripted: a standby takes over with a warm map that missed the leader's last writes.

A standby coordinator follows the leader's meta store through a RocksDB secondary instance
(``coordinator/standby/warm.py``). rocksdict's secondary was seen answering old items while it reported
the store's latest sequence number, so a standby that took over trusted a map without the leader's last
changes. On a shared root (one directory per range) the new leader then rolled a finished merge back:
it reloaded the two merged-away ranges — their directories were gone, so they opened empty — and
destroyed the merged range as garbage. Reads of acknowledged values answered "not found": the chaos
drill's ``linearizable False`` with nothing lost by its end (the workload rewrote every key).

The fault point ``warm.freeze`` (``rangetable/kernel/crash.py``) stands in for the secondary's stale answers,
so the sequence is deterministic: split, freeze the standby's copy, merge, write, kill the leader. The
fix (``WarmFollower.take(truth=…)``) makes the warm map equal to the store the new leader opened; with
``take`` trusting the sequence number instead, this test reads ``ResourceNotFound`` for half the keys.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cli.drills.coordinator_failover import leader_process
from cli.workload.layout import table_ranges
from rangetable import TableServiceClient
from rangetable.client import TableClient
from tests.cluster import ClusterFactory

PARTITIONS = 16
ROWS = 4


def _values(t: TableClient) -> dict:
    return {(e["PartitionKey"], e["RowKey"]): e["v"] for e in t.list_entities()}


def _freeze_the_standbys_copy(data_dir: Path) -> None:
    """Arm ``warm.freeze``: from now on the standby's copy misses every write of the leader."""
    time.sleep(1.0)  # the copy catches up with what came before (it refreshes every 0.25 s) ...
    (data_dir / "run").mkdir(exist_ok=True)
    (data_dir / "run" / "arm-warm.freeze").touch()  # ... and then stops taking writes in
    time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("change", ["merge", "split"])
def test_a_standby_whose_warm_copy_missed_a_change_takes_over_with_the_durable_map(
        tmp_path: Path, change: str, cluster_factory: ClusterFactory) -> None:
    env = {"RANGETABLE_FAULT_AT": "warm.freeze"}
    with cluster_factory(extra=["--coordinators", "2"], env=env, data_dir=tmp_path) as c:
        t = TableServiceClient(c.native, timeout=20).create_table("Stale")
        keys = [(f"p{p:02d}", f"r{r}") for p in range(PARTITIONS) for r in range(ROWS)]
        for pk, rk in keys:
            t.upsert_entity({"PartitionKey": pk, "RowKey": rk, "v": 1})
        rid = table_ranges(c.coordinator, "Stale")[0]["id"]
        if change == "merge":
            split = c.admin({"op": "split", "range": rid, "key": "p08"}, busy_retry_s=30)
            _freeze_the_standbys_copy(tmp_path)
            done = c.admin({"op": "merge", "range": split["left"]})
            after = [done["range"]]
        else:
            _freeze_the_standbys_copy(tmp_path)
            done = c.admin({"op": "split", "range": rid, "key": "p08"}, busy_retry_s=30)
            after = [done["left"], done["right"]]
        assert [r["id"] for r in table_ranges(c.coordinator, "Stale")] == after
        for pk, rk in keys:  # acknowledged into the ranges the change made
            t.upsert_entity({"PartitionKey": pk, "RowKey": rk, "v": 2})
        before = leader_process(c.refresh())
        c.kill(before["id"])
        c.wait(lambda: c.status()["term"] > before["term"], timeout=20, what="a new leader")
        assert c.status()["takeover"]["warm"], c.status()["takeover"]  # the warm path, not a cold load
        c.wait_map(timeout=45, what="a valid, fully served map")
        got = c.wait(lambda: [_values(t)], timeout=20, what="reads")[0]
        wrong = {k: got.get(k, "not found") for k in keys if got.get(k) != 2}
        assert not wrong, f"{len(wrong)} of {len(keys)} keys do not read their acknowledged value 2: {wrong}"
        assert [r["id"] for r in table_ranges(c.coordinator, "Stale")] == after  # the change stands
        t.upsert_entity({"PartitionKey": "p00", "RowKey": "after", "v": 3})
        assert t.get_entity("p00", "after")["v"] == 3
