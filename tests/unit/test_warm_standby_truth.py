"""At takeover the warm map is brought to exactly the durable store the new leader opened, whatever the
secondary instance read (found by the replicated chaos drill: both standbys' warm maps lacked a leadership
transfer written 0.2 s before the leader was killed, while reporting the store's sequence number; the next
leader then told the old primary to lead again at the old epoch). Real RocksDB, one process."""

from __future__ import annotations

from pathlib import Path

from coordinator.leadership.lock_election import BASE_META
from coordinator.map.partition_map import PartitionMap
from coordinator.meta.store import MetaStore
from coordinator.standby.warm import WarmFollower
from tests.unit.test_warm_standby import _same_map


def test_a_stale_warm_copy_with_the_stores_sequence_number_is_corrected_from_the_store(tmp_path: Path) -> None:
    meta = MetaStore(str(tmp_path), BASE_META)
    pm = PartitionMap()
    meta.commit(*pm.create_table("orders", "ps-3")[1])
    follower = WarmFollower(str(tmp_path))
    follower.follow(BASE_META)
    try:
        assert follower.refresh() is not None
        r = pm.ranges_of("orders")[0]
        meta.commit(*pm.update(r, primary="ps-2", epoch=r["epoch"] + 1))  # the transfer the standbys missed
        seq = meta.db.latest_sequence_number()
        stale = follower.state
        assert stale is not None and stale.pmap.ranges[r["id"]]["primary"] == "ps-3"

        def missed_tail() -> object:  # what the secondary instance answered: old items, the store's number
            stale.seq = seq
            return stale

        follower.refresh = missed_tail  # type: ignore[method-assign]
        truth = {bytes(k): bytes(v) for k, v in meta.db.items()}
        warm = follower.take(BASE_META, seq, truth)
        assert warm is not None and warm.seq == seq
        assert warm.pmap.ranges[r["id"]]["primary"] == "ps-2" and warm.pmap.ranges[r["id"]]["epoch"] == r["epoch"]
        assert warm.items == dict(meta.items())
        _same_map(warm.pmap, PartitionMap.load(meta.items()))
    finally:
        follower.close()
        meta.close()
