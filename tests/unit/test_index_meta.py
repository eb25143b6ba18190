"""The coordinator's side of secondary indexes: definitions committed with their entries table and the base
table's feed settings, dropped alone or with their table, refused where they would break; claims granted,
renewed, expired, numbered monotonically across a takeover, and withheld by a new leader for a lease."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from coordinator import admin_dispatch
from coordinator.control import operations as ops
from coordinator.map.claims import CLAIM_PREFIX, Claims, claim_key
from coordinator.map.deltas import PendingChanges, build_delta, fold
from coordinator.map.indexes import index_key
from coordinator.map.partition_map import PartitionMap
from coordinator.map.server_info import ServerInfo
from coordinator.state.cluster import Cluster
from coordinator.state.events import EventLog
from coordinator.state.maps import MapService
from coordinator.state.registry import ServerRegistry
from frontend.routing import MapCache
from rangetable.errors import TableError
from rangetable.index_def import MAX_INDEXES


class _Store:
    """An in-memory meta store."""

    name = "test"

    def __init__(self) -> None:
        self.data: dict[bytes, Any] = {}
        self.commits = 0

    def commit(self, puts: dict, deletes: list | tuple = ()) -> None:
        self.commits += 1
        for k in deletes:
            self.data.pop(k, None)
        self.data.update(puts)

    def items(self, prefix: bytes = b"") -> list[tuple[bytes, Any]]:
        return sorted((k, v) for k, v in self.data.items() if k.startswith(prefix))


class _Controller:
    """Records the commands sent to partition servers; every one succeeds."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def call(self, server: str, msg: dict) -> Any:
        self.sent.append((server, msg))
        return {}

    def call_many(self, calls: list[tuple[str, dict]]) -> list[Any]:
        return [self.call(s, m) for s, m in calls]


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> tuple[Cluster, _Controller, _Store]:
    opened: list[dict] = []
    monkeypatch.setattr(ops.replica_ops, "open_replicas", lambda cl, ctl, recs, **kw: opened.extend(recs))
    maps = MapService(lambda frames: None)
    store = _Store()
    maps.meta = store  # type: ignore[assignment]
    registry = ServerRegistry(maps)
    for sid in ("ps-1", "ps-2", "ps-3"):
        registry.servers[sid] = ServerInfo(sid, f"tcp://{sid}", "i", 0.0)
    cl = Cluster(SimpleNamespace(replicas=3, data_dir="/nonexistent", meta=""), None, maps, registry,  # type: ignore[arg-type]
                 EventLog(maps))
    ops.create_table(cl, _Controller(), "Orders")  # type: ignore[arg-type]
    return cl, _Controller(), store


def _co(cl: Cluster) -> Any:
    return SimpleNamespace(cluster=cl)


def test_create_index_is_one_commit_of_table_settings_and_definition(cluster) -> None:
    cl, ctl, store = cluster
    commits = store.commits
    d = ops.create_index(cl, ctl, "orders", "ByCustomer", "customer,day", ["total"], rid="q1")["index"]
    assert d == {"table": "Orders", "name": "ByCustomer", "on": ["customer", "day"], "include": ["total"],
                 "state": "building"}
    assert store.commits == commits + 2  # the change, then its event
    pm = cl.map.pmap
    (rec,) = pm.ranges_of("Orders$ByCustomer")
    assert len(rec["replicas"]) == 3 and rec["insync"] == rec["replicas"]
    assert cl.map.table_settings.of("Orders$ByCustomer") == {"feed_off": 1}
    assert cl.map.table_settings.of("Orders") == {"feed_before": 1}
    assert store.data[index_key("Orders", "ByCustomer")] == d
    assert [op["op"] for _s, op in ctl.sent] == ["table_settings"] * 3  # the base table's feed settings, pushed
    assert ops.create_index(cl, ctl, "Orders", "ByCustomer", "customer,day", ["total"], rid="q1")["index"] == d
    with pytest.raises(TableError) as err:
        ops.create_index(cl, ctl, "Orders", "bycustomer", "x", None, rid="q2")
    assert err.value.error_code == "IndexAlreadyExists"
    assert pm.check() == []
    assert PartitionMap.load(store.items()).indexes == pm.indexes  # a cold takeover reads them back
    standby = PartitionMap()
    standby.apply(dict(store.items()), [])
    assert standby.indexes == pm.indexes


