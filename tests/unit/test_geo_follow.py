"""A secondary cluster's control plane (``docs/geo.md``): the cuts its coordinator keeps and sends, the claims of
its tables' appliers, a frontend's copy of the cuts, and the frontend's reads at a cut and refusal of writes."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.map.claims import SOURCE_CLAIM_PREFIX, Claims, claim_key
from coordinator.map.source_cuts import PERSIST_S, SourceCuts, copy_key, cut_key
from frontend.native.handler import Handler, Pending
from frontend.routing import MapCache
from rangetable.config import FrontendConfig
from rangetable.errors import TableError
from tests.unit.map_helpers import one_table_map


def test_a_cut_never_moves_back_and_is_persisted_at_most_once_a_period() -> None:
    cuts = SourceCuts()
    assert cuts.publish("Orders", 100, 0.5, now=10.0) == ({cut_key("orders"): {"cut": 100, "lag_s": 0.5}}, [])
    assert cuts.publish("orders", 150, 0.2, now=10.1) == ({}, [])  # kept in memory, written within PERSIST_S
    assert cuts.wire() == {"orders": 150}
    assert cuts.publish("orders", 120, 0.0, now=10.2) == ({}, [])  # a resumed applier below the cut: the cut stays
    assert cuts.wire() == {"orders": 150}
    assert cuts.publish("orders", 160, 0.1, now=10.0 + PERSIST_S) == (
        {cut_key("orders"): {"cut": 160, "lag_s": 0.1}}, [])
    assert cuts.lag_of("orders", now=13.0) == pytest.approx(0.1 + 3.0 - PERSIST_S)  # nobody published since
    assert cuts.lag_of("other", now=13.0) is None
    for bad in (-1, "1", 1.5, True):
        with pytest.raises(TableError):
            cuts.publish("orders", bad, 0.0, now=14.0)
    with pytest.raises(TableError):
        cuts.publish("orders", 170, -1, now=14.0)


def test_last_sync_is_the_lowest_cut_and_none_while_a_table_has_none() -> None:
    cuts = SourceCuts()
    assert cuts.last_sync([]) is None
    cuts.publish("a", 300, 0.0, now=1.0)
    assert cuts.last_sync(["a", "b"]) is None  # b is still being copied: bootstrap
    cuts.publish("b", 200, 0.0, now=1.0)
    assert cuts.last_sync(["a", "b"]) == 200
    assert cuts.status(["a", "c"], now=1.0) == [{"table": "a", "cut": 300, "lag_s": 0.0, "alarm": False},
                                                {"table": "c", "cut": None, "lag_s": None, "alarm": False}]
    assert cuts.forget("B") == [cut_key("b"), copy_key("b")] and cuts.wire() == {"a": 300}


def test_a_first_copy_notes_how_far_it_got_until_the_first_cut_ends_it() -> None:
    cuts = SourceCuts()
    first = {"start": "c0", "next": ["p", "r1"], "copied": 1000}
    assert cuts.note_copy("T", first, now=0.0) == {copy_key("t"): first}
    second = {**first, "next": ["p", "r2"], "copied": 2000}
    assert cuts.note_copy("t", second, now=0.5) == {}  # in memory, written within PERSIST_S
    assert cuts.copies == {"t": second}
    for bad in (None, {"start": 1, "next": None, "copied": 0}, {"start": "c", "next": "x", "copied": 0},
                {"start": "c", "next": None, "copied": "1"}):
        with pytest.raises(TableError):
            cuts.note_copy("t", bad, now=1.0)
    assert cuts.publish("t", 500, 0.1, now=2.0) == ({cut_key("t"): {"cut": 500, "lag_s": 0.1}}, [copy_key("t")])
    assert cuts.copies == {} and cuts.note_copy("t", second, now=3.0) == {}  # a late report: copied already
    assert cuts.copies == {}


def test_a_new_leader_loads_the_persisted_cuts() -> None:
    cuts = SourceCuts()
    cuts.load([(cut_key("t"), {"cut": 42, "lag_s": 1.5}), (b"sourcecut/bad", {"cut": "x"}),
               (copy_key("u"), {"start": "c", "next": None, "copied": 3})], now=5.0)
    assert cuts.wire() == {"t": 42} and cuts.copies == {"u": {"start": "c", "next": None, "copied": 3}}
    assert cuts.lag_of("t", now=7.0) == pytest.approx(3.5)  # its lag grows from the takeover until a publish


def test_source_claims_are_claims_of_their_own_kind() -> None:
    store: dict[bytes, Any] = {}
    claims = Claims(SOURCE_CLAIM_PREFIX)
    got = claims.claim("Orders", "", "fe-1/7", 10.0, now=0.0, persist=store.update)
    assert got["granted"] and got["claim"] == 1
    assert store == {claim_key("orders", "", SOURCE_CLAIM_PREFIX): {"claim": 1, "holder": "fe-1/7", "ttl_s": 10.0}}
    assert b"".join(store) == b"sourceclaim/orders/"
    assert claims.holds("orders", "", 1, now=5.0) and not claims.holds("orders", "", 0, now=5.0)
    assert not claims.holds("orders", "", 1, now=10.0)  # the lease ran out
    reloaded = Claims(SOURCE_CLAIM_PREFIX)
    reloaded.load(list(store.items()) + [(b"indexclaim/orders/ix", {"claim": 9, "holder": "x"})], now=0.0)
    assert list(reloaded.persisted) == ["orders/"]  # an index's claim is not a source claim


def test_a_frontend_keeps_the_highest_cut_of_each_table_it_was_sent() -> None:
    cache = MapCache()
    assert not cache.cuts_heard
    cache.set_cuts({"a": 10, "b": 5})
    cache.set_cuts({"a": 8, "b": 6})  # a new leader, loaded from a cut persisted a moment earlier
    assert cache.cuts == {"a": 10, "b": 6} and cache.cuts_heard
    cache.set_cuts({"b": 7, "bad": "x"})  # a deleted, its cut with it
    assert cache.cuts == {"b": 7}
    cache.set_cuts(None)
    assert cache.cuts == {"b": 7}


class _Driver:
    """What a handler uses of its frontend, recording what it would send."""

    def __init__(self, cache: MapCache) -> None:
        self.cache = cache
        self.cfg = FrontendConfig()
        self.sent: list[tuple[str, dict]] = []
        self.later: list[str] = []

    def send_ps(self, p: Pending, endpoint: str, body: dict, step: Any) -> None:
        self.sent.append((endpoint, body))

    def retry_later(self, p: Pending, why: str) -> None:
        self.later.append(why)

    def send_coordinator(self, p: Pending, body: dict, step: Any) -> None:
        self.sent.append(("coordinator", body))


def _secondary() -> tuple[Handler, _Driver]:
    cache = one_table_map("orders", ["", "m"], 3)
    for r in cache.ranges.values():
        r["state"] = "serving"
    fe = _Driver(cache)
    return Handler(fe, secondary=True), fe  # type: ignore[arg-type]


@pytest.mark.parametrize("req", [
    {"op": "write", "table": "orders", "write": {"op": "upsert", "pk": "p", "rk": "r", "props": {}}},
    {"op": "batch", "table": "orders", "ops": [{"op": "upsert", "pk": "p", "rk": "r", "props": {}}]},
    {"op": "create_table", "table": "mine"}, {"op": "delete_table", "table": "orders"},
    {"op": "set_acl", "table": "orders"}, {"op": "create_index", "table": "orders", "name": "ix"},
])
def test_a_secondary_refuses_a_clients_writes(req: dict) -> None:
    handler, fe = _secondary()
    with pytest.raises(TableError) as e:
        handler.run(Pending(b"client", b"1", req, 1e18))
    assert e.value.error_code == "InsufficientAccountPermissions"
    assert fe.sent == []


def test_only_the_process_itself_claims_and_publishes() -> None:
    handler, fe = _secondary()
    for op in ("source_claim", "source_publish"):
        with pytest.raises(TableError) as e:
            handler.run(Pending(b"client", b"1", {"op": op, "table": "orders"}, 1e18))
        assert e.value.error_code == "InvalidInput"
        handler.run(Pending(b"", b"2", {"op": op, "table": "orders", "internal": True}, 1e18))
    assert [b["op"] for _, b in fe.sent] == ["source_claim", "source_publish"]
    primary = Handler(fe)  # type: ignore[arg-type]
    with pytest.raises(TableError):  # a primary cluster's frontend takes no client's either
        primary.run(Pending(b"client", b"3", {"op": "source_publish", "table": "orders"}, 1e18))
    handler.run(Pending(b"", b"4", {"op": "create_table", "table": "orders", "internal": True}, 1e18))
    assert fe.sent[-1] == ("coordinator", {"op": "create_table", "table": "orders", "internal": True})


def test_a_secondary_reads_every_range_at_the_tables_cut_once_the_cuts_arrived() -> None:
    handler, fe = _secondary()
    get = {"op": "get", "table": "orders", "pk": "p", "rk": "r"}
    handler.run(Pending(b"client", b"1", dict(get), 1e18))
    assert fe.sent == [] and fe.later == ["the cuts of this secondary cluster have not arrived yet"]
    fe.cache.set_cuts({"other": 9})
    with pytest.raises(TableError) as e:  # no cut yet: its first copy is under way
        handler.run(Pending(b"client", b"2", dict(get), 1e18))
    assert e.value.error_code == "ServerBusy" and fe.sent == []
    handler.run(Pending(b"", b"2", {**get, "internal": True}, 1e18))  # its own applier reads what is there
    assert "at" not in fe.sent[-1][1]
    fe.cache.set_cuts({"orders": 1234})
    handler.run(Pending(b"client", b"3", dict(get), 1e18))
    assert fe.sent[-1][1]["at"] == 1234
    fe.sent.clear()
    handler.run(Pending(b"client", b"4", {"op": "query", "table": "orders"}, 1e18))
    assert [(b["op"], b["at"]) for _, b in fe.sent] == [("scan", 1234)]
    fe.sent.clear()
    handler.run(Pending(b"client", b"5", {"op": "changes", "table": "orders", "after": [5, None]}, 1e18))
    assert [(b["cut"], b["close"]) for _, b in fe.sent] == [(1234, False), (1234, False)]  # every range, no close
    primary = Handler(fe)  # type: ignore[arg-type]
    fe.sent.clear()
    primary.run(Pending(b"client", b"6", dict(get), 1e18))
    assert "at" not in fe.sent[-1][1]
    primary.run(Pending(b"client", b"7", {"op": "changes", "table": "orders", "after": [5, None]}, 1e18))
    assert fe.sent[-1][1]["cut"] is None and fe.sent[-1][1]["close"]


def test_the_geo_bench_passes_a_secondary_that_kept_up_and_explains_a_fail() -> None:
    from cli.bench.geo import format_table, verdict

    def row(w: float, a: float, rpo: float) -> dict:
        return {"at": "1.0m", "writes_s": w, "errors": 0, "p50_ms": 4.0, "p99_ms": 9.0, "applied_s": a,
                "rpo_p50_s": rpo, "rpo_p99_s": rpo, "rpo_max_s": rpo, "secondary_cpu_us_per_record": 80.0}

    kept = {"intervals": [row(900, 800, 0.1), row(1000, 1000, 0.05), row(1000, 995, 0.06)],
            "check": {"differences": 0}}
    assert verdict(kept)[0] and format_table(kept).splitlines()[-1].startswith("PASS  applied 99.8%")
    behind = {**kept, "intervals": [row(900, 800, 0.1), row(1000, 900, 0.5), row(1000, 900, 3.0)]}
    ok, why = verdict(behind)
    assert not ok and "applied 90.0%" in why and "0.500 s in the first and 3.000 s in the last" in why
    lost = {**kept, "check": {"differences": 2}}
    assert not verdict(lost)[0] and "2 entities differ" in format_table(lost)
    copy = {"entities": 1000, "seconds": 1.0, "per_s": 1000.0, "copied": 1000}
    assert verdict({**kept, "copy": copy})[0]
    ok, why = verdict({**kept, "copy": {**copy, "copied": 596}})  # a first copy that ended early
    assert not ok and "the first copy put 596 of the source's 1,000 entities (needs all)" in why


def test_the_lag_alarm_is_raised_and_cleared_once_each_way() -> None:
    cuts = SourceCuts()
    assert cuts.judge(["A", "b"], 5.0, now=0.0) == []  # no cut yet: copying, not behind
    cuts.publish("a", 100, 0.5, now=0.0)
    cuts.publish("b", 100, 0.5, now=0.0)
    assert cuts.judge(["A", "b"], 5.0, now=2.0) == []
    cuts.publish("b", 200, 0.1, now=6.0)
    assert cuts.judge(["A", "b"], 5.0, now=6.0) == [{"kind": "geo_lag_alarm", "table": "A", "lag_s": 6.5,
                                                     "threshold_s": 5.0}]
    assert cuts.judge(["A", "b"], 5.0, now=7.0) == []  # still over: no second event
    assert [r["alarm"] for r in cuts.status(["A", "b"], now=7.0)] == [True, False]
    cuts.publish("a", 300, 0.2, now=8.0)
    assert cuts.judge(["A", "b"], 5.0, now=8.0) == [{"kind": "geo_lag_ok", "table": "a"}]
    assert cuts.alarmed == set()


def test_the_source_is_asked_at_its_next_frontend_when_one_does_not_answer() -> None:
    import asyncio

    from frontend.geo.runner import NativeSource

    class Transport:
        def __init__(self, endpoint: str) -> None:
            self.endpoint, self.closed = endpoint, False

        async def request(self, body: Any) -> Any:
            if self.endpoint == "tcp://a":
                raise TableError("OperationTimedOut", "no answer")
            return {"tables": [self.endpoint]}

        async def close(self) -> None:
            self.closed = True

    made: list[Transport] = []

    def connect(endpoint: str) -> Transport:
        made.append(Transport(endpoint))
        return made[-1]

    doc = {"native": "tcp://a", "frontends": ["tcp://a", "tcp://b"]}  # no keys: none remembered
    src = NativeSource(doc, connect)

    async def run() -> None:
        with pytest.raises(TableError):  # this one times out; the follower asks again a moment later
            await src.tables()
        assert await src.tables() == ["tcp://b"]

    asyncio.run(run())
    assert [t.endpoint for t in made] == ["tcp://a", "tcp://b"] and made[0].closed


def test_a_rejoin_reads_its_keys_by_one_or_of_point_keys_paged_to_the_end() -> None:
    import asyncio

    from frontend.geo.runner import NativeSource
    from rangetable import protocol
    from rangetable.filter import compile_filter, parse_filter
    from rangetable.keys import encode_key

    held = {("p'1", "a"): (5, {"n": 1}), ("p2", "b"): (6, {"n": 2})}
    asked: list[dict] = []

    class Transport:
        def __init__(self, endpoint: str) -> None:
            pass

        async def request(self, body: Any) -> Any:  # a source whose first page stops after one entity
            asked.append(body)
            pred = compile_filter(parse_filter(body["filter"]))
            found = [[pk, rk, ts, props] for (pk, rk), (ts, props) in sorted(held.items()) if pred(pk, rk, ts, props)]
            return {"entities": found[:1], "next": ["x", "y"]} if body["next"] is None else \
                {"entities": found[1:], "next": None}

        async def close(self) -> None:
            pass

    src = NativeSource({"native": "tcp://a"}, Transport)
    keys = [encode_key("p'1", "a"), encode_key("p2", "b"), encode_key("p3", "c")]
    got = asyncio.run(src.values("t", keys))
    assert got == [[keys[0], protocol.pack([5, {"n": 1}])], [keys[1], protocol.pack([6, {"n": 2}])], [keys[2], None]]
    assert len(asked) == 2 and asked[0]["top"] == 3 and asked[1]["next"] == ["x", "y"]
    assert "PartitionKey eq 'p''1' and RowKey eq 'a'" in asked[0]["filter"]  # a quote in a key, doubled
    assert asyncio.run(src.values("t", [])) == [] and len(asked) == 2
