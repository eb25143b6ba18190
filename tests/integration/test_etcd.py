"""Coordinators elected through etcd, their meta store in etcd (``--meta etcd://``), on a real etcd.

Skipped with the reason printed when the ``etcd`` binary is absent (``apt-get install etcd-server``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator.etcd.client import EtcdClient, b64
from coordinator.leadership.etcd_election import EtcdLeadership, term_key
from coordinator.meta.etcd_store import open_etcd_for_term
from rangetable.errors import TableError
from tests.cluster import WORKLOAD_RATE, Cluster, ClusterFactory


def _win(le: EtcdLeadership, within: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if le.poll() is not None:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"no term won within {within} s")


def test_up_refuses_a_meta_url_that_is_not_etcd(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "cli.main", "up", "--data-dir", str(tmp_path), "--meta",
                          "http://127.0.0.1:2379"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "etcd://HOST:PORT" in out.stderr, out.stderr


def test_one_leader_of_two_and_the_standby_takes_over_when_the_lease_lapses(etcd: str) -> None:
    a = EtcdLeadership(etcd + "/elect", "tcp://a:1", "tcp://a:2")
    b = EtcdLeadership(etcd + "/elect", "tcp://b:1", "tcp://b:2")
    _win(a, 5)
    assert b.poll() is None and b.read_latest().endpoint == "tcp://a:1"
    end = time.monotonic() + 2.5  # a beats: b stays standby past the lease's TTL
    while time.monotonic() < end:
        a.beat()
        assert b.poll() is None
        time.sleep(0.2)
    assert not a.deposed()
    time.sleep(a.ttl_s + 0.1)  # no keep-alive for a whole TTL: a stops by its own clock, before b wins
    assert a.deposed()
    took = _win(b, 5)  # a stops beating (paused or dead): its lease lapses, b wins the next term
    assert b.term == a.term + 1 and took < 3.0
    assert a.deposed() and not b.deposed()
    a.beat()  # the lapsed lease cannot be renewed: a stays deposed
    assert a.deposed()


def test_a_deposed_leaders_commit_is_refused_by_etcd(etcd: str) -> None:
    a = EtcdLeadership(etcd + "/fence", "tcp://a:1", "tcp://a:2")
    b = EtcdLeadership(etcd + "/fence", "tcp://b:1", "tcp://b:2")
    _win(a, 5)
    meta_a, _ = open_etcd_for_term(a, lambda: None)  # no guard: only etcd's comparison fences
    meta_a.commit({b"range/r1": {"id": "r1"}, b"table/t": "T"})
    assert meta_a.items(b"range/") == [(b"range/r1", {"id": "r1"})]
    _win(b, 5)
    meta_b, how = open_etcd_for_term(b, lambda: None)
    with pytest.raises(TableError) as exc:
        meta_a.commit({b"range/r1": {"id": "r1", "primary": "stale"}})
    assert exc.value.error_code == "NotLeader"
    assert dict(meta_b.items()) == {b"range/r1": {"id": "r1"}, b"table/t": "T"}
    meta_b.commit({b"range/r2": {"id": "r2"}}, [b"range/r1"])
    assert [k for k, _ in meta_b.items()] == [b"range/r2", b"table/t"]


def test_items_page_through_many_keys(etcd: str) -> None:
    a = EtcdLeadership(etcd + "/paging", "tcp://a:1", "tcp://a:2")
    _win(a, 5)
    meta, _ = open_etcd_for_term(a, lambda: None)
    for start in range(0, 2500, 500):
        meta.commit({b"range/%06d" % i: {"n": i} for i in range(start, start + 500)})
    got = meta.items(b"range/")
    assert [v["n"] for _, v in got] == list(range(2500))


def test_a_cluster_on_etcd_serves_writes_and_survives_a_leader_kill(etcd: str, tmp_path: Path, cluster_factory: ClusterFactory) -> None:
    from cli.drills.coordinator_failover import MAX_GAP_S, format_report, run_coordinator_drill

    with cluster_factory(extra=["--coordinators", "2", "--meta", etcd + "/cluster"], data_dir=tmp_path / "c") as c:
        before = c.status()
        assert before["takeover"]["meta"] == "etcd"
        for name in ("coordinator", "election"):  # neither meta store nor election files on the data root
            assert not (tmp_path / "c" / name).exists(), name
        r = run_coordinator_drill(c.data_dir, mode="kill", pause_s=3.0, threads=2, seed=3, rate=WORKLOAD_RATE)
        print(format_report(r))
        assert r["took_over_s"] is not None and r["new_term"] > before["term"]
        assert r["lost_writes"] == 0, r["lost_detail"]
        assert r["client_errors"] == 0, r["client"]["errors"]
        assert r["worst_gap_s"] < MAX_GAP_S
        c.wait_map(timeout=15, what="every range served and reported")
        after = c.status()["takeover"]
        assert after["meta"] == "etcd"
        # The standby followed etcd's watch (coordinator/standby/etcd_follower.py): it took its warm copy, as of
        # the revision of the transaction that won its term (the term key's mod_revision).
        assert after["warm"] is True, after
        base = etcd.replace("etcd://", "http://")
        term = EtcdClient(base).call("kv/range", {"key": b64(term_key("/cluster"))})["kvs"][0]
        assert int(term["mod_revision"]) == after["seq"] <= after["revision"], (term, after)


def test_a_restarted_coordinator_that_wins_at_once_takes_the_followers_copy(etcd: str, tmp_path: Path,
                                                                           cluster_factory: ClusterFactory) -> None:
    """With one coordinator, the one the supervisor restarts after a kill wins its first campaign: it followed
    etcd before campaigning, so it takes the follower's copy too (CI found a restarted winner loading cold)."""
    with cluster_factory(extra=["--coordinators", "1", "--meta", etcd + "/one"], data_dir=tmp_path / "c") as c:
        before = c.status()
        c.kill("coordinator")
        c.wait(lambda: _term(c) > before["term"], timeout=30, what="the restarted coordinator leading")
        c.wait_map(timeout=15, what="every range served and reported")
        after = c.status()["takeover"]
        assert after["meta"] == "etcd" and after["warm"] is True, after


def _term(c: Cluster) -> int:
    try:
        return int(c.status()["term"])
    except TableError:  # not answering yet: restarting, or loading the map
        return 0
