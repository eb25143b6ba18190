"""A standby following the meta store in etcd (coordinator/standby/etcd_follower.py), on a real etcd: the watch
keeps it equal to the store through writes and deletes, a compaction that outran it makes it read a
new snapshot, an etcd restart makes it resume where it was, and a takeover gets the copy as of the
revision at which the term was won. Skipped with the reason printed when ``etcd`` is absent."""

from __future__ import annotations

import threading
import time
from typing import Any

from cli.bench.etcd_server import LocalEtcd
from coordinator.etcd.client import EtcdClient
from coordinator.leadership.etcd_election import META_NAME, EtcdLeadership
from coordinator.map.partition_map import PartitionMap
from coordinator.meta.etcd_store import EtcdMetaStore, open_etcd_for_term
from coordinator.standby.etcd_follower import EtcdFollower
from tests.unit.test_warm_standby import _same_map


def _leader(url: str, name: str) -> tuple[EtcdLeadership, EtcdMetaStore]:
    le = EtcdLeadership(url, f"tcp://{name}:1", f"tcp://{name}:2")
    deadline = time.monotonic() + 5
    while le.poll() is None:
        assert time.monotonic() < deadline, "no term won"
        time.sleep(0.05)
    return le, open_etcd_for_term(le, lambda: None)[0]


def _caught_up(f: EtcdFollower, meta: EtcdMetaStore, within: float = 10.0) -> None:
    """Wait until the follower holds exactly what etcd holds (items and map)."""
    deadline = time.monotonic() + within
    while True:
        truth = dict(meta.items())
        state = f.state
        if state is not None and state.items == truth:
            _same_map(state.pmap, PartitionMap.load(sorted(truth.items())))
            return
        assert time.monotonic() < deadline, (f.pos, len(truth), state and len(state.items))
        time.sleep(0.05)


def _started(f: EtcdFollower) -> None:
    """Start following and wait for the snapshot, so that the writes after it come through the watch."""
    f.start()
    deadline = time.monotonic() + 10
    while f.state is None:
        assert time.monotonic() < deadline, "no snapshot read"
        time.sleep(0.02)


def _split_writes(pm: PartitionMap, i: int) -> tuple[dict, list]:
    r = pm.ranges_of("t")[-1]
    mid = f"k{i:04d}"
    return pm.replace([r], [pm.new_range("t", r["low"], mid, "s1", 2), pm.new_range("t", mid, r["high"], "s2", 2)])


def _table(meta: EtcdMetaStore) -> PartitionMap:
    pm = PartitionMap()
    meta.commit(*pm.create_table("t", "s1")[1])
    return pm


def test_a_follower_follows_puts_and_deletes_and_a_takeover_gets_it_at_the_won_revision(etcd: str) -> None:
    url = etcd + "/follow"
    a, meta = _leader(url, "a")
    pm = _table(meta)
    f = EtcdFollower(meta.client.base, "/follow", read_timeout_s=0.5)
    _started(f)
    try:
        for i in range(20):  # splits: each replaces one range record by two (a delete and two puts)
            meta.commit(*_split_writes(pm, i))
        meta.commit({b"event/%012d" % i: {"seq": i, "kind": "x"} for i in range(5)})
        time.sleep(1.2)  # idle past the read timeout: the watch is opened again from where it was
        before = meta.revision()
        meta.commit({}, [b"event/%012d" % i for i in range(3)])
        after = meta.revision()
        _caught_up(f, meta)
        # the last meta change applied is that commit (a leader's own key may move etcd's revision past it)
        assert f.pos.reloads == 1 and before < f.pos.meta_rev <= after
        time.sleep(a.ttl_s + 0.6)  # a stops beating: its lease lapses, b wins the next term
        b, meta_b = _leader(url, "b")
        got = f.take(META_NAME, b.won_revision)
        assert got is not None and got.seq == b.won_revision
        truth = dict(meta_b.items())
        assert got.items == truth
        _same_map(got.pmap, PartitionMap.load(sorted(truth.items())))
        assert f.state is None  # handed over: the thread applies nothing more
    finally:
        f.close()


def test_a_follower_not_at_the_won_revision_gives_a_cold_takeover(etcd: str) -> None:
    a, meta = _leader(etcd + "/late", "a")
    _table(meta)
    f = EtcdFollower(meta.client.base, "/late", read_timeout_s=0.5)  # never started: it has nothing
    t0 = time.monotonic()
    assert f.take(META_NAME, a.won_revision + 1) is None and time.monotonic() - t0 >= 1.5  # waited, then cold
    assert EtcdFollower(meta.client.base, "/late").take("elsewhere", a.won_revision) is None


def test_a_compaction_that_outran_the_follower_makes_it_read_a_new_snapshot(etcd: str) -> None:
    _, meta = _leader(etcd + "/compact", "a")
    pm = _table(meta)
    f = EtcdFollower(meta.client.base, "/compact", read_timeout_s=0.3)
    f.snapshot()  # at revision R, not watching yet
    for i in range(5):
        meta.commit(*_split_writes(pm, i))
    rev = meta.revision()
    EtcdClient(meta.client.base).call("kv/compaction", {"revision": str(rev), "physical": True})
    f.watch()  # asks for R + 1, compacted: canceled
    assert f.state is None and f.pos.gaps == [rev]
    f.start()
    try:
        _caught_up(f, meta)
        assert f.pos.reloads == 2
    finally:
        f.close()


def test_a_follower_resumes_after_etcd_restarts(tmp_path: Any) -> None:
    from cli.bench.etcd_server import etcd_missing

    why = etcd_missing()
    if why:
        import pytest

        print(f"skipped: {why}")
        pytest.skip(why)
    server = LocalEtcd(str(tmp_path)).start()
    f: EtcdFollower | None = None
    try:
        _, meta = _leader(server.url + "/restart", "a")
        pm = _table(meta)
        f = EtcdFollower(server.base, "/restart", read_timeout_s=0.5)
        _started(f)
        meta.commit(*_split_writes(pm, 0))
        _caught_up(f, meta)
        server.stop()
        time.sleep(1.0)  # the follower's watch breaks and its retries fail meanwhile
        server.start()
        writer = threading.Thread(target=lambda: [meta.commit(*_split_writes(pm, i)) for i in range(1, 6)])
        writer.start()
        writer.join()
        _caught_up(f, meta, within=15)
        assert f.pos.reloads == 1  # resumed from its revision: no new snapshot
    finally:
        if f is not None:
            f.close()
        server.stop()


def test_takeover_bench_on_etcd_is_warm_and_cold_with_cold_takeover(local_etcd: LocalEtcd) -> None:
    from cli.bench.takeover import format_result, run_takeover_bench

    warm = run_takeover_bench(servers=20, ranges=2000, echo=print, follow_s=1.0, mode="kill", meta="etcd")
    print(format_result(warm))
    assert warm["warm"] is True and warm["seq"] and warm["seq"] <= warm["revision"]
    assert warm["first_lease_after_pause_s"] is not None and warm["takeover_ms"] is not None
    cold = run_takeover_bench(servers=20, ranges=2000, echo=print, follow_s=1.0, mode="kill", meta="etcd", cold=True)
    print(format_result(cold))
    assert cold["warm"] is False and cold["cold_takeover"] is True and len(cold["load_avg"]) == 2