@pytest.mark.parametrize(("table", "name", "on", "include", "code"), [
    ("Nope", "ix", "a", None, "TableNotFound"),
    ("Orders", "1bad", "a", None, "InvalidResourceName"),
    ("Orders", "ix", "", None, "InvalidInput"),
    ("Orders", "ix", "PartitionKey", None, "InvalidInput"),
    ("Orders", "ix", "a-b", None, "PropertyNameInvalid"),
    ("Orders", "ix", "a,a", None, "DuplicatePropertiesSpecified"),
    ("Orders$x", "ix", "a", None, "TableNotFound"),
])
def test_create_index_refusals(cluster, table: str, name: str, on: str, include: Any, code: str) -> None:
    cl, ctl, _store = cluster
    with pytest.raises(TableError) as err:
        ops.create_index(cl, ctl, table, name, on, include)
    assert err.value.error_code == code


def test_at_most_max_indexes(cluster) -> None:
    cl, ctl, _store = cluster
    for i in range(MAX_INDEXES):
        ops.create_index(cl, ctl, "Orders", f"ix{i}", "a", None)
    with pytest.raises(TableError) as err:
        ops.create_index(cl, ctl, "Orders", "more", "a", None)
    assert err.value.error_code == "InvalidInput"


def test_drop_ready_and_cascade(cluster) -> None:
    cl, ctl, store = cluster
    ops.create_index(cl, ctl, "Orders", "ix", "a", "all")
    ops.create_index(cl, ctl, "Orders", "iy", "b", None)
    assert ops.index_ready(cl, ctl, "Orders", "IX")["index"]["state"] == "ready"
    assert ops.index_ready(cl, ctl, "Orders", "ix")["index"]["state"] == "ready"  # idempotent
    assert [d["name"] for d in cl.map.pmap.indexes_of("orders")] == ["ix", "iy"]
    ctl.sent.clear()
    assert ops.drop_index(cl, ctl, "Orders", "iy") == {}
    assert "orders$iy" not in cl.map.pmap.tables and index_key("Orders", "iy") not in store.data
    assert sorted(op["op"] for _s, op in ctl.sent) == ["destroy"] * 3
    with pytest.raises(TableError) as err:
        ops.drop_index(cl, ctl, "Orders", "iy")
    assert err.value.error_code == "IndexNotFound"
    with pytest.raises(TableError) as err:
        ops.set_table(cl, ctl, "Orders", {"feed_before": "off"})
    assert err.value.error_code == "InvalidInput" and "ix" in str(err.value)
    with pytest.raises(TableError):
        ops.set_table(cl, ctl, "Orders", {"feed_off": "on"})
    ops.set_table(cl, ctl, "Orders", {"ttl_s": "1d"})  # other settings still change
    with pytest.raises(TableError) as err:
        ops.delete_table(cl, ctl, "Orders$ix")
    assert err.value.error_code == "ResourceNotFound"
    ops.delete_table(cl, ctl, "Orders")
    assert cl.map.pmap.tables == {} and cl.map.pmap.indexes == {} and cl.map.pmap.check() == []
    assert not [k for k in store.data if k.startswith((b"index/", b"table/", b"range/", b"tableset/"))]


def test_list_tables_hides_index_tables_and_get_table_shows_indexes(cluster) -> None:
    cl, ctl, _store = cluster
    ops.create_index(cl, ctl, "Orders", "ix", "a", None)
    co = _co(cl)
    tables = admin_dispatch.answer(co, b"", b"", {"op": "list_tables"})
    assert tables is not None and b"Orders$ix" not in tables and b"Orders" in tables
    listed = admin_dispatch.answer(co, b"", b"", {"op": "list_indexes", "table": "ORDERS"})
    assert listed is not None and b"building" in listed
    with pytest.raises(TableError) as err:
        admin_dispatch.answer(co, b"", b"", {"op": "get_table", "table": "Orders$ix"})
    assert err.value.error_code == "TableNotFound"


def test_deltas_and_the_frontend_cache_carry_the_indexes(cluster) -> None:
    cl, ctl, _store = cluster
    cache = MapCache()
    cache.apply({**cl.map.pmap.snapshot(), "servers": {}})
    v0 = cl.map.pmap.version
    cl.map.changes.take()
    ops.create_index(cl, ctl, "Orders", "ix", "a", None)
    changes = cl.map.changes.take()
    assert changes.indexes and changes.tables
    delta = build_delta(v0, cl.map.pmap.version, changes, cl.map.pmap.ranges, {}, sorted(cl.map.pmap.tables.values()),
                        cl.map.pmap.indexes)
    assert cache.apply(dict(fold([delta])))
    (d,) = cache.indexes_of("orders")
    assert d.name == "ix" and d.on == ("a",) and d.entries_table == "Orders$ix" and not d.ready
    assert cache.snapshot["indexes"]["orders"][0]["name"] == "ix"
    assert "indexes" not in build_delta(1, 2, PendingChanges(ranges={"x"}), {}, {}, [], {})


# --- claims ------------------------------------------------------------------------------------------


