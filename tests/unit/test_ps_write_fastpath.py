"""The partition server's write path decides and answers exactly as packing the decoded results would.

* write and batch replies (spliced from the stored values) and the request records stored with them are
  byte-identical with ``msgpack.packb`` of the decoded answers, also when a request id is replayed;
* a batch that reads every row with one multi-get ends (result, error, index, stored data) exactly like
  one that reads row by row;
* a merge re-validates the merged props unless they are the very pairs just validated;
* the validation fast paths (keys checked at once, props by value type) give the same size or the
  same error as checking every pair with the full rule chain.
"""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition_server.ranges import RangeSet
from partition_server.store import fast_path
from partition_server.store.range_store import REQ_PREFIX, RangeStore
from rangetable import entity as ent
from rangetable import protocol
from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, GUID, INT32, INT64, STRING, etag_from_ticks
from rangetable.errors import TableError
from rangetable.protocol import entity_to_wire
from tests import oracles

RECORD = {"id": "r1", "table": "t", "low": "", "high": None, "epoch": 3, "path": "r1"}
KEYS = ["", "a", "é", "日本", "🙂x", "k" * 31, "k" * 32, "ü" * 128, "日" * 100, "k" * 300]
ALL_TYPES = {
    "s": [STRING, "héllo 🙂"],
    "a": [STRING, "plain"],
    "i": [INT32, -7],
    "l": [INT64, 2**53 + 1],
    "d": [DOUBLE, 2.5],
    "b": [BOOLEAN, True],
    "t": [DATETIME, 638396640000000000],
    "g": [GUID, "00000000-0000-0000-0000-00000000000a"],
    "x": [BINARY, b"\x00\xff" * 20],
}
KINDS = ["insert", "merge", "replace", "insert_or_merge", "insert_or_replace", "delete"]


@pytest.fixture(params=["wall", "small"])
def ranges(request, tmp_path):
    """A RangeSet serving one full range; "small" Timestamps are 1, 2, 3 … (not uint64)."""
    rs = RangeSet(str(tmp_path))
    rs.load(RECORD)
    if request.param == "small":
        rs.open["r1"].store.clock = lambda: 0
    yield rs
    rs.unload_all()


def record(store: RangeStore, rid: str) -> bytes:
    return store._db.get(REQ_PREFIX + rid.encode())


def props_for(i: int) -> dict:
    if i % 3 == 0:
        return {}
    if i % 3 == 1:
        return {k: list(v) for k, v in ALL_TYPES.items()}
    return {"s": [STRING, f"v{i}"], "i": [INT32, i], "x": [BINARY, bytes([i % 256])]}


# --- replies and request records ------------------------------------------------------------------


def test_write_replies_and_records_match_packed_answers(ranges):
    store = ranges.open["r1"].store
    n = 0
    for pk in KEYS:
        for rk in KEYS[:4] + KEYS[-3:]:
            for kind in KINDS:
                n += 1
                rid = f"w{n}"
                op = {"op": kind, "pk": pk, "rk": rk, "props": props_for(n), "if_match": None}
                req = {"op": "write", "range": "r1", "epoch": 3, "write": op, "rid": rid}
                body = protocol.ok(ranges.data("write", req))
                e = store.get(pk, rk)
                answer = None if kind == "delete" else entity_to_wire(e)
                assert body == protocol.ok(answer)
                assert protocol.unpack(body) == {"ok": answer}
                assert record(store, rid) == msgpack.packb([store.last_ts, "w", answer])
                assert protocol.ok(ranges.data("write", req)) == body  # a replay: the stored answer
                assert store.write(op, rid) == (None if e is None else e)
                assert store.get(pk, rk) == e
    assert ranges.open["r1"].load.writes == 2 * n


def test_batch_replies_and_records_match_packed_answers(ranges):
    store = ranges.open["r1"].store
    for i, pk in enumerate(KEYS):
        rows = KEYS[:4] + KEYS[-3:]
        store.batch([{"op": "insert", "pk": pk, "rk": rk, "props": props_for(j)} for j, rk in enumerate(rows[:3])])
        kinds = ["replace", "merge", "delete", "insert", "insert_or_merge", "insert_or_replace", "insert"]
        ops = [{"op": k, "pk": pk, "rk": rk, "props": props_for(i + j), "if_match": "*" if j == 0 else None}
               for j, (k, rk) in enumerate(zip(kinds, rows, strict=True))]
        rid = f"b{i}"
        req = {"op": "batch", "range": "r1", "epoch": 3, "ops": ops, "rid": rid}
        body = protocol.ok(ranges.data("batch", req))
        answer = [None if op["op"] == "delete" else entity_to_wire(store.get(pk, op["rk"])) for op in ops]
        assert body == protocol.ok(answer)
        assert record(store, rid) == msgpack.packb([store.last_ts, "b", answer])
        assert protocol.ok(ranges.data("batch", req)) == body
        assert [None if e is None else entity_to_wire(e) for e in store.batch(ops, rid)] == answer
    assert protocol.ok(ranges.data("batch", {"op": "batch", "range": "r1", "epoch": 3, "ops": [], "rid": "e"})) \
        == protocol.ok([])


