"""What keeps the coordinator's loop answering heartbeats with a large map: the collector's pauses
and freezes (rangetable/kernel/gc_tuning.py), the load history's chunked sweep, map snapshots packed by a
thread of their own (coordinator/map_snapshots.py), and unchanged range lists not kept."""

from __future__ import annotations

import gc
import time
from types import SimpleNamespace

import pytest

from coordinator import leases
from coordinator.balancer import load_history
from coordinator.balancer.load_history import LoadHistory
from coordinator.control import operations as ops
from coordinator.map.server_info import ServerInfo
from coordinator.map_snapshots import MapSnapshots
from coordinator.state.maps import MapService
from coordinator.state.registry import ServerRegistry
from rangetable import protocol
from rangetable.errors import TableError
from rangetable.kernel.gc_tuning import GcPauses
from tests.unit.map_lock import held_by_a_commit


@pytest.fixture
def pauses():
    p = GcPauses().install()
    yield p
    gc.callbacks.remove(p._on_gc)
    gc.unfreeze()


def test_gc_pauses_are_recorded_and_survivors_frozen_only_after_an_older_collection(pauses) -> None:
    gc.collect(0)
    assert pauses.count[0] >= 1 and pauses.max_s[0] >= 0.0
    assert not pauses.freeze_survivors()  # only young collections so far: nothing frozen
    frozen = gc.get_freeze_count()
    keep = [[i] for i in range(1000)]  # long-lived containers
    gc.collect(1)
    assert pauses.freeze_survivors()
    assert gc.get_freeze_count() >= frozen + len(keep)
    assert not pauses.freeze_survivors()  # once per older collection
    snap = pauses.snapshot()
    assert snap["collections"][1] >= 1 and snap["freezes"] == 1 and snap["frozen_objects"] >= len(keep)
    assert pauses.freeze_survivors(now=True) and pauses.frozen == 2


def test_load_history_sweeps_silent_ranges_a_chunk_per_report(monkeypatch) -> None:
    monkeypatch.setattr(load_history, "SWEEP_CHUNK", 10)
    h = LoadHistory(window_s=8.0)
    h.add(0.0, "s1", {f"r{i:03d}": {"reads_s": 1.0} for i in range(50)})
    h.add(1.0, "s2", {"x": {"reads_s": 1.0}})
    assert len(h.ranges()) == 51
    t = 20.0  # r000…r049 stopped reporting: older than the window
    h.add(t, "s2", {"x": {"reads_s": 2.0}})  # starts a sweep, checks the first 10
    assert 40 <= len(h.ranges()) <= 42
    for _ in range(6):
        t += 0.1
        h.add(t, "s2", {"x": {"reads_s": 2.0}})
    assert h.ranges() == ["x"]
    assert h.servers() == ["s2"]


class _Store:
    """A meta store that only takes commits."""

    name = "test"

    def commit(self, puts: dict, deletes: list | tuple = ()) -> None:
        pass


def _coordinator(n: int) -> SimpleNamespace:
    sent: list[list[bytes]] = []
    maps = MapService(lambda frames: None)
    maps.meta = _Store()  # type: ignore[assignment]
    maps.pmap.create_table("t", "s1")
    return SimpleNamespace(maps=maps, registry=ServerRegistry(maps), sent=sent, notify=sent.append)


def test_snapshots_are_packed_by_their_thread_and_cached_per_map_state() -> None:
    co = _coordinator(1)
    snaps = MapSnapshots(co.maps, co.registry, co.notify)
    snaps.pub_endpoint = "tcp://p"
    try:
        assert snaps.answer(b"fe1", b"q1") is None  # the loop does not wait for it
        deadline = time.monotonic() + 5
        while not co.sent and time.monotonic() < deadline:
            time.sleep(0.01)
        (frames,) = co.sent
        assert frames[:3] == [b"reply", b"fe1", b"q1"]
        snap = protocol.result(frames[3])
        assert snap["version"] == co.maps.pmap.version and [r["id"] for r in snap["ranges"]] == ["r000001"]
        assert snaps.answer(b"fe2", b"q2") == frames[3]  # the same map state: the cached bytes at once
        co.maps.commit(({}, []))  # a commit without a new version is a new state too
        assert snaps.answer(b"fe3", b"q3") is None
    finally:
        snaps.stop()


def test_an_unchanged_range_list_keeps_the_stored_one() -> None:
    info = ServerInfo("s1", "tcp://a", "i1", 0.0, ranges=[["r000001", 1, "serving"]])
    stored = info.ranges
    maps = MapService(lambda frames: None)
    maps.pmap.create_table("t", "s1")
    registry = ServerRegistry(maps)
    registry.servers["s1"] = info
    calls = []
    cl = SimpleNamespace(map=maps, registry=registry, cfg=SimpleNamespace(lease_s=2.0))
    balancer = SimpleNamespace(on_heartbeat=lambda *a: None)
    controller = SimpleNamespace(submit=lambda *a, **k: calls.append(k), jobs=SimpleNamespace(qsize=lambda: 0))
    req = {"op": "heartbeat", "server": "s1", "endpoint": "tcp://a", "incarnation": "i1",
           "ranges": [["r000001", 1, "serving"]], "load": {}}
    assert leases.heartbeat(cl, controller, balancer, 1, req)["lease_s"] == 2.0
    assert info.ranges is stored and not calls  # equal: the decoded list is dropped, nothing to reconcile
    leases.heartbeat(cl, controller, balancer, 1, {**req, "ranges": []})
    assert info.ranges == [] and calls  # changed: stored, and the server is reconciled