def _claims() -> tuple[Claims, dict[bytes, Any]]:
    store: dict[bytes, Any] = {}
    c = Claims()
    c.load([], now=-1000.0)
    return c, store


def test_claim_grant_renew_expire() -> None:
    c, store = _claims()
    a = c.claim("T", "ix", "a", 5, 0.0, store.update)
    assert a == {"claim": 1, "holder": "a", "granted": True, "ttl_s": 5.0}
    assert store[claim_key("t", "IX")] == {"claim": 1, "holder": "a", "ttl_s": 5.0}
    writes = len(store)
    b = c.claim("T", "ix", "b", 5, 3.0, store.update)
    assert b["granted"] is False and b["holder"] == "a" and b["claim"] == 1 and b["ttl_s"] == 2.0
    assert c.claim("T", "ix", "a", 5, 4.0, lambda puts: pytest.fail("a renewal is not persisted"))["claim"] == 1
    assert not c.claim("T", "ix", "b", 5, 8.9, store.update)["granted"]  # renewed until 9
    b = c.claim("T", "ix", "b", 5, 9.0, store.update)
    assert b == {"claim": 2, "holder": "b", "granted": True, "ttl_s": 5.0} and len(store) == writes
    assert c.claim("T", "other", "b", 5, 9.0, store.update)["claim"] == 1  # per index
    for bad in ({"holder": ""}, {"ttl_s": 0}, {"ttl_s": True}, {"ttl_s": 10_000}):
        with pytest.raises(TableError):
            c.claim("T", "ix", bad.get("holder", "x"), bad.get("ttl_s", 5), 0.0, store.update)


def test_claim_numbers_survive_a_takeover_and_a_new_leader_waits_a_ttl() -> None:
    c, store = _claims()
    c.claim("T", "ix", "a", 10, 0.0, store.update)
    c.claim("T", "ix", "b", 10, 20.0, store.update)  # a's lease ran out: b holds claim 2
    new = Claims()
    new.load([(k, v) for k, v in store.items() if k.startswith(CLAIM_PREFIX)], now=100.0)  # a new leader
    refused = new.claim("T", "ix", "c", 10, 105.0, store.update)
    assert refused["granted"] is False and refused["holder"] == "b" and refused["claim"] == 2 and refused["ttl_s"] == 5.0
    kept = new.claim("T", "ix", "b", 10, 106.0, lambda puts: pytest.fail("the same holder keeps its number"))
    assert kept == {"claim": 2, "holder": "b", "granted": True, "ttl_s": 10.0}
    assert new.claim("T", "ix", "c", 10, 115.0, store.update)["granted"] is False  # b renewed until 116
    got = new.claim("T", "ix", "c", 10, 116.0, store.update)
    assert got["granted"] and got["claim"] == 3
    third = Claims()
    third.load(list(store.items()), now=200.0)
    assert not third.claim("T", "ix", "d", 1, 201.0, store.update)["granted"]  # waits the last grant's ttl too
    assert third.claim("T", "ix", "d", 1, 210.0, store.update)["claim"] == 4  # strictly greater, always


def test_index_claim_op_needs_the_index_and_persists_through_the_meta_store(cluster) -> None:
    cl, ctl, store = cluster
    co = _co(cl)
    req = {"op": "index_claim", "table": "Orders", "name": "ix", "holder": "fe-1", "ttl_s": 5}
    with pytest.raises(TableError) as err:
        admin_dispatch.answer(co, b"", b"", req)
    assert err.value.error_code == "IndexNotFound"
    ops.create_index(cl, ctl, "Orders", "ix", "a", None)
    assert admin_dispatch.answer(co, b"", b"", req) is not None
    assert store.data[claim_key("Orders", "ix")]["holder"] == "fe-1"
    ops.drop_index(cl, ctl, "Orders", "ix")
    assert claim_key("Orders", "ix") in store.data  # kept: a re-declared index counts on
    ops.create_index(cl, ctl, "Orders", "ix", "a", None)
    answer = cl.map.claims.claim("Orders", "ix", "fe-2", 5, 0.0, lambda puts: store.commit(puts))
    assert answer["claim"] == 2 and answer["granted"]


def test_holding_writes_only_for_a_ready_index_past_its_bound_with_hysteresis() -> None:
    from rangetable.index_def import holding_writes

    assert holding_writes(False, 0.0, 99.0) == 0.0  # a building index holds nothing
    assert holding_writes(True, 0.0, 9.9, 10.0) == 0.0
    assert holding_writes(True, 0.0, 12.34, 10.0) == 12.3
    assert holding_writes(True, 12.3, 14.0, 10.0) == 12.3  # no map change for a small move
    assert holding_writes(True, 12.3, 30.0, 10.0) == 30.0  # a big one is published
    assert holding_writes(True, 12.3, 6.0, 10.0) == 12.3  # still over half the bound: writes keep waiting
    assert holding_writes(True, 12.3, 4.0, 10.0) == 0.0  # caught up: released


