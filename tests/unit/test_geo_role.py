"""A cluster's geo role (issue 35, ``docs/geo.md``, "Failover"): decided once on the coordinator
(:class:`coordinator.map.geo_role.GeoRole`), enforced by the partition servers from their leases, followed by the
frontends from the PUB socket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.map.geo_role import ROLE_KEY, GeoRole
from coordinator.map.server_info import ServerInfo
from coordinator.map.source_cuts import SourceCuts, copy_key, cut_key
from frontend.native.handler import Handler, Pending
from partition_server.ranges import RangeSet
from rangetable.errors import TableError
from tests.unit.test_geo_follow import _secondary

SOURCE = {"native": "tcp://10.0.0.1:1", "curve": {"servers": {}, "client": {}}}
KEYS = {"servers": {"coordinator": "S" * 40}, "client": {"public": "P" * 40, "secret": "Q" * 40}}


def test_a_persisted_role_wins_over_the_flag_a_cluster_was_started_with() -> None:
    g = GeoRole()
    g.load(None, None)
    assert (g.role, g.epoch, g.follows) == ("primary", 0, False)
    g.load(None, SOURCE)  # `up --secondary-of`, nothing persisted yet
    assert (g.role, g.source, g.follows) == ("secondary", SOURCE, True)
    g.load({"role": "primary", "epoch": 4, "source": None}, SOURCE)  # promoted by a failover, then restarted
    assert (g.role, g.epoch, g.follows) == ("primary", 4, False)
    g.load({"role": "nonsense", "epoch": 4}, None)
    assert g.role == "primary" and g.epoch == 0


def test_every_change_raises_the_epoch_and_is_persisted_and_the_same_role_again_is_nothing() -> None:
    g = GeoRole()
    assert g.change("fenced") == {ROLE_KEY: {"role": "fenced", "epoch": 1, "source": None, "promoted": None, "fence": None}}
    assert g.change("fenced") == {}
    assert g.change("secondary", SOURCE) == {ROLE_KEY: {"role": "secondary", "epoch": 2, "source": SOURCE, "promoted": None,
                                                        "fence": None}}
    assert g.change("secondary", SOURCE) == {}
    other = {**SOURCE, "native": "tcp://10.0.0.2:1"}
    assert g.change("secondary", other)[ROLE_KEY]["epoch"] == 3  # another source is another role
    assert g.change("primary", SOURCE) == {ROLE_KEY: {"role": "primary", "epoch": 4, "source": None, "promoted": None,
                                                        "fence": None}}


@pytest.mark.parametrize("role,source", [("boss", None), ("secondary", None), ("secondary", {"native": "x"}),
                                         ("secondary", {"curve": {}})])
def test_a_bad_role_change_is_refused_and_changes_nothing(role: str, source: Any) -> None:
    g = GeoRole()
    with pytest.raises(TableError) as e:
        g.change(role, source)
    assert e.value.error_code == "InvalidInput"
    assert (g.role, g.epoch) == ("primary", 0)


def test_servers_take_all_writes_on_a_primary_and_only_a_sources_otherwise() -> None:
    g = GeoRole()
    assert g.lease() == {"epoch": 0, "writes": "all"}
    g.change("fenced")
    assert g.lease() == {"epoch": 1, "writes": "none"}
    g.change("secondary", SOURCE)
    assert g.lease() == {"epoch": 2, "writes": "source"}


def test_a_role_is_in_force_once_every_live_server_echoed_its_epoch() -> None:
    g = GeoRole()
    g.change("fenced")
    a, b, c = (ServerInfo(s, "", "i", 0.0) for s in ("ps-1", "ps-2", "ps-3"))
    assert g.waiting([a, b, c]) == ["ps-1", "ps-2", "ps-3"]
    a.geo_epoch, b.geo_epoch = 1, 0
    assert g.status([a, b, c]) == {"role": "fenced", "epoch": 1, "source": None, "promoted": None, "fence": None,
                                   "in_force": False,
                                   "waiting": ["ps-2", "ps-3"]}
    b.geo_epoch, c.alive = 1, False  # a dead server's lease ran out before it was declared dead
    assert g.status([a, b, c])["in_force"] is True


def test_a_secondary_made_at_cuts_replaces_every_cut_and_copy_and_a_primary_has_none() -> None:
    cuts = SourceCuts()
    cuts.publish("old", 5, 0.1, 0.0)
    cuts.note_copy("copying", {"start": "c", "next": None, "copied": 3}, 0.0)
    v = cuts.version
    puts, deletes = cuts.install({"Orders": 100, "old": 7}, 1.0)
    assert puts == {cut_key("orders"): {"cut": 100, "lag_s": 0.0}, cut_key("old"): {"cut": 7, "lag_s": 0.0}}
    assert deletes == [copy_key("copying")]
    assert cuts.wire() == {"orders": 100, "old": 7} and cuts.copies == {} and cuts.version > v
    assert cuts.publish("orders", 90, 0.0, 1.5)[0] == {}  # installed as persisted: the next write a period on
    assert cuts.wire()["orders"] == 100  # never lower
    assert sorted(cuts.clear()) == [cut_key("old"), cut_key("orders")]
    assert cuts.wire() == {} and cuts.last_sync(["orders"]) is None
    with pytest.raises(TableError):
        cuts.install({"orders": -1}, 3.0)


def _store(tmp_path: Path, writes: str) -> RangeSet:
    rs = RangeSet(str(tmp_path), geo_writes=writes)
    rs.load({"id": "r1", "table": "t", "low": "", "high": None, "epoch": 3, "path": "r1"})
    return rs


WRITE = {"op": "write", "range": "r1", "epoch": 3, "write": {"op": "insert_or_replace", "pk": "p", "rk": "r", "props": {}}}
APPLY = {"op": "source_apply", "range": "r1", "epoch": 3, "claim": 1, "records": [], "pos": [5, b"\xff"]}


@pytest.mark.parametrize("writes,write_code,apply_code", [
    ("unknown", "ServerBusy", "ServerBusy"),  # before its first lease said: nothing
    ("none", "InsufficientAccountPermissions", "SourceFenced"),  # fenced: not even its appliers
    ("all", None, "SourceFenced"),  # a primary: a late applier writes nothing
    ("source", "InsufficientAccountPermissions", None),  # fenced or a secondary: its appliers only
])
def test_a_partition_server_takes_the_writes_of_the_role_its_lease_said(tmp_path: Path, writes: str,
                                                                        write_code: str | None,
                                                                        apply_code: str | None) -> None:
    rs = _store(tmp_path, writes)
    try:
        for req, code in ((WRITE, write_code), (APPLY, apply_code)):
            if code is None:
                rs.data(req["op"], dict(req))
                continue
            with pytest.raises(TableError) as e:
                rs.data(req["op"], dict(req))
            assert e.value.error_code == code
    finally:
        rs.unload_all()


def test_a_lease_changes_the_role_a_server_enforces_and_an_older_one_does_not(tmp_path: Path) -> None:
    rs = _store(tmp_path, "unknown")
    try:
        rs.on_lease({"geo": {"epoch": 2, "writes": "source"}})
        assert (rs.geo_epoch, rs.geo_writes) == (2, "source")
        rs.on_lease({"geo": {"epoch": 1, "writes": "all"}})  # an answer to an older heartbeat
        assert (rs.geo_epoch, rs.geo_writes) == (2, "source")
        rs.on_lease({})  # a takeover's early lease: nothing said
        assert rs.geo_writes == "source"
        rs.on_lease({"geo": {"epoch": 3, "writes": "all"}})
        rs.data("write", dict(WRITE))
    finally:
        rs.unload_all()


def test_frontends_follow_the_role_their_coordinator_sent_and_never_an_older_one() -> None:
    handler, fe = _secondary()  # started with --secondary-of: refuses writes until told otherwise
    write = {"op": "write", "table": "orders", "write": {"op": "upsert", "pk": "p", "rk": "r", "props": {}}}
    assert handler.role == "secondary"
    fe.cache.set_geo({"role": "primary", "epoch": 5, "source": None})
    assert handler.role == "primary"
    handler.run(Pending(b"client", b"1", dict(write), 1e18))  # routed to the range's primary
    assert fe.sent and fe.sent[-1][1]["op"] == "write"
    fe.cache.set_geo({"role": "secondary", "epoch": 4, "source": SOURCE})  # older: ignored
    assert handler.role == "primary"
    fe.cache.set_geo({"role": "fenced", "epoch": 6, "source": None})
    with pytest.raises(TableError) as e:
        handler.run(Pending(b"client", b"2", dict(write), 1e18))
    assert e.value.error_code == "InsufficientAccountPermissions"
    fe.cache.set_cuts({})
    got = handler._cut(Pending(b"client", b"3", {"op": "get"}, 1e18), "orders")
    assert got == (True, None)  # a fenced primary has no cuts: it reads now
    fe.cache.set_cuts({"orders": 7})
    assert handler._cut(Pending(b"client", b"4", {"op": "get"}, 1e18), "orders") == (True, 7)  # a fenced secondary
    fe.cache.set_geo({"role": "bogus", "epoch": 9})
    assert handler.role == "fenced"


def test_a_frontend_that_never_heard_keeps_the_role_it_started_with() -> None:
    handler, fe = _secondary()
    assert fe.cache.geo is None and handler.role == "secondary"
    assert Handler(fe).role == "primary"  # type: ignore[arg-type]


def test_a_server_confirms_a_new_role_once_every_write_it_accepted_before_is_committed(tmp_path: Path) -> None:
    """A write accepted just before a fence is answered only once its batch commits; until then the server does
    not echo the fence's epoch, so a planned failover reads no drain point that could miss it."""
    import zmq

    from partition_server.replication.protocol import Primary
    from partition_server.replication.replicator import Replicator
    from partition_server.store.range_store import RangeStore
    from partition_server.store.replica_log import ReplicaLog
    from rangetable import curve

    rep = Replicator(zmq.Context.instance(), curve.KeyRing.create(str(tmp_path / "keys")), data_dir=str(tmp_path))
    store = RangeStore.open(tmp_path / "p")
    try:
        p = rep.primaries["r1"] = Primary("r1", 1, store, ReplicaLog(0), {"b": "tcp://b"}, ["a", "b"], "a", 2)
        store.write({"op": "insert_or_replace", "pk": "p", "rk": "r", "props": {}})  # its reply is held
        marks = rep.marks()  # the fence arrives now
        assert not rep.settled(marks)
        p.on_ack("b", p.outbox.seq, 0.0)  # its batch commits: the held reply leaves
        assert rep.settled(marks)
        store.write({"op": "insert_or_replace", "pk": "p", "rk": "s", "props": {}})
        later = rep.marks()
        assert not rep.settled(later)
        del rep.primaries["r1"]  # the range moved away: its held replies were dropped, never acknowledged
        assert rep.settled(later)
    finally:
        rep.close()
        store.close()


