"""The partition server's spliced replies (:mod:`partition_server.store.fast_path`) decode to, and are
byte-identical with, the product's plain path: entities decoded by ``RangeStore.scan`` / ``get`` and packed."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition_server.data_requests import scan_filter
from partition_server.ranges import RangeSet
from partition_server.store import fast_path, range_ops, range_scan
from partition_server.store import fast_path as wire
from partition_server.store.range_store import RangeStore
from rangetable import protocol
from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, GUID, INT32, INT64, STRING
from rangetable.errors import TableError
from rangetable.filter import compile_cached, parse_filter, properties_used
from rangetable.keys import encode_key
from rangetable.protocol import entity_to_wire
from tests import oracles

KEYS = ["", "a", "é", "日本", "🙂x", "k" * 31, "k" * 32, "ü" * 128, "日" * 200, "p_q"]
ALL_TYPES = {
    "s": [STRING, "héllo 🙂"],
    "i": [INT32, -7],
    "l": [INT64, 2**53 + 1],
    "d": [DOUBLE, 2.5],
    "b": [BOOLEAN, True],
    "t": [DATETIME, 638396640000000000],
    "g": [GUID, "00000000-0000-0000-0000-000000000001"],
    "x": [BINARY, b"\x00\xff" * 20],
}
FILTERS = [
    None,
    "PartitionKey eq 'é'",
    "RowKey ge 'k' and PartitionKey ne ''",
    "not (RowKey lt 'm') or PartitionKey eq 'a'",
    "PartitionKey eq 1",
    "Timestamp ge datetime'2000-01-01T00:00:00Z'",
    "Timestamp lt datetime'2000-01-01T00:00:00Z' or RowKey eq 'a'",
    "i eq -7",
    "l gt 5 and PartitionKey ge 'a'",
    "s eq 'héllo 🙂' or Timestamp gt datetime'2000-01-01T00:00:00Z'",
    "missing eq 'x'",
]
RECORD = {"id": "r1", "table": "t", "low": "", "high": None, "epoch": 3, "path": "r1"}


def props_for(i: int) -> dict:
    """Empty props, every EDM type, or a few of them, depending on i."""
    if i % 3 == 0:
        return {}
    if i % 3 == 1:
        return dict(ALL_TYPES)
    return {"s": [STRING, f"v{i}"], "i": [INT32, i], "x": [BINARY, bytes([i % 256])]}


def fill(store: RangeStore) -> list[tuple[str, str]]:
    keys = []
    n = 0
    for pk in KEYS:
        for rk in KEYS:
            store.write({"op": "insert", "pk": pk, "rk": rk, "props": props_for(n)})
            keys.append((pk, rk))
            n += 1
    return keys


@pytest.fixture(params=["wall", "small"])
def ranges(request, tmp_path):
    """A RangeSet serving one full range, filled; "small" Timestamps are 1, 2, 3 … (not uint64)."""
    rs = RangeSet(str(tmp_path))
    rs.load(RECORD)
    store = rs.open["r1"].store
    if request.param == "small":
        store.clock = lambda: 0
    fill(store)
    yield rs
    rs.unload_all()


def old_scan(store: RangeStore, req: dict) -> dict:
    """The scan result on the product's plain path: decoded entities from ``RangeStore.scan`` (every
    stored value decoded, filtered, projected), packed as they are, with the same bounds and budget."""
    _, pred = compile_cached(req.get("filter"))
    budget = 0.0 if req.get("budget_ms") == 0 else None
    found, nxt = store.scan(req.get("lo") or b"", req.get("hi"), None if req.get("filter") is None else pred,
                            req.get("select"), limit=int(req.get("limit", 1000)), budget_s=budget)
    return {"entities": [entity_to_wire(e) for e in found], "next": nxt}


def scan_req(**kw: object) -> dict:
    return {"op": "scan", "range": "r1", "epoch": 3, **kw}


def same_reply(new: object, old: object) -> None:
    body = protocol.ok(new)
    assert body == protocol.ok(old)
    assert protocol.unpack(body) == {"ok": old}


# --- msgpack headers ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536, 70000])
def test_headers_match_msgpack(n):
    s = "x" * n
    assert wire.str_header(n) + s.encode() == msgpack.packb(s, use_bin_type=True)
    assert wire.array_header(n) + b"\xc0" * n == msgpack.packb([None] * n)


def test_properties_used():
    assert properties_used(None) == frozenset()
    node = parse_filter("not (PartitionKey eq 'a') and (qty gt 1 or Timestamp lt datetime'2020-01-01T00:00:00Z')")
    assert properties_used(node) == {"PartitionKey", "qty", "Timestamp"}
    assert scan_filter(None)[:3] == (None, False, False)
    assert scan_filter("RowKey eq 'a'")[1:3] == (False, False)
    assert scan_filter("Timestamp lt datetime'2020-01-01T00:00:00Z'")[1:3] == (True, False)
    assert scan_filter("RowKey eq 'a' or qty eq 1")[1:3] == (False, True)


def test_packed_result_and_stored_ts():
    assert protocol.ok(protocol.Packed(b"\x92", b"\x01", b"\xa1x")) == protocol.ok([1, "x"])
    assert bytes(protocol.Packed(b"\x91", b"\x02")) == msgpack.packb([2])
    for ts in (0, 5, 200, 70000, 2**40, 638396640000000000):
        assert wire.stored_ts(msgpack.packb([ts, {}])) == ts


def test_unknown_stored_layout_is_packed_not_spliced():
    value = msgpack.packb([7, {"a": [INT32, 1]}, "extra"])  # not a 2-array: must not be spliced
    got = wire.entity(wire.key_prefix("é".encode()), b"r", value)
    assert msgpack.unpackb(got) == ["é", "r", 7, {"a": [INT32, 1]}, "extra"]


# --- point reads --------------------------------------------------------------------------------


def test_get_matches_old_path(ranges):
    store = ranges.open["r1"].store
    for pk in KEYS:
        for rk in KEYS:
            req = {"op": "get", "range": "r1", "epoch": 3, "pk": pk, "rk": rk}
            same_reply(ranges.data("get", req), entity_to_wire(store.get(pk, rk)))
            sel = ["i", "x", "nope"]
            e = store.get(pk, rk)
            want = entity_to_wire(e._replace(props={k: v for k, v in e.props.items() if k in sel}))
            same_reply(ranges.data("get", {**req, "select": sel}), want)
            same_reply(ranges.data("get", {**req, "select": []}), entity_to_wire(e))
    for sel in (None, ["i"]):
        with pytest.raises(TableError) as ei:
            ranges.data("get", {"op": "get", "range": "r1", "epoch": 3, "pk": "zz", "rk": "a", "select": sel})
        assert ei.value.error_code == "ResourceNotFound"
    load = ranges.open["r1"].load
    assert load.reads == 3 * len(KEYS) ** 2 + 2  # the two misses are reads too (load, and metrics)
    assert load.entities == load.timed == 3 * len(KEYS) ** 2  # but they return no entity and are not timed


# --- scans --------------------------------------------------------------------------------------


@pytest.mark.parametrize("filt", FILTERS)
@pytest.mark.parametrize("select", [None, ["i", "s", "nope"], []])
def test_scan_matches_old_path(ranges, filt, select):
    store = ranges.open["r1"].store
    req = scan_req(filter=filt, select=select)
    want = old_scan(store, req)
    if filt not in ("PartitionKey eq 1", "missing eq 'x'") and store.last_ts > 10**9:  # wall-clock Timestamps
        assert want["entities"]
    same_reply(ranges.data("scan", req), want)


@pytest.mark.parametrize("filt", [None, "RowKey gt 'a'", "i eq -7"])
def test_scan_pages_and_bounds(ranges, filt):
    store = ranges.open["r1"].store
    lo, hi = encode_key("a", ""), encode_key("日本", "k")
    nxt: bytes | None = lo
    pages = 0
    seen: list = []
    while nxt is not None:
        req = scan_req(lo=nxt, hi=hi, filter=filt, limit=7)
        want = old_scan(store, req)
        same_reply(ranges.data("scan", req), want)
        seen += want["entities"]
        nxt = want["next"]
        pages += 1
    assert pages > 2
    assert seen == old_scan(store, scan_req(lo=lo, hi=hi, filter=filt))["entities"]


def test_scan_time_budget_stops_at_the_same_key(ranges):
    store = ranges.open["r1"].store
    req = scan_req(budget_ms=0)
    want = old_scan(store, req)
    assert len(want["entities"]) == 64 and want["next"] is not None
    same_reply(ranges.data("scan", req), want)


def test_scan_clamped_to_range_bounds(tmp_path):
    rs = RangeSet(str(tmp_path))
    rs.load({**RECORD, "low": "b", "high": "日"})
    try:
        fill(rs.open["r1"].store)
        store = rs.open["r1"].store
        want = old_scan(store, scan_req(lo=b"b", hi="日".encode()))
        assert {e[0] for e in want["entities"]} == {"é", "k" * 31, "k" * 32, "ü" * 128, "p_q"}
        same_reply(rs.data("scan", scan_req()), want)
        empty = {"entities": [], "next": None}
        same_reply(rs.data("scan", scan_req(lo=b"z", hi=b"c")), empty)
        with pytest.raises(TableError) as ei:
            rs.data("scan", scan_req(filter="PartitionKey eq"))
        assert ei.value.error_code == "InvalidInput"
    finally:
        rs.unload_all()


# --- spliced bytes = packed bytes, on generated data -----------------------------------------------


class StrSub(str):
    """A str subclass: packs as a str, but not through the exact-type packer."""


def test_pack_value_matches_protocol_pack():
    class IntSub(int):
        pass

    values: list[Any] = [{}, {"a": [STRING, "x"]}, {"a": (INT32, 5)}, {"a": [STRING, StrSub("s")]},
                         {"a": [INT64, IntSub(7)]}, {"a": [BINARY, bytearray(b"xy")]}, {"a": [DOUBLE, float("nan")]},
                         {StrSub("k"): [BOOLEAN, True]}, {"a": [BINARY, memoryview(b"ab")]}]
    for props in values:
        for ts in (0, 5, 2**40, 638396643000000000):
            assert fast_path.pack_value(ts, props) == range_ops.pack_value(ts, props) == protocol.pack([ts, props])
    for pack in (fast_path.pack_value, range_ops.pack_value):
        with pytest.raises(TypeError):
            pack(1, {"a": [STRING, object()]})
        with pytest.raises(OverflowError):
            pack(1, {"a": [INT64, 2**64]})


def test_wire_entities_match_entity():
    rng = random.Random(5)
    for _ in range(200):
        n = rng.randint(1, 20)
        rkbs = [rng.choice(["", "a", "é" * rng.randint(0, 130), "k" * rng.randint(0, 300)]).encode() for _ in range(n)]
        values = [protocol.pack([rng.choice([1, 2**40]), {"a": [STRING, "x" * rng.randint(0, 40)]}]) for _ in range(n)]
        if rng.random() < 0.2:
            values[rng.randrange(n)] = protocol.pack([5, {}, 1])  # not the stored layout: decoded and packed instead
        prefix = fast_path.key_prefix(rng.choice(["p", "é" * 200]).encode())
        assert fast_path.entities(prefix, rkbs, values) == [fast_path.entity(prefix, r, v) for r, v in zip(rkbs, values,
                                                                                                            strict=True)]


KEY_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=300)
PAIRS = st.one_of(
    st.tuples(st.just(STRING), st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)),
    st.tuples(st.just(INT32), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(INT64), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(DOUBLE), st.floats(allow_nan=False)),
    st.tuples(st.just(BOOLEAN), st.booleans()),
    st.tuples(st.just(BINARY), st.binary(max_size=300)),
).map(list)
PROPS = st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,40}", fullmatch=True), PAIRS, max_size=12)


@settings(max_examples=400, deadline=None)
@given(KEY_TEXT, KEY_TEXT, st.integers(0, 2**64 - 1), PROPS)
def test_spliced_answers_equal_packed_answers(pk, rk, ts, props):
    """fast_path splices an entity's wire form from its stored value; range_ops packs it from the
    decoded entity: the same bytes, for any keys, Timestamp and props."""
    key = encode_key(pk, rk)
    value = fast_path.pack_value(ts, props)
    assert value == range_ops.pack_value(ts, props)
    assert fast_path.answer(key, value) == oracles.wire_answer(key, value)
    assert fast_path.answer(key, None) == oracles.wire_answer(key, None)
    assert fast_path.stored_ts(value) == ts
    pkb, _, rkb = key.partition(b"\x00")
    assert fast_path.entities(fast_path.key_prefix(pkb), [rkb], [value]) == [fast_path.entity_bytes(key, value)]
    items = [fast_path.entity_bytes(key, value)] * (len(props) % 3)
    assert bytes(fast_path.page(items, key if ts % 2 else None)) == protocol.pack(
        {"entities": [msgpack.unpackb(i, strict_map_key=False) for i in items], "next": key if ts % 2 else None})


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """One RangeSet serving a filled range, shared by the generated scans below (they only read)."""
    rs = RangeSet(str(tmp_path_factory.mktemp("scan")))
    rs.load(RECORD)
    fill(rs.open["r1"].store)
    yield rs
    rs.unload_all()


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(FILTERS), st.one_of(st.none(), st.lists(st.sampled_from(["i", "s", "x", "nope"]), max_size=3)),
       st.integers(1, 40), st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from(KEYS)))
def test_generated_scans_spliced_equal_plain(filled, filt, select, limit, lo_pk, hi_pk):
    """A scan page through the partition server (wire form, decoding only what the filter needs) is
    the page of the plain path (every entity decoded by RangeStore.scan, then packed)."""
    store = filled.open["r1"].store
    lo = encode_key(lo_pk, "")
    hi = None if hi_pk is None else encode_key(hi_pk, "")
    req = scan_req(lo=lo, hi=hi, filter=filt, select=select, limit=limit)
    want = old_scan(store, req) if hi is None or lo < hi else {"entities": [], "next": None}
    same_reply(filled.data("scan", req), want)


# --- point spans (an ``or`` of point keys): one multi-get = a scan per span ----------------------------


def point(pk: str, rk: str) -> tuple[bytes, bytes]:
    """The span the planner makes for ``PartitionKey eq pk and RowKey eq rk``."""
    return encode_key(pk, rk), encode_key(pk, rk) + b"\x00"


def old_spans(store: RangeStore, req: dict) -> dict:
    """A multi-span scan on the plain path: an iterator per span (``old_scan``), the pages joined,
    stopping where a span stops; ``next`` is then where the following span starts."""
    spans = [(req["lo"], req.get("hi")), *req.get("spans", [])]
    out: list = []
    limit = int(req.get("limit", 1000))
    for i, (lo, hi) in enumerate(spans):
        if out and len(out) >= limit:
            return {"entities": out, "next": lo}
        page = old_scan(store, {**req, "lo": lo, "hi": hi, "limit": limit - len(out)})
        out += page["entities"]
        if page["next"] is not None:
            nxt = page["next"]
            if i + 1 < len(spans) and nxt >= hi:  # a point span stops after its key: go on from the next span
                nxt = spans[i + 1][0]
            return {"entities": out, "next": nxt}
    return {"entities": out, "next": None}


def point_spans(rng: random.Random, n: int, with_range: bool) -> list[tuple[bytes, bytes | None]]:
    """``n`` point spans over stored keys and missing ones (ascending, distinct), and maybe a row range among them."""
    keys = {(rng.choice(KEYS), rng.choice(KEYS + ["missing"])) for _ in range(n)}
    spans: list[tuple[bytes, bytes | None]] = [point(pk, rk) for pk, rk in keys]
    if with_range:
        pk = rng.choice(KEYS)
        spans = [s for s in spans if not s[0].startswith(pk.encode() + b"\x00")] + [(encode_key(pk, ""),
                                                                                   encode_key(pk, "k"))]
    return sorted(spans)


def test_is_point_span():
    lo, hi = point("p", "r")
    assert range_scan.is_point_span(lo, hi) and range_scan.is_point_span(*point("", ""))
    assert not range_scan.is_point_span(lo, None)
    assert not range_scan.is_point_span(lo, lo + b"\x01")  # two keys could lie there
    assert not range_scan.is_point_span(b"p", b"p\x00")  # no entity key: a PartitionKey bound
    assert not range_scan.is_point_span(b"\xffm\x00", b"\xffm\x00\x00")  # a meta key


@pytest.mark.parametrize("filt", FILTERS)
@pytest.mark.parametrize("select", [None, ["i", "s", "nope"]])
def test_point_spans_read_as_scans_per_span(ranges, filt, select):
    """The partition server reads consecutive point spans with one multi-get (and the plain path,
    ``RangeStore.scan(points=…)``, too): the page an iterator per span gives, filter applied to each."""
    store = ranges.open["r1"].store
    spans = point_spans(random.Random(7), 60, with_range=True)
    req = scan_req(lo=spans[0][0], hi=spans[0][1], spans=spans[1:], filter=filt, select=select)
    want = old_spans(store, req)
    if filt is None:
        assert len(want["entities"]) > 30
    same_reply(ranges.data("scan", req), want)
    keys = [lo for lo, hi in spans if range_scan.is_point_span(lo, hi)]
    _, pred = compile_cached(filt)
    found, nxt = store.scan(b"", None, None if filt is None else pred, select, points=keys)
    per_span = [e for k in keys for e in store.scan(k, k + b"\x00", None if filt is None else pred, select)[0]]
    assert nxt is None and found == per_span


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(FILTERS), st.integers(1, 40), st.integers(1, 80), st.booleans(), st.integers(0, 2**32))
def test_generated_point_spans_page_as_plain(filled, filt, limit, n, with_range, seed):
    """Pages of point spans (and a range among them) through the partition server, resumed from each
    page's ``next`` as the frontend does, equal the plain path's pages and together the whole answer."""
    store = filled.open["r1"].store
    spans = point_spans(random.Random(seed), n, with_range)
    whole = old_spans(store, scan_req(lo=spans[0][0], hi=spans[0][1], spans=spans[1:], filter=filt))["entities"]
    got: list = []
    pos = b""
    while True:
        left = [(max(lo, pos), hi) for lo, hi in spans if hi is None or hi > pos]
        if not left:
            break
        req = scan_req(lo=left[0][0], hi=left[0][1], spans=left[1:], filter=filt, limit=limit)
        want = old_spans(store, req)
        same_reply(filled.data("scan", req), want)
        got += want["entities"]
        if want["next"] is None:
            break
        pos = want["next"]
    assert got == whole


def test_a_full_page_of_point_spans_goes_on_at_the_next_key(ranges):
    """A page filled by the last key found goes on from the next key asked for, found or not, as a
    scan per span does (a key inserted meanwhile is then read by the next page)."""
    store = ranges.open["r1"].store
    spans = [point("a", "a"), point("a", "missing"), point("a", "zz missing")]
    req = scan_req(lo=spans[0][0], hi=spans[0][1], spans=spans[1:], limit=1)
    want = old_spans(store, req)
    assert len(want["entities"]) == 1 and want["next"] == encode_key("a", "missing")
    same_reply(ranges.data("scan", req), want)
    assert store.scan(b"", None, limit=1, points=[s[0] for s in spans])[1] == encode_key("a", "missing")
    assert store.scan(b"", None, limit=1, points=[s[0] for s in spans[1:]]) == ([], None)


@pytest.mark.parametrize("after", [None, "last"])
def test_a_scan_carrying_a_feed_request_answers_it_beside_its_rows(ranges, after):
    """A scan with ``feed`` (a query through an index reading its base rows and checking the index fresh in one
    request: frontend/indexes/query.py) answers its page and, as ``feed``, what the ``changes`` op answers."""
    store = ranges.open["r1"].store
    spans = [point("a", "a"), point("a", "missing")]
    feed = {"lo": b"", "hi": None, "after": None if after is None else [store.last_ts, None], "upto": None,
            "limit": 1, "close": False, "need": None}
    plain = protocol.unpack(protocol.ok(ranges.data("scan", scan_req(lo=spans[0][0], hi=spans[0][1],
                                                                     spans=spans[1:]))))["ok"]
    alone = protocol.unpack(protocol.ok(ranges.data("changes", {"op": "changes", "range": "r1", "epoch": 3, **feed})))
    both = protocol.unpack(protocol.ok(ranges.data("scan", scan_req(lo=spans[0][0], hi=spans[0][1], spans=spans[1:],
                                                                    feed=feed))))["ok"]
    assert both == {**plain, "feed": alone["ok"]} and len(plain["entities"]) == 1
    assert len(alone["ok"]["records"]) == (1 if after is None else 0)  # from the beginning: one record (limit 1)
    empty = protocol.unpack(protocol.ok(ranges.data("scan", scan_req(lo=b"a", hi=b"a", limit=0, feed=feed))))["ok"]
    assert empty == {"entities": [], "next": None, "feed": alone["ok"]}
    with pytest.raises(TableError) as err:
        ranges.data("scan", scan_req(lo=b"", hi=None, feed=[1]))
    assert err.value.code.name == "InvalidInput"
