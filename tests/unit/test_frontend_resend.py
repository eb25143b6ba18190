"""A frontend re-runs at once the requests waiting on a partition server that left the map (failed over)."""

from __future__ import annotations

from frontend.changes import ChangesWalk
from frontend.native.driver import DriverCore
from frontend.native.handler import Handler, Pending
from frontend.routing import MapCache


def test_requests_waiting_on_a_departed_server_are_rerun_and_others_keep_waiting() -> None:
    core = DriverCore.__new__(DriverCore)
    core.handler = Handler(core)  # type: ignore[arg-type]
    core.cache = MapCache()
    core.cache.servers = {"ps-2": "tcp://b", "ps-3": "tcp://c"}  # ps-1 (tcp://a) was declared dead
    on_dead, on_live, to_coord, done = (Pending(b"c", b"%d" % i, {"op": "get"}, 1e18) for i in range(4))
    done.done = True
    core._sub = {b"1": (on_dead, "relay", 0.0, "tcp://a"), b"2": (on_live, "relay", 0.0, "tcp://b"),
                 b"3": (to_coord, "relay", 0.0, "coordinator"), b"4": (done, "relay", 0.0, "tcp://a")}
    rerun: list[tuple[Pending, str]] = []
    core.retry_later = lambda p, why: rerun.append((p, why))  # type: ignore[method-assign]
    core._resend_from_departed()
    assert rerun == [(on_dead, "its server left the map")]
    assert sorted(core._sub) == [b"2", b"3"]  # the answered one is dropped, the live ones still wait


def test_a_feed_part_waiting_on_a_departed_server_becomes_a_gap_to_ask_again() -> None:
    core = DriverCore.__new__(DriverCore)
    core.handler = Handler(core)  # type: ignore[arg-type]
    core.cache = MapCache()
    core.cache.servers = {"ps-2": "tcp://b"}
    p = Pending(b"c", b"1", {"op": "changes"}, 1e18)
    walk = p.state = ChangesWalk(None, 10)

    class Route:
        range = {"id": "r1", "epoch": 1}

    part, _ = walk.ask(Route(), b"", None)  # type: ignore[arg-type]
    core._sub = {b"1": (p, ("changes", part), 0.0, "tcp://a")}
    core.retry_later = lambda p, why: None  # type: ignore[method-assign]
    core._resend_from_departed()
    assert walk.asked == {} and walk.gaps() == [(b"", None)]