def test_entity_api_answers(tmp_path):
    with RangeStore.open(tmp_path / "r", clock=lambda: 0) as s:
        props = {"a": [STRING, "x"]}
        e = s.write({"op": "insert", "pk": "p", "rk": "r", "props": props})
        assert e is not None and (e.pk, e.rk, e.props) == ("p", "r", props) and s.get("p", "r") == e
        wire = s.write({"op": "merge", "pk": "p", "rk": "r", "props": {"b": [INT32, 1]}}, wire=True)
        assert msgpack.unpackb(wire) == entity_to_wire(s.get("p", "r"))
        assert s.write({"op": "delete", "pk": "p", "rk": "r"}, wire=True) == msgpack.packb(None)
        got = s.batch([{"op": "insert", "pk": "q", "rk": str(i), "props": props} for i in range(3)], "B")
        assert got == [s.get("q", str(i)) for i in range(3)]
        assert s.batch([{"op": "insert", "pk": "q", "rk": "9"}], "B", answer="wire") == [msgpack.packb(entity_to_wire(e))
                                                                                 for e in got]


def test_merge_revalidates_when_stored_props_remain(tmp_path):
    with RangeStore.open(tmp_path / "r") as s:
        s.write({"op": "insert", "pk": "p", "rk": "n", "props": {f"s{i}": [INT32, i] for i in range(200)}})
        with pytest.raises(TableError) as ei:
            s.write({"op": "merge", "pk": "p", "rk": "n", "props": {f"n{i}": [INT32, i] for i in range(60)}})
        assert ei.value.error_code == "TooManyProperties"
        every = {f"s{i}": [INT32, -i] for i in reversed(range(200))} | {"x": [STRING, "y"]}
        e = s.write({"op": "insert_or_merge", "pk": "p", "rk": "n", "props": every})
        assert list(e.props) == [f"s{i}" for i in range(200)] + ["x"]  # the stored order, then new names
        assert e == s.get("p", "n") and e.props["s7"] == [INT32, -7]
        blob = [BINARY, b"\x00" * 65536]
        s.write({"op": "insert", "pk": "p", "rk": "b", "props": {f"b{i}": blob for i in range(15)}})
        with pytest.raises(TableError) as ei:
            s.write({"op": "merge", "pk": "p", "rk": "b", "props": {"c0": blob, "c1": blob}})
        assert ei.value.error_code == "EntityTooLarge"
        assert s.write({"op": "merge", "pk": "p", "rk": "b", "props": {f"b{i}": blob for i in range(15)}})


# --- batch: one multi-get = row-by-row reads ---------------------------------------------------------


def outcome(store: RangeStore, ops: list, rid: str) -> Any:
    try:
        return [None if e is None else entity_to_wire(e) for e in store.batch(ops, rid)]
    except TableError as exc:
        return exc.to_wire()


def random_op(rng: random.Random, pk: str, etags: dict[str, str]) -> dict:
    rk = rng.choice(["a", "b", "c", "d", "e", "bad/key", "\ud800"])
    op: dict[str, Any] = {"op": rng.choice(KINDS + ["bogus"]), "pk": pk, "rk": rk}
    roll = rng.random()
    if roll < 0.1:
        op["props"] = {"x": [INT32, "not an int"]}
    elif roll < 0.15:
        op["props"] = {f"p{i}": [INT32, i] for i in range(200)}  # too many once merged with ~60 stored
    elif roll < 0.9:
        op["props"] = {rng.choice("uvwxyz"): [STRING, "v" * rng.randint(0, 5)]}
    match = rng.random()
    if match < 0.2:
        op["if_match"] = etags.get(rk, etag_from_ticks(630000000000000000))
    elif match < 0.3:
        op["if_match"] = etag_from_ticks(630000000000000000)
    elif match < 0.35:
        op["if_match"] = "malformed"
    elif match < 0.5:
        op["if_match"] = "*"
    return op


def test_batch_prefetch_matches_row_by_row_reads(tmp_path, monkeypatch):
    ticks = [10**17]
    fast = RangeStore.open(tmp_path / "fast", clock=lambda: ticks[0])
    slow = RangeStore.open(tmp_path / "slow", clock=lambda: ticks[0])
    prefetch = fast_path.prefetch

    def row_by_row(get: Any, ops: list) -> Any:
        return get

    rng = random.Random(20240601)
    prefetched = 0
    try:
        for case in range(300):
            pk = f"c{case}"
            seed = [{"op": "insert", "pk": pk, "rk": rk, "props": {f"s{i}": [INT32, i] for i in range(60)}}
                    for rk in "abc" if rng.random() < 0.6]
            etags: dict[str, str] = {}
            for store in (fast, slow):
                for e in store.batch(seed):
                    etags[e.rk] = etag_from_ticks(e.ts)
            ops = [random_op(rng, pk, etags) for _ in range(rng.randint(1, 6))]
            monkeypatch.setattr(fast_path, "prefetch", prefetch)
            a = outcome(fast, ops, f"r{case}")
            monkeypatch.setattr(fast_path, "prefetch", row_by_row)
            b = outcome(slow, ops, f"r{case}")
            assert a == b, (case, ops)
            prefetched += isinstance(getattr(prefetch(fast._db.get, ops), "__self__", None), dict)
            ticks[0] += 1
        assert list(fast._db.items()) == list(slow._db.items())
        assert prefetched > 100
    finally:
        fast.close()
        slow.close()