def test_a_forced_failover_keeps_whom_to_fence_until_it_is_fenced() -> None:
    g = GeoRole("secondary", 3, SOURCE)
    old = {"coordinator": "tcp://10.0.0.1:2", "curve": KEYS}
    with pytest.raises(TableError):
        g.change("primary", fence={"native": "x"})  # a client key's file cannot fence anybody
    assert g.role == "secondary"
    g.change("primary", promoted={"orders": 5}, fence=old)
    assert g.fencing == old and g.status([])["fence"] == {"source": "tcp://10.0.0.1:2", "done": False}
    assert g.fenced_old() == {ROLE_KEY: {**g.stored(), "fence": {"target": old, "done": True}}}
    assert g.fencing is None and g.epoch == 4  # fencing the old source changes nothing here
    loaded = GeoRole()
    loaded.load(g.stored(), None)
    assert (loaded.promoted, loaded.fencing, loaded.fence) == ({"orders": 5}, None, g.fence)
    g.change("fenced")
    assert g.fence is None and g.promoted is None  # kept until the next change


def test_the_old_source_is_fenced_expecting_the_epoch_it_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from coordinator import geo_roles

    asked: list[dict] = []
    answers: list[Any] = [TableError("OperationTimedOut", "no answer"), {"role": "primary", "epoch": 7},
                          {"role": "fenced", "epoch": 8}]

    def call(endpoint: str, body: dict, timeout: float = 10.0) -> Any:
        asked.append(body)
        got = answers.pop(0)
        if isinstance(got, TableError):
            raise got
        return got

    committed: list[dict] = []
    geo = GeoRole("primary", 4, None, {"t": 1}, {"target": {"coordinator": "tcp://old:1", "curve": KEYS},
                                                 "done": False})
    import threading
    maps = SimpleNamespace(geo=geo, lock=threading.RLock(),
                           meta_store=lambda: SimpleNamespace(commit=lambda puts, deletes: committed.append(puts)))
    events: list[tuple] = []
    cl = SimpleNamespace(map=maps, events=SimpleNamespace(record=lambda kind, **f: events.append((kind, f))))
    monkeypatch.setattr(geo_roles, "call", call)
    assert geo_roles.fence_old(cl) is False  # the link is down: asked again later
    assert geo_roles.fence_old(cl) is True
    assert asked[1:] == [{"op": "geo_role"}, {"op": "geo_role", "role": "fenced", "expect": 7}]
    assert geo.fencing is None and committed == [{ROLE_KEY: geo.stored()}]
    assert events == [("geo_old_source_fenced", {"source": "tcp://old:1", "epoch": 8})]
    assert geo_roles.fence_old(cl) is True and len(asked) == 3  # nothing more to do


