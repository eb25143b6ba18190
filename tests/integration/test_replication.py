"""Replicated ranges (``rangetable up --replicas 3``) with real processes: every acknowledged write is on every
in-sync replica's own disk, so killing a server and deleting its directory loses nothing; a paused follower
leaves the in-sync set and writes go on; a paused primary is replaced and serves nothing afterwards."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rangetable import TableServiceClient
from tests.cluster import Cluster


@pytest.fixture(scope="module")
def cluster(cluster_factory: Any) -> Cluster:
    return cluster_factory(extra=["--no-dashboard"], balancer=False)  # one range per table: the tests split, move, merge it


@pytest.fixture
def replicated(cluster: Cluster) -> Iterator[Cluster]:
    """The module's cluster, each test on tables of its own, once it is whole again after the test before:
    every server alive, every range served and every replica in sync."""
    def whole() -> bool:
        st = cluster.status()
        return all(s["alive"] for s in st["servers"]) and all(
            sorted(r["insync"]) == sorted(r["replicas"]) and len(r["replicas"]) == 3 for r in st["ranges"])

    cluster.wait_map(timeout=60, what="a valid, fully served map before the test")
    cluster.wait(whole, timeout=60, what="every replica in sync before the test")
    yield cluster


class Writer(threading.Thread):
    """Writes rows with distinct keys as fast as it can and remembers the ones acknowledged."""

    def __init__(self, data_dir: str, table: str, name: str) -> None:
        super().__init__(daemon=True)
        self.client = TableServiceClient.from_cluster(data_dir).get_table_client(table)
        self.name = name
        self.acked: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.gaps: list[float] = []  # the longest time without an acknowledgement, per second

    def run(self) -> None:
        i = 0
        last = time.monotonic()
        while not self.stop.is_set():
            rk = f"{self.name}-{i:06d}"
            try:
                self.client.upsert_entity({"PartitionKey": f"p{i % 7}", "RowKey": rk, "n": i})
                now = time.monotonic()
                self.gaps.append(now - last)
                last = now
                self.acked.append(rk)
            except Exception as exc:  # retried by the client already; an unknown outcome is not counted
                self.errors.append(f"{type(exc).__name__}: {exc}")
            i += 1


def _ranges(c: Cluster) -> list[dict]:
    return [r for r in c.status()["ranges"]]


def _rows(c: Cluster, table: str) -> set[str]:
    client = TableServiceClient.from_cluster(c.data_dir).get_table_client(table)
    return {e["RowKey"] for e in client.list_entities()}


def _one_range(c: Cluster, table: str) -> dict:
    (rec,) = [r for r in _ranges(c) if r["table"] == table]
    return rec


def _writing(c: Cluster, table: str, warmup: float, writers: int = 1) -> list[Writer]:
    """Create ``table`` and keep ``writers`` writers on it; returns them after ``warmup`` seconds."""
    c.admin({"op": "create_table", "table": table})
    ws = [Writer(c.data_dir, table, f"w{i}") for i in range(writers)]
    for w in ws:
        w.start()
    time.sleep(warmup)
    return ws


def _stop_and_check(c: Cluster, table: str, writers: list[Writer]) -> set[str]:
    """Stop the writers and check that every write they had acknowledged is in ``table``; returns them."""
    for w in writers:
        w.stop.set()
    for w in writers:
        w.join(30)
    acked = {rk for w in writers for rk in w.acked}
    lost = acked - _rows(c, table)
    assert lost == set(), f"{len(lost)} acknowledged writes lost"
    return acked


def test_three_copies_on_three_disks(replicated: Cluster) -> None:
    c = replicated
    c.admin({"op": "create_table", "table": "copies"})
    client = TableServiceClient.from_cluster(c.data_dir).get_table_client("copies")
    for i in range(50):
        client.upsert_entity({"PartitionKey": "p", "RowKey": f"{i:03d}", "v": i})
    rec = _one_range(c, "copies")
    assert sorted(rec["replicas"]) == ["ps-1", "ps-2", "ps-3"]
    assert sorted(rec["insync"]) == ["ps-1", "ps-2", "ps-3"]
    for sid in ("ps-1", "ps-2", "ps-3"):
        assert os.path.isdir(os.path.join(c.data_dir, "servers", sid, "ranges", rec["id"])), sid
    assert not os.path.isdir(os.path.join(c.data_dir, "ranges", rec["id"]))


def test_killing_the_primary_and_wiping_its_disk_loses_no_acknowledged_write(replicated: Cluster) -> None:
    c = replicated
    writers = _writing(c, "diskloss", 3, writers=3)
    rec = _one_range(c, "diskloss")
    victim = rec["primary"]
    c.kill(victim)
    shutil.rmtree(os.path.join(c.data_dir, "servers", victim), ignore_errors=True)
    killed = time.monotonic()
    time.sleep(6)
    acked = _stop_and_check(c, "diskloss", writers)
    after = [g for w in writers for g in w.gaps]
    assert len(acked) > 100
    now = _one_range(c, "diskloss")
    assert now["primary"] != victim and now["epoch"] > rec["epoch"]
    # the victim left the in-sync set; restarted empty by the supervisor, it may be rebuilt and back already
    assert victim not in now["insync"] or now["insync"].index(victim) > 0
    assert max(after) < 10, f"a write waited {max(after):.1f} s (killed at {killed})"
    print(f"disk loss: {len(acked)} acknowledged, 0 lost, longest wait {max(after):.2f} s")


def test_a_paused_follower_leaves_the_insync_set_and_rejoins(replicated: Cluster) -> None:
    c = replicated
    (w,) = _writing(c, "paused", 1)
    rec = _one_range(c, "paused")
    follower = next(s for s in rec["replicas"] if s != rec["primary"])
    pid = c.kill(follower, signal.SIGSTOP)
    try:
        c.wait(lambda: follower not in [r for r in _ranges(c) if r["table"] == "paused"][0]["insync"], timeout=10,
               what=f"{follower} left the in-sync set")
        n = len(w.acked)
        print(f"paused follower: longest wait {max(w.gaps):.2f} s")
        time.sleep(2)
        assert len(w.acked) > n + 10, "writes did not go on without the paused follower"
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # declared dead meanwhile, and killed by the supervisor: it restarts
            pass
    c.wait(lambda: follower in [r for r in _ranges(c) if r["table"] == "paused"][0].get("insync", []), timeout=30,
           what=f"{follower} back in the in-sync set")
    _stop_and_check(c, "paused", [w])


def test_a_replicated_range_splits_on_every_replica_under_writes(replicated: Cluster) -> None:
    c = replicated
    (w,) = _writing(c, "splits", 1.5)
    rec = _one_range(c, "splits")
    res = c.admin({"op": "split", "range": rec["id"], "key": "p3"}, timeout=60)
    time.sleep(1)
    halves = sorted((r for r in _ranges(c) if r["table"] == "splits"), key=lambda r: r["low"])
    assert [h["id"] for h in halves] == [res["left"], res["right"]]
    for h in halves:
        assert sorted(h["replicas"]) == ["ps-1", "ps-2", "ps-3"] and sorted(h["insync"]) == ["ps-1", "ps-2", "ps-3"]
        for sid in h["replicas"]:
            assert os.path.isdir(os.path.join(c.data_dir, "servers", sid, "ranges", h["id"])), (sid, h["id"])
    # the halves' followers hold the same rows as their primary: promote one by killing the primary
    c.kill(halves[0]["primary"])
    time.sleep(4)
    _stop_and_check(c, "splits", [w])


def test_a_primary_moves_to_an_insync_replica_in_milliseconds(replicated: Cluster) -> None:
    c = replicated
    (w,) = _writing(c, "transfer", 1)
    rec = _one_range(c, "transfer")
    target = next(s for s in rec["insync"] if s != rec["primary"])
    res = c.admin({"op": "move", "range": rec["id"], "server": target}, timeout=60)
    time.sleep(1)
    _stop_and_check(c, "transfer", [w])
    now = _one_range(c, "transfer")
    assert now["primary"] == target and now["epoch"] > rec["epoch"]
    assert sorted(now["insync"]) == ["ps-1", "ps-2", "ps-3"]
    assert res["offline_ms"] < 2000, res
    print(f"transfer offline {res['offline_ms']} ms")


def test_replicated_halves_merge_back_on_every_replica(replicated: Cluster) -> None:
    c = replicated
    (w,) = _writing(c, "merges", 1)
    rec = _one_range(c, "merges")
    res = c.admin({"op": "split", "range": rec["id"], "key": "p3"}, timeout=60)
    right = next(r for r in _ranges(c) if r["id"] == res["right"])
    other = next(s for s in right["insync"] if s != right["primary"])
    c.admin({"op": "move", "range": res["right"], "server": other}, timeout=60)  # the merge moves it back
    time.sleep(0.5)
    merged = c.admin({"op": "merge", "range": res["left"]}, timeout=60)
    time.sleep(1)
    out = _one_range(c, "merges")
    assert out["id"] == merged["range"] and out["low"] == "" and out["high"] is None
    assert sorted(out["replicas"]) == ["ps-1", "ps-2", "ps-3"] and sorted(out["insync"]) == ["ps-1", "ps-2", "ps-3"]
    c.kill(out["primary"])  # a follower of the merged range takes over with every row
    time.sleep(4)
    _stop_and_check(c, "merges", [w])