# --- validation fast paths ---------------------------------------------------------------------------


def result(fn: Any, *args: Any) -> Any:
    try:
        return "ok", fn(*args)
    except TableError as exc:
        return exc.error_code, exc.message


VALUES = [
    "", "abc", "é", "\ud800", "x" * 32768, "x" * 32769, "é" * 32768, "🙂" * 16384, "🙂" * 16385,
    "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000A", "0000000-00000-0000-0000-00000000000a",
    "00000000-0000-0000-0000-0000000000-a", "00000000-0000-0000-0000-00000000000a ", "٠" * 8 + "-0000-0000-0000-000000000000",
    0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1,
    ent.MIN_DATETIME_TICKS, ent.MIN_DATETIME_TICKS - 1, ent.MAX_DATETIME_TICKS, ent.MAX_DATETIME_TICKS + 1,
    True, False, 0.0, 1.5, float("nan"), b"", b"\x00" * 65536, b"\x00" * 65537, bytearray(b"x"), None, [1],
]
CODES = [STRING, INT32, INT64, DOUBLE, BOOLEAN, DATETIME, GUID, BINARY, 8, -1, True, False, 1.0, "0", None]
NAMES = ["a", "Name_1", "PartitionKey", "Timestamp", "1bad", "x" * 255, "x" * 256, "é", 5, b"a"]

PAIR_CASES = [[c, v] for c in CODES for v in VALUES] + [[STRING], "ab", [1, 2, 3], 7, (INT32, 5)]


def test_props_fast_path_matches_rule_chain():
    rng = random.Random(7)
    pairs = PAIR_CASES
    for pair in pairs:
        props = {"p": pair}
        assert result(ent._check_props, props) == result(oracles.props_size_plain, props), pair
    for _ in range(3000):
        props = {rng.choice(NAMES): rng.choice(pairs) for _ in range(rng.randint(0, 6))}
        assert result(ent._check_props, props) == result(oracles.props_size_plain, props), props
    big = {f"p{i}": [INT32, i] for i in range(253)}
    for props in (big, [("a", [STRING, "x"])], None):
        assert result(ent._check_props, props) == result(oracles.props_size_plain, props)


def test_entity_fast_path_matches_rule_chain():
    keys = ["", "a", "é", "🙂", "a/b", "a#", "a?", "a\\", "\x00", "\x7f", "\x9f", "\ud800", "k" * 256, "k" * 257,
            "k" * 512, "k" * 513, "é" * 257, "🙂" * 256, "🙂" * 257, 5, None, b"a"]
    binary = {"b": [BINARY, b"\x00" * 65536]}
    for pk in keys:
        for rk in keys:
            for props in ({}, {"a": [STRING, "x"]}, {"a": [INT32, "x"]}):
                assert result(ent.validate_entity, pk, rk, props) == result(oracles.validate_entity_plain, pk, rk, props)
    near = {f"b{i}": [BINARY, b"\x00" * 65536] for i in range(15)} | {"s": [STRING, "x" * 26000]}
    for pk, rk in (("k" * 10, "k" * 10), ("k" * 300, "r"), ("é" * 200, "é" * 200)):
        for props in (binary, near):
            assert result(ent.validate_entity, pk, rk, props) == result(oracles.validate_entity_plain, pk, rk, props)


KEY_CASES = ["", "a", "é", "🙂", "a/b", "a#", "\x00", "\ud800", "k" * 256, "k" * 257, "🙂" * 257, 5, None]


@settings(max_examples=400, deadline=None)
@given(props=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(PAIR_CASES), max_size=8)
       | st.sampled_from([None, [("a", [STRING, "x"])], {f"p{i}": [INT32, i] for i in range(253)}]),
       pk=st.sampled_from(KEY_CASES) | st.text(max_size=300), rk=st.sampled_from(KEY_CASES) | st.text(max_size=300))
def test_validation_fast_and_plain_agree(props: Any, pk: Any, rk: Any) -> None:
    """The product's fast validation and its plain rule chain: the same size, or the same error."""
    assert result(ent._check_props, props) == result(oracles.props_size_plain, props)
    assert result(ent.validate_entity, pk, rk, props) == result(oracles.validate_entity_plain, pk, rk, props)