def test_a_rejoining_secondary_is_installed_with_a_diff_copy_under_way_from_each_cut() -> None:
    from rangetable import feed_cursor

    cuts = SourceCuts()
    puts, deletes = cuts.install({}, 1.0, {"Orders": 50})
    want = {"start": feed_cursor.encode((50, None)), "next": None, "copied": 0, "rejoin": 50}
    assert cuts.wire() == {} and cuts.copies == {"orders": want} and puts == {copy_key("orders"): want}
    cuts.note_copy("orders", {**want, "copied": 7, "sealed": 60, "junk": "x"}, 3.0)  # a successor replays at once
    assert cuts.copies["orders"] == {**want, "copied": 7, "sealed": 60}
    cuts.publish("orders", 61, 0.0, 4.0)
    assert cuts.copies == {} and cuts.wire() == {"orders": 61}  # the first cut ends it


def test_a_fenced_secondary_keeps_its_source_so_a_forced_promotion_can_be_retried() -> None:
    g = GeoRole("secondary", 2, SOURCE)
    g.change("fenced")  # a forced promotion under way, stopped halfway (a server did not confirm in time)
    assert (g.role, g.source, g.follows, g.lease()["writes"]) == ("fenced", SOURCE, False, "none")
    primary = GeoRole("primary", 2)
    primary.change("fenced")  # a planned failover's source: nothing to promote it from
    assert primary.source is None