def test_the_holder_reports_progress_and_its_lag_marks_the_map(cluster) -> None:
    import json

    cl, ctl, _ = cluster
    co = _co(cl)
    ops.create_index(cl, ctl, "Orders", "ix", "a", None)
    ops.index_ready(cl, ctl, "Orders", "ix")

    def claim(holder: str, lag: float) -> Any:
        req = {"op": "index_claim", "table": "Orders", "name": "ix", "holder": holder, "ttl_s": 5,
               "progress": {"phase": "feed", "applied": 7, "lag_s": lag}}
        return admin_dispatch.answer(co, b"", b"", req)

    def listed() -> dict:
        raw = admin_dispatch.answer(co, b"", b"", {"op": "list_indexes", "table": "Orders"})
        from rangetable import protocol

        return protocol.result(raw)["indexes"][0]

    claim("fe-1", 0.5)
    d = listed()
    assert d["applied"] == 7 and d["lag_s"] == 0.5 and d["holder"] == "fe-1" and "behind_s" not in d
    claim("fe-2", 50.0)  # not the holder: its report is not kept
    assert listed()["lag_s"] == 0.5
    version = cl.map.pmap.version
    claim("fe-1", 25.0)
    assert cl.map.pmap.indexes_of("Orders")[0]["behind_s"] == 25.0 and cl.map.pmap.version > version
    claim("fe-1", 2.0)
    assert "behind_s" not in cl.map.pmap.indexes_of("Orders")[0]
    json.dumps(listed())


def test_an_index_nobody_applies_falls_behind_by_the_clock_and_holds_its_table_s_writes(cluster) -> None:
    """Back-pressure without an applier: once the holder's lease ran out (every HTTP frontend gone), the index's
    lag is its last report plus the time since; the leader's once-a-second judge marks the map past the bound,
    and a new holder's report lets the writes go again."""
    cl, ctl, _ = cluster
    ops.create_index(cl, ctl, "Orders", "ix", "a", None)
    ops.index_ready(cl, ctl, "Orders", "ix")
    claims = cl.map.claims
    assert claims.claim("Orders", "ix", "fe-1", 5, 100.0, lambda puts: None)["granted"]
    claims.report("Orders", "ix", "fe-1", {"lag_s": 0.5}, 100.0)
    assert claims.lag_of("Orders", "ix", 104.0) == 0.5 and claims.lapsed(104.0) == []  # the lease runs
    assert claims.lag_of("Orders", "ix", 106.0) == 6.5 and claims.lapsed(106.0) == [("orders", "ix")]
    assert claims.lag_of("Orders", "other", 106.0) is None  # nothing reported
    assert claims.progress_of("Orders", "ix", 106.0)["lag_s"] == 6.5  # what `index list` shows: the judged lag
    assert claims.progress_of("Orders", "ix", 106.0)["holder"] is None
    ops.judge_lapsed_indexes(cl, ctl, 108.0)
    assert "behind_s" not in cl.map.pmap.indexes_of("Orders")[0]  # 8.5 s: under the bound
    ops.judge_lapsed_indexes(cl, ctl, 111.0)
    assert cl.map.pmap.indexes_of("Orders")[0]["behind_s"] == 11.5  # writes to Orders wait, naming ix
    assert claims.claim("Orders", "ix", "fe-2", 5, 111.0, lambda puts: None)["granted"]
    claims.report("Orders", "ix", "fe-2", {"lag_s": 1.0}, 112.0)
    assert claims.lapsed(112.0) == []
    ops.judge_lag(cl, "Orders", cl.map.pmap.indexes_of("Orders")[0], claims.lag_of("Orders", "ix", 112.0))
    assert "behind_s" not in cl.map.pmap.indexes_of("Orders")[0]  # caught up: released
    ops.drop_index(cl, ctl, "Orders", "ix")
    assert claims.lapsed(200.0) == []


def test_a_new_leader_s_settings_versions_are_above_every_earlier_leader_s() -> None:
    """A partition server keeps the newest settings version it saw: a leader that counted from 1 again after a
    takeover had its changes ignored (an index declared after a coordinator failover got no before-images)."""
    from coordinator.map.table_settings import TableSettings
    from partition_server.table_config import TableConfig

    old, server = TableSettings(), TableConfig()
    old.load([], term=1)
    for _ in range(50):
        old.put("t", {"ttl_s": 60})
    assert server.learn(old.message())
    new = TableSettings()
    new.load([], term=2)
    new.put("t", {"feed_before": 1})
    assert new.version > old.version and server.learn(new.message())
    assert server.settings["t"] == {"feed_before": 1}
