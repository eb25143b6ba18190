"""The -secondary endpoint's pure parts: which replica a secondary read goes to (frontend/routing.py), the
coordinator's LastSyncTime (coordinator/sync_time.py) and a primary's sync lag (partition_server/replication/protocol.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.map.server_info import ServerInfo
from coordinator.sync_time import last_sync
from frontend.routing import Route, secondary_order
from partition_server.ranges import RangeSet
from partition_server.replication.protocol import RESEND_S
from rangetable.errors import TableError
from tests.unit.replication_net import Net

SERVERS = {"a": "tcp://a", "b": "tcp://b", "c": "tcp://c"}


def rec(**kw: object) -> dict:
    base = {"id": "r1", "table": "t", "low": "", "high": None, "primary": "a", "epoch": 3, "state": "serving"}
    return {**base, **kw}


# --- routing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("record", "servers", "primary", "pick", "want"), [
    (rec(), SERVERS, "tcp://a", 0, ["tcp://a"]),  # not replicated: the primary
    (rec(replicas=["a", "b", "c"], insync=["a", "b", "c"]), SERVERS, "tcp://a", 0, ["tcp://b", "tcp://c", "tcp://a"]),
    (rec(replicas=["a", "b", "c"], insync=["a", "b", "c"]), SERVERS, "tcp://a", 1, ["tcp://c", "tcp://b", "tcp://a"]),
    (rec(replicas=["a", "b", "c"], insync=["c", "a", "b"]), SERVERS, "tcp://a", 2, ["tcp://b", "tcp://c", "tcp://a"]),
    (rec(replicas=["a", "b", "c"], insync=["a", "c"]), SERVERS, "tcp://a", 7, ["tcp://c", "tcp://a"]),  # b lags
    (rec(replicas=["a", "b", "c"], insync=["a"]), SERVERS, "tcp://a", 0, ["tcp://a"]),  # no follower in sync
    (rec(replicas=["a", "b", "c"], insync=["a", "b", "c"]), {"a": "tcp://a", "c": "tcp://c"}, "tcp://a", 0,
     ["tcp://c", "tcp://a"]),  # b is not in the map's server table (dead)
    (rec(replicas=["a", "b", "c"], insync=["a", "b"]), SERVERS, None, 0, ["tcp://b"]),  # primary down: the follower
    (rec(replicas=["a", "b"], insync=["a"]), SERVERS, None, 0, []),  # nothing can serve it
])
def test_secondary_order(record: dict, servers: dict, primary: str | None, pick: int, want: list[str]) -> None:
    assert secondary_order(record, servers, primary, pick) == want


def test_route_secondary_endpoint_retries_walk_the_candidates() -> None:
    route = Route(rec(replicas=["a", "b", "c"], insync=["a", "b", "c"]), dict(SERVERS))
    assert [route.secondary_endpoint(n) for n in range(4)] == ["tcp://b", "tcp://c", "tcp://a", "tcp://b"]
    assert route.secondary_endpoint(0, pick=1) == "tcp://c"


def test_route_secondary_endpoint_reads_followers_of_an_offline_primary() -> None:
    servers = dict(SERVERS)
    route = Route(rec(replicas=["a", "b", "c"], insync=["a", "b"], state="moving"), servers)
    assert route.endpoint is None and route.secondary_endpoint(0) == "tcp://b" and route.secondary_endpoint(1) == "tcp://b"
    del servers["b"]  # the route sees the server table change
    assert route.secondary_endpoint(0) is None
    assert Route(rec(), servers).secondary_endpoint(0) == "tcp://a"
    assert Route(rec(state="moving"), servers).secondary_endpoint(0) is None


# --- LastSyncTime -------------------------------------------------------------------------------


def info(sid: str, seen: float, repl: dict) -> ServerInfo:
    return ServerInfo(sid, f"tcp://{sid}", "inc", seen, repl=repl)


def test_last_sync_without_replication_is_now() -> None:
    got = last_sync([rec(), rec(id="r2", primary="b")], {"a": info("a", 90.0, {})}, 100.0, 5000.0)
    assert got == {"last_sync": 5000.0, "lag_s": 0.0, "replicated": 0, "behind": None}


def test_last_sync_is_the_earliest_range_sync_point() -> None:
    ranges = [rec(replicas=["a", "b"], insync=["a", "b"]),
              rec(id="r2", primary="b", replicas=["a", "b"], insync=["a", "b"]),
              rec(id="r3", primary="a", replicas=["a", "b"], insync=["a"])]
    servers = {"a": info("a", 99.5, {"r1": {"sync_lag": 0.25}, "r3": {"sync_lag": 0.0}}),
               "b": info("b", 99.0, {"r2": {"sync_lag": 2.0}})}
    got = last_sync(ranges, servers, 100.0, 5000.0)
    assert got["last_sync"] == pytest.approx(5000.0 - 1.0 - 2.0) and got["behind"] == "r2"
    assert got["replicated"] == 3 and got["lag_s"] == pytest.approx(3.0)


def test_last_sync_stalls_on_a_silent_primary_and_ignores_bad_reports() -> None:
    ranges = [rec(replicas=["a", "b"], insync=["a", "b"]), rec(id="r2", primary="z", replicas=["z", "b"], insync=["b"]),
              rec(id="r3", primary="b", replicas=["a", "b"], insync=["a", "b"])]
    servers = {"a": info("a", 40.0, {"r1": {"sync_lag": 0.0}}),  # silent for 60 s (dead or paused)
               "b": info("b", 100.0, {"r3": {"sync_lag": "x"}})}  # garbage: counted as no lag
    got = last_sync(ranges, servers, 100.0, 5000.0)
    assert got["last_sync"] == pytest.approx(4940.0) and got["behind"] == "r1" and got["replicated"] == 2
    servers["b"].repl = {"r3": {"sync_lag": -5}}
    assert last_sync(ranges[2:], servers, 100.0, 5000.0)["last_sync"] == 5000.0


# --- the primary's sync lag ---------------------------------------------------------------------


def test_sync_lag_is_the_age_of_the_oldest_batch_an_in_sync_follower_lacks(net: Net) -> None:
    net.hello("b", "c")
    assert net.p.sync_lag(time.monotonic()) == 0.0
    net.write(3)
    later = time.monotonic() + 5.0
    assert net.p.sync_lag(later) >= 5.0
    net.pump(only={"b"})  # c's copy is lost on the way: it still lacks them
    assert net.p.sync_lag(later) >= 5.0
    net.deliver(net.sends(RESEND_S + 0.1))  # sent again
    assert net.p.sync_lag(later) == 0.0
    assert net.p.report(later, 10.0)["sync_lag"] == 0.0


def test_sync_lag_counts_only_in_sync_followers(tmp_path: Path) -> None:
    n = Net(tmp_path, insync=["a", "b"])
    try:
        n.hello("b", "c")
        n.write(2)
        n.pump(only={"b"})  # c, out of the in-sync set, lags: the secondary does not read it
        assert n.p.sync_lag(time.monotonic() + 5.0) == 0.0
        n.write(1)
        n.p.configure({"a": "ea", "b": "eb", "c": "ec"}, ["a"], [])  # no follower in sync: the primary is read
        assert n.p.sync_lag(time.monotonic() + 5.0) == 0.0
    finally:
        n.close()


# --- a follower's copy serves secondary reads only ----------------------------------------------


def test_a_follower_serves_secondary_reads_and_nothing_else(tmp_path: Path) -> None:
    rs = RangeSet(str(tmp_path))
    rs.load({"id": "r1", "table": "t", "low": "", "high": None, "epoch": 3, "path": "r1"})
    try:
        rs.data("write", {"op": "write", "range": "r1", "epoch": 3, "rid": "w1",
                          "write": {"op": "insert", "pk": "p", "rk": "r", "props": {"n": [2, 1]}}})
        rs.open["r1"].state = "following"  # as Replicator.attach leaves a follower's copy
        get = {"op": "get", "range": "r1", "epoch": 3, "pk": "p", "rk": "r", "select": None}
        scan = {"op": "scan", "range": "r1", "epoch": 3, "lo": b"", "hi": None, "filter": None, "select": None,
                "limit": 10, "budget_ms": 100}
        for req in (get, scan):
            with pytest.raises(TableError) as ei:
                rs.data(req["op"], req)
            assert ei.value.error_code == "NotPrimary"
        assert rs.data("get", {**get, "secondary": True}) is not None
        assert rs.data("scan", {**scan, "secondary": True}) is not None
        write = {"op": "write", "range": "r1", "epoch": 3, "rid": "w2", "secondary": True,
                 "write": {"op": "insert", "pk": "p", "rk": "s", "props": {}}}
        batch = {"op": "batch", "range": "r1", "epoch": 3, "rid": "w3", "secondary": True,
                 "ops": [{"op": "insert", "pk": "p", "rk": "t", "props": {}}]}
        for req in (write, batch):
            with pytest.raises(TableError) as ei:
                rs.data(req["op"], req)
            assert ei.value.error_code == "NotPrimary"
        assert rs.open["r1"].load.reads == 2
        assert "r1" not in rs.load_report() and rs.open["r1"].load.reads == 0  # not counted, not kept
        rs.open["r1"].state = "draining"  # a sealed primary: busy for secondary reads too
        with pytest.raises(TableError) as ei:
            rs.data("get", {**get, "secondary": True})
        assert ei.value.error_code == "RangeBusy"
    finally:
        rs.unload_all()