def test_a_heartbeat_is_answered_while_a_commit_holds_the_map() -> None:
    """A commit whose meta-store round trip hangs (etcd losing its leader) holds the map's lock: a known
    server's heartbeat is answered with its lease renewed meanwhile, its report left for the next; a server
    the coordinator does not know waits for the lock (its registration is persisted before any answer)."""
    info = ServerInfo("s1", "tcp://a", "i1", 0.0)
    maps = MapService(lambda frames: None)
    registry = ServerRegistry(maps)
    registry.servers["s1"] = info
    cl = SimpleNamespace(map=maps, registry=registry, cfg=SimpleNamespace(lease_s=2.0, lease_grace_s=1.0))
    balancer = SimpleNamespace(on_heartbeat=lambda *a: None)
    controller = SimpleNamespace(submit=lambda *a, **k: None, jobs=SimpleNamespace(qsize=lambda: 0))
    req = {"op": "heartbeat", "server": "s1", "endpoint": "tcp://a", "incarnation": "i1", "geo": 3,
           "ranges": [["r000001", 1, "serving"]], "load": {}}
    with held_by_a_commit(maps):
        t0 = time.monotonic()
        got = leases.heartbeat(cl, controller, balancer, 7, req)
        assert time.monotonic() - t0 < 1.0
        assert got == {"lease_s": 2.0, "version": maps.pmap.version, "term": 7, "geo": {"epoch": 0, "writes": "all"}}
        assert info.last_seen > 0 and info.geo_epoch == 3 and info.ranges == []  # renewed; the report waits
        assert leases.renewal(cl, 7, {**req, "incarnation": "i2"}) is None  # restarted: it registers, locked
        # the loop's other questions do not wait for the lock either (CI's netsplit drill: the loop blocked in
        # the overdue check while a commit hung on a cut etcd leader, and every lease lapsed)
        t0 = time.monotonic()
        assert not leases.overdue(cl, info.last_seen + 1.0) and leases.overdue(cl, info.last_seen + 60.0)
        assert time.monotonic() - t0 < 0.5
    leases.heartbeat(cl, controller, balancer, 7, req)
    assert info.ranges == [["r000001", 1, "serving"]]


def test_a_dead_server_is_declared_without_waiting_for_a_commit() -> None:
    """The loop declares a silent server dead only when it gets the map's lock within ``LOCK_WAIT_S``, and leaves
    the durable part (its event, a map version, reassigning its ranges) to the controller: while a commit held the
    lock (hung on a cut etcd leader), the loop waited in the declaration and every other server's lease lapsed
    (the netsplit drill's primary-and-etcd fault)."""
    maps = MapService(lambda frames: None)
    registry = ServerRegistry(maps)
    silent, fresh = ServerInfo("s1", "tcp://a", "i1", time.monotonic() - 60.0), ServerInfo("s2", "tcp://b", "i2",
                                                                                           time.monotonic())
    registry.servers.update({"s1": silent, "s2": fresh})
    cl = SimpleNamespace(map=maps, registry=registry, cfg=SimpleNamespace(lease_s=2.0, lease_grace_s=1.0))
    jobs: list[tuple] = []
    controller = SimpleNamespace(submit=lambda fn, *a, **k: jobs.append((fn, a, k)))
    told: list[str] = []
    balancer = SimpleNamespace(on_server_dead=told.append)
    with held_by_a_commit(maps):
        t0 = time.monotonic()
        leases.check_servers(cl, controller, balancer)
        assert time.monotonic() - t0 < 0.5
        assert silent.alive and not jobs and not told  # asked again on the next tick
    leases.check_servers(cl, controller, balancer)
    assert not silent.alive and fresh.alive and told == ["s1"]
    [(fn, args, _kw)] = jobs
    assert fn is ops.record_dead and args[2][0]["server"] == "s1" and args[2][0]["silent_s"] >= 60.0
    leases.check_servers(cl, controller, balancer)
    assert len(jobs) == 1  # declared once


def test_the_dead_are_recorded_and_their_ranges_reassigned_even_when_the_meta_store_fails() -> None:
    maps = MapService(lambda frames: None)
    recorded: list[list[dict]] = []

    def record_many(events: list[dict]) -> None:
        recorded.append(events)
        raise TableError("ServerBusy", "etcd did not answer")

    jobs: list[tuple] = []
    cl = SimpleNamespace(map=maps, events=SimpleNamespace(record_many=record_many))
    controller = SimpleNamespace(submit=lambda fn, *a, **k: jobs.append((fn, k)))
    with pytest.raises(TableError):
        ops.record_dead(cl, controller, [{"server": "s1", "silent_s": 3.5}])
    assert recorded == [[{"kind": "server_dead", "server": "s1", "silent_s": 3.5}]]
    assert jobs == [(ops.assign_orphans, {"key": "orphans"})]
