"""A standby's warm copy of the leader's meta store (coordinator/standby/warm.py), on real RocksDB.

The leader writes from its own process, as in a cluster; the standby follows through a secondary
instance; its map must equal the map loaded from the durable store, and at takeover it is handed
over only when it is exactly the store the new leader opened (reopened or copied).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from coordinator.leadership.lock_election import BASE_META
from coordinator.map.partition_map import PartitionMap
from coordinator.meta.store import MetaStore, open_for_term
from coordinator.standby.warm import WarmFollower
from tests.unit.test_warm_standby import _same_map

ROOT = Path(__file__).resolve().parents[2]

# A leader in its own process: makes tables, then splits, moves and deletes on each "step" line.
LEADER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from coordinator.meta.store import MetaStore
    from coordinator.map.partition_map import PartitionMap
    m = MetaStore({data!r})
    pm = PartitionMap()
    for t in ("alpha", "beta", "gamma"):
        m.commit(*pm.create_table(t, "s1")[1])
    m.commit({{b"server/s1": {{"endpoint": "tcp://a:1", "pid": 1}}, b"event/000000000001": {{"seq": 1}}}})
    print("ready", flush=True)
    step = 0
    for line in sys.stdin:
        if line.strip() == "stop":
            m.close()
            print("closed", flush=True)
            continue
        step += 1
        for t in ("alpha", "gamma"):  # split every range of two tables at a fresh key
            for r in pm.ranges_of(t):
                halves = [pm.new_range(t, r["low"], f"k{{step:03d}}", r["primary"], r["epoch"] + 1),
                          pm.new_range(t, f"k{{step:03d}}", r["high"], r["primary"], r["epoch"] + 1)]
                if r["low"] < f"k{{step:03d}}" and (r["high"] is None or f"k{{step:03d}}" < r["high"]):
                    m.commit(*pm.replace([r], halves))
        for i, r in enumerate(pm.ranges_of("alpha")):  # move every other range
            if i % 2 == step % 2:
                m.commit(*pm.update(r, primary="s2", epoch=r["epoch"] + 1))
        if step == 2:
            m.commit(*pm.delete_table("beta")[1])
        m.commit({{b"event/%012d" % (step + 1): {{"seq": step + 1}}}})
        print("stepped", flush=True)
""")


def _leader(data: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", LEADER.format(root=str(ROOT), data=str(data))],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def _step(p: subprocess.Popen, line: str = "step") -> str:
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


def _durable(data: Path, name: str) -> tuple[dict, PartitionMap]:
    m = MetaStore(str(data), name)
    try:
        items = m.items()
        return dict(items), PartitionMap.load(items)
    finally:
        m.close()


def test_a_standbys_warm_map_equals_the_leaders_after_splits_and_moves(tmp_path: Path) -> None:
    leader = _leader(tmp_path)
    follower = WarmFollower(str(tmp_path))
    try:
        follower.follow(BASE_META)
        for step in range(4):
            assert _step(leader) == "stepped"
            if step != 1:  # one round of changes is caught up together with the next
                follower.refresh()
        state = follower.refresh()
        assert _step(leader, "stop") == "closed"
        items, pmap = _durable(tmp_path, BASE_META)
        assert state is not None and state.items == items
        _same_map(state.pmap, pmap)
        assert "beta" not in state.pmap.tables and len(state.pmap.ranges_of("alpha")) == 5
        assert [e["seq"] for e in state.events(2)] == [4, 5]
        assert state.servers() == {"s1": {"endpoint": "tcp://a:1", "pid": 1}}
    finally:
        follower.close()
        leader.kill()
        leader.wait()


def test_a_killed_leaders_store_is_reopened_and_the_warm_map_taken_with_its_tail(tmp_path: Path) -> None:
    leader = _leader(tmp_path)
    follower = WarmFollower(str(tmp_path))
    follower.follow(BASE_META)
    follower.start()
    try:
        _step(leader)
        follower.refresh()
        _step(leader)  # the tail: written after the standby's last catch-up, before the leader died
        leader.kill()
        leader.wait()
        meta, how = open_for_term(str(tmp_path), BASE_META, "coordinator.t2", lambda: None)
        assert how["copied"] is None and meta.name == BASE_META
        warm = follower.take(BASE_META, how["seq"])
        assert warm is not None and warm.seq == how["seq"]
        items = meta.items()
        assert warm.items == dict(items)
        _same_map(warm.pmap, PartitionMap.load(items))
        # a warm copy of another sequence number is never taken: the leader loads cold
        other = WarmFollower(str(tmp_path))
        other.follow(BASE_META)
        meta.commit({b"event/000000000099": {"seq": 99}})
        assert other.take(BASE_META, how["seq"]) is None
        meta.close()
    finally:
        follower.close()
        if leader.poll() is None:
            leader.kill()
            leader.wait()


def test_a_paused_leaders_store_is_copied_and_the_warm_map_equals_the_copy(tmp_path: Path) -> None:
    leader = _leader(tmp_path)
    follower = WarmFollower(str(tmp_path), every_s=0.05)
    follower.follow(BASE_META)
    follower.start()
    try:
        for _ in range(3):
            _step(leader)
        os.kill(leader.pid, signal.SIGSTOP)
        meta, how = open_for_term(str(tmp_path), BASE_META, "coordinator.t2", lambda: None)
        assert how["copied"] and meta.name == "coordinator.t2"
        warm = follower.take(BASE_META, how["seq"])
        assert warm is not None
        items = meta.items()
        assert warm.items == dict(items)
        _same_map(warm.pmap, PartitionMap.load(items))
        meta.close()
        assert follower._sec_dir is None  # the secondary instance and its directory are gone
    finally:
        follower.close()
        os.kill(leader.pid, signal.SIGCONT)
        leader.kill()
        leader.wait()
