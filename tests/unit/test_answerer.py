"""The answerer thread (coordinator/answerer.py): requests that take the map's lock are answered off the
coordinator's loop, in the order they came, errors included; the loop hands them over without waiting."""

from __future__ import annotations

import queue
import time
from types import SimpleNamespace

from coordinator import admin_dispatch
from coordinator.answerer import Answerer
from coordinator.state.maps import MapService
from rangetable import protocol
from rangetable.errors import TableError
from tests.unit.map_lock import held_by_a_commit


def _answers(n: int, got: queue.SimpleQueue) -> list[list[bytes]]:
    return [got.get(timeout=5) for _ in range(n)]


def test_answers_come_in_order_with_errors_as_error_bodies() -> None:
    got: queue.SimpleQueue = queue.SimpleQueue()
    a = Answerer(got.put)

    def refused() -> bytes:
        raise TableError("TableNotFound", "no such table")

    def broken() -> bytes:
        raise KeyError("x")

    try:
        a.ask(b"c1", b"q1", lambda: protocol.ok(1))
        a.ask(b"c2", b"q2", refused)
        a.ask(b"c3", b"q3", lambda: None)  # answered later by whoever took it (a deferred answer): nothing now
        a.ask(b"c4", b"q4", broken)
        a.ask(b"c5", b"q5", lambda: protocol.ok(5))
        first, second, fourth, fifth = _answers(4, got)
    finally:
        a.stop()
    assert first == [b"reply", b"c1", b"q1", protocol.ok(1)]
    assert second[:3] == [b"reply", b"c2", b"q2"] and b"TableNotFound" in second[3]
    assert fourth[:3] == [b"reply", b"c4", b"q4"] and b"InternalError" in fourth[3]
    assert fifth == [b"reply", b"c5", b"q5", protocol.ok(5)]
    assert got.empty()


def test_the_loop_hands_over_a_status_while_a_commit_holds_the_map() -> None:
    """What the netsplit drill needed: the loop, asked for the status while the controller's commit holds the
    map's lock (hung on a cut etcd member), returns at once; the answer follows once the lock is free."""
    got: queue.SimpleQueue = queue.SimpleQueue()
    maps = MapService(lambda frames: None)
    registry = SimpleNamespace(servers={})
    co = SimpleNamespace(cluster=SimpleNamespace(map=maps, registry=registry), answerer=Answerer(got.put),
                         cfg=SimpleNamespace(replicas=3, source=None), pub_endpoint="tcp://p", term=4,
                         endpoint="tcp://c", takeover={}, publish=lambda: None,
                         map_snapshots=SimpleNamespace(answer=lambda ident, rid: snapshots.append(ident)))
    snapshots: list[bytes] = []
    with held_by_a_commit(maps):
        t0 = time.monotonic()
        assert admin_dispatch.handle(co, b"c1", b"q1", {"op": "status"}, "admin") is None  # type: ignore[arg-type]
        assert admin_dispatch.handle(co, b"c2", b"q2", {"op": "list_tables"}, "frontend") is None  # type: ignore[arg-type]
        # a frontend's map request: a snapshot, packed off the loop, not a delta waited for here
        assert admin_dispatch.handle(co, b"fe", b"q3", {"op": "map", "since": 0}, "frontend") is None  # type: ignore[arg-type]
        assert time.monotonic() - t0 < 0.5 and got.empty() and snapshots == [b"fe"]
    status, tables = _answers(2, got)
    co.answerer.stop()
    assert status[:3] == [b"reply", b"c1", b"q1"] and protocol.result(status[3])["term"] == 4
    assert tables[:3] == [b"reply", b"c2", b"q2"] and protocol.result(tables[3]) == {"tables": [], "next": None}
