"""The batch fast path (``range_ops`` batch-wide validation and C-level upserts) decides, writes and
answers exactly as the op-by-op evaluation it replaced.

The reference below is that evaluation as it was (``prepare_op`` per op after one multi-get, the
shape check op by op, everything packed with ``protocol.pack``). Random batches, mostly of one
schema (as the Azure SDK sends them) with random defects, go through both: same wire answers, same
props written, same WriteBatch operations in the same order with the same bytes, or the same error
(code, message, index). A store run on each ends with byte-identical RocksDB contents.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from partition_server import range_ops, range_store, wire
from partition_server.range_store import RangeStore
from rangetable import entity, protocol
from rangetable.edm import (
    BINARY,
    BOOLEAN,
    DATETIME,
    DOUBLE,
    GUID,
    INT32,
    INT64,
    MAX_DATETIME_TICKS,
    MIN_DATETIME_TICKS,
    STRING,
    etag_from_ticks,
)
from rangetable.entity import validate_entity
from rangetable.errors import TableError
from rangetable.keys import encode_key

# --- the reference: the op-by-op evaluation as it was ----------------------------------------------

_pack = protocol.pack


def ref_prepare_op(get: Callable, op: dict, ts: int) -> tuple[bytes, bytes | None, dict | None]:
    try:
        kind = op["op"]
        pk = op["pk"]
        rk = op["rk"]
    except (KeyError, TypeError):
        raise TableError("InvalidInput", "An operation needs 'op', 'pk' and 'rk'.") from None
    if kind == "insert_or_replace":
        props = op.get("props")
        if props is None:
            props = {}
        validate_entity(pk, rk, props)
        return encode_key(pk, rk), _pack([ts, props]), props
    if kind == "insert":
        props = op.get("props")
        if props is None:
            props = {}
        validate_entity(pk, rk, props)
        key = encode_key(pk, rk)
        if get(key) is not None:
            raise TableError("EntityAlreadyExists")
        return key, _pack([ts, props]), props
    if kind == "delete":
        validate_entity(pk, rk, {})
        etag = range_ops.check_if_match(op.get("if_match"))
        key = encode_key(pk, rk)
        cur = get(key)
        if cur is None:
            raise TableError("ResourceNotFound")
        if etag is not None and etag != etag_from_ticks(msgpack.unpackb(cur)[0]):
            raise TableError("UpdateConditionNotSatisfied")
        return key, None, None
    if kind not in ("replace", "merge", "insert_or_merge"):
        raise TableError("InvalidInput", f"Unknown operation {kind!r}.")
    props = op.get("props")
    if props is None:
        props = {}
    validate_entity(pk, rk, props)
    key = encode_key(pk, rk)
    etag = None
    if kind == "insert_or_merge":
        cur = get(key)
    else:
        etag = range_ops.check_if_match(op.get("if_match"))
        cur = get(key)
        if cur is None:
            raise TableError("ResourceNotFound")
    if cur is not None:
        cts, cprops = msgpack.unpackb(cur)
        if etag is not None and etag != etag_from_ticks(cts):
            raise TableError("UpdateConditionNotSatisfied")
        if kind != "replace" and cprops:
            covered = cprops.keys() <= props.keys()
            cprops.update(props)
            props = cprops
            if not covered:
                validate_entity(pk, rk, props)
    return key, _pack([ts, props]), props


def ref_check_batch_shape(ops: list[dict]) -> None:
    if not isinstance(ops, list):
        raise TableError("InvalidInput", "A batch is a list of operations.")
    if len(ops) > range_ops.MAX_BATCH_OPS:
        raise TableError(
            "InvalidInput",
            "The batch request operation exceeds the maximum 100 changes per change set.",
            index=0,
        )
    seen: set[str] = set()
    pk0 = None
    for i, op in enumerate(ops):
        try:
            pk = op["pk"]
            rk = op["rk"]
        except (KeyError, TypeError):
            raise TableError("InvalidInput", "An operation needs 'op', 'pk' and 'rk'.", index=i) from None
        if i == 0:
            pk0 = pk
        elif pk != pk0:
            raise TableError("CommandsInBatchActOnDifferentPartitions", index=i)
        try:  # (the one change since: a non-hashable RowKey used to escape as a TypeError)
            duplicate = rk in seen
            seen.add(rk)
        except TypeError:
            raise TableError("InvalidInput", "The RowKey must be a string.", index=i) from None
        if duplicate:
            raise TableError(
                "InvalidDuplicateRow",
                f"A command with RowKey '{rk}' is already present in the batch. "
                "An operation can only be present once in a batch request.",
                index=i,
            )


def ref_prefetch(get: Callable, ops: list[dict]) -> Callable:
    try:
        keys = [encode_key(op["pk"], op["rk"]) for op in ops if op.get("op") != "insert_or_replace"]
    except (AttributeError, KeyError, TypeError, UnicodeError):
        return get
    if not keys:
        return get
    return dict(zip(keys, get(keys), strict=True)).get


def ref_prepare_batch(get: Callable, ops: list[dict], ts: int, wb: Any, wire_: bool = True,
                      probe: Any = None) -> tuple:
    read = ref_prefetch(get, ops)
    items: list[bytes] = []
    written: list[dict | None] = []
    size = 0
    prefix = b""
    plen = 0
    for i, op in enumerate(ops):
        try:
            key, value, props = ref_prepare_op(read, op, ts)
        except TableError as e:
            if e.index is None:
                raise TableError(e.error_code, e.message, index=i) from None
            raise
        if value is None:
            wb.delete(key)
            size += len(key)
            if wire_:
                items.append(wire.NIL)
        else:
            wb.put(key, value)
            size += len(key) + len(value)
            if wire_:
                if not prefix:
                    pkb = key[: key.index(b"\x00")]
                    prefix, plen = wire.key_prefix(pkb), len(pkb) + 1
                items.append(wire.entity(prefix, key[plen:], value))
        if size > range_ops.MAX_BATCH_BYTES:
            raise TableError("RequestBodyTooLarge", "The batch request exceeds 4 MiB.")
        written.append(props)
    return items, written


# --- random batches -----------------------------------------------------------------------------


class StrSub(str):
    """A str subclass: valid as a key, not as a String value."""


class Recorder:
    """Stands in for a WriteBatch: records puts and deletes in order."""

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.log.append(("put", key, value))

    def delete(self, key: bytes) -> None:
        self.log.append(("delete", key))


NAMES = ["name", "city", "note", "qty", "big", "price", "active", "created", "ref", "blob", "tag", "é_x"]
CODES = [STRING, STRING, STRING, INT32, INT64, DOUBLE, BOOLEAN, DATETIME, GUID, BINARY, STRING, STRING]
KINDS = ["insert_or_merge"] * 4 + ["insert_or_replace"] * 2 + ["insert", "merge", "replace", "delete"]


def valid_value(rng: random.Random, code: int) -> Any:
    if code == STRING:
        return rng.choice(["", "abc", "Zürich", "x" * rng.randint(0, 300), "🙂", "日本", "lorem " * 20, "a\x00b"])
    if code == INT32:
        return rng.choice([0, -1, 7, -(2**31), 2**31 - 1, rng.randint(-(2**31), 2**31 - 1)])
    if code == INT64:
        return rng.choice([0, -(2**63), 2**63 - 1, 2**40, rng.randint(-(2**63), 2**63 - 1)])
    if code == DOUBLE:
        return rng.choice([0.0, -1.5, 1e300, float("inf"), float("nan"), rng.random()])
    if code == BOOLEAN:
        return rng.random() < 0.5
    if code == DATETIME:
        return rng.choice([MIN_DATETIME_TICKS, MAX_DATETIME_TICKS, 638396643000000000 + rng.randint(0, 10**9)])
    if code == GUID:
        return str(uuid.UUID(int=rng.getrandbits(128)))
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))


def bad_pair(rng: random.Random, code: int, v: Any) -> Any:
    guid = str(uuid.UUID(int=rng.getrandbits(128)))
    return rng.choice([
        [code, object()], [code, None], [code], [code, v, 1], [], (code, v), [99, v], [True, v], [1.0, v],
        [float(code), v], "ab", 7, None, {0: "x", 1: 5}, {code: 1, 5: 2}, [INT32, 2**31], [INT32, True],
        [INT64, 2**63], [DATETIME, MIN_DATETIME_TICKS - 1], [DATETIME, 1.5], [BOOLEAN, 1], [DOUBLE, 1],
        [STRING, StrSub("x")], [STRING, b"x"], [STRING, "\ud800"], [STRING, "x" * 32769], [STRING, "é" * 32768],
        [STRING, "🙂" * 16385], [GUID, guid.upper()], [GUID, guid[:35]], [GUID, guid + "0"],
        [GUID, guid[:8] + "0" + guid[9:]], [GUID, guid.replace("-", "") + "----"], [GUID, "٠" * 8 + guid[8:]],
        [GUID, StrSub(guid)], [BINARY, bytearray(b"x")], [BINARY, b"\x00" * 65537], [8, 1], [-1, 1], ["0", "x"],
    ])


def make_props(rng: random.Random, schema: list[int], i: int) -> Any:
    return {NAMES[j]: [CODES[j], valid_value(rng, CODES[j])] for j in schema}


def defect(rng: random.Random, op: dict, schema: list[int], pk: str) -> None:
    """Spoil one op in one of many ways (some are harmless)."""
    props = op.get("props")
    what = rng.randrange(22)
    if what == 0 and isinstance(props, dict) and props:
        name = rng.choice(list(props))
        pair = props[name]
        code, v = pair if isinstance(pair, list) and len(pair) == 2 else (STRING, "x")
        props[name] = bad_pair(rng, code, v)
    elif what == 1 and isinstance(props, dict):
        items = list(props.items())
        rng.shuffle(items)
        op["props"] = dict(items)
    elif what == 2 and isinstance(props, dict) and props:
        del props[rng.choice(list(props))]
    elif what == 3 and isinstance(props, dict):
        props[rng.choice(["extra", "PartitionKey", "Timestamp", "bad name", "1x", "x" * 256, 5, "é"])] = [INT32, 1]
    elif what == 4:
        op["props"] = rng.choice([None, [], "x", {}])
    elif what == 5:
        op["props"] = {f"p{k}": [INT32, k] for k in range(253)}
    elif what == 6:
        op["rk"] = rng.choice(["a/b", "a#b", "a?b", "a\\b", "a\x00b", "a\x7fb", "a\x85b", "\ud800", 5, None,
                               "k" * 257, "ü" * 300, "日" * 256, StrSub("sub"), ["x"], "", "é"])
    elif what == 7:
        op["pk"] = rng.choice([pk + "x", 5, None])
    elif what == 8:
        op.pop(rng.choice(["op", "pk", "rk"]), None)
    elif what == 9:
        op["op"] = rng.choice(["upsert", None, 5, "delete", "insert", "replace", "merge", ["x"]])
    elif what == 10:
        op["if_match"] = rng.choice(["*", None, "W/\"datetime'2024-01-01T00%3A00%3A00.0000000Z'\"", "bad", 5])
    elif what == 11 and isinstance(props, dict) and props:
        name = rng.choice(list(props))
        props[name] = [STRING, "x" * rng.choice([30000, 32768])]  # large entities, large batches
    elif what == 12 and isinstance(props, dict) and props:
        name = rng.choice(list(props))
        props[name] = [BINARY, b"\x01" * 65536]


def make_batch(rng: random.Random, case: int) -> tuple[list, dict[bytes, bytes]]:
    """A batch (usually of one kind and one schema) and the rows already stored (key -> value)."""
    pk = rng.choice([f"pk{case}", "", "é" * 3, "p" * 256, "p" * 257])
    schema = rng.sample(range(len(NAMES)), rng.randint(0, 9))
    n = rng.choice([1, 2, 5, 30, 100, 101]) if rng.random() < 0.3 else rng.randint(1, 12)
    kind = rng.choice(KINDS)
    rks = [rng.choice([f"row-{i:05d}", f"r{i}", f"é{i}", "k" * 200 + str(i)]) for i in range(n)]
    ops: list[Any] = []
    for i, rk in enumerate(rks):
        op = {"op": kind if rng.random() < 0.9 else rng.choice(KINDS), "pk": pk, "rk": rk,
              "props": make_props(rng, schema, i), "if_match": None}
        if op["op"] == "delete":
            op["props"] = None
        ops.append(op)
    for _ in range(rng.choice([0, 0, 0, 1, 2, 3])):
        defect(rng, rng.choice(ops), schema, pk)
    if rng.random() < 0.03:
        ops[rng.randrange(n)] = rng.choice([None, "op", ["x"]])
    stored: dict[bytes, bytes] = {}
    for op in ops:
        if isinstance(op, dict) and type(op.get("rk")) is str and type(op.get("pk")) is str and rng.random() < 0.5:
            try:
                key = encode_key(op["pk"], op["rk"])
            except UnicodeError:
                continue
            sschema = rng.choice([schema, schema, schema[: len(schema) // 2], schema[::-1], [], [0, 3, 4]])
            ts = rng.choice([5, 638396643000000000, 2**40])
            stored[key] = _pack([ts, make_props(rng, sschema, 0)])
            if rng.random() < 0.5 and op.get("op") in ("merge", "replace", "delete"):
                op["if_match"] = etag_from_ticks(ts if rng.random() < 0.7 else ts + 1)
    return ops, stored


def outcome(shape: Callable, prepare: Callable, ops: Any, stored: dict, wire_: bool, probe: bool = False) -> tuple:
    """What checking and preparing ``ops`` gives: answers, written props (packed) and WriteBatch log,
    or the error. ``probe``: tell ``prepare`` which spans hold rows."""
    def get(k: Any) -> Any:
        return [stored.get(x) for x in k] if isinstance(k, list) else stored.get(k)

    def may_hold(lo: bytes, hi: bytes) -> bool:
        return any(lo <= k < hi for k in stored)

    wb = Recorder()
    try:
        shape(ops)
        extra = (may_hold,) if probe else ()
        items, written = prepare(get, ops, 638396643000000001, wb, wire_, *extra)
    except TableError as e:
        return "error", e.error_code, e.message, e.index
    except Exception as e:  # noqa: BLE001  (the same unexpected errors, too)
        return "exception", type(e).__name__, str(e)
    return "ok", items, _pack(written), wb.log


# --- tests --------------------------------------------------------------------------------------


def sdk_batch(pk: str, n: int = 100) -> list[dict]:
    """100 upserts as the Azure SDK sends them, decoded as the partition server receives them."""
    ops = []
    for i in range(n):
        props = {"name": [STRING, f"customer-{i:08d}"], "city": [STRING, "Oslo"], "note": [STRING, "lorem " * 13],
                 "qty": [INT32, i % 100], "price": [DOUBLE, i * 0.25], "active": [BOOLEAN, i % 3 == 0],
                 "created": [DATETIME, 638396643000000000 + i], "ref": [GUID, str(uuid.UUID(int=i))],
                 "tag": [STRING, f"t{i % 7}"]}
        ops.append({"op": "insert_or_merge", "pk": pk, "rk": f"row-{i:05d}", "props": props, "if_match": None})
    return msgpack.unpackb(_pack(ops))


def test_sdk_batch_takes_the_fast_path():
    ops = sdk_batch("p")
    assert range_ops._plan(ops) is not None
    stored = {encode_key("p", f"row-{i:05d}"): _pack([1, ops[i]["props"]]) for i in range(0, 100, 2)}
    a = outcome(ref_check_batch_shape, ref_prepare_batch, ops, stored, True)
    b = outcome(range_ops.check_batch_shape, range_ops.prepare_batch, ops, stored, True)
    assert a[0] == "ok" and a == b


@pytest.mark.parametrize("seed", range(4))
def test_random_batches_match_reference(seed):
    rng = random.Random(seed)
    fast = 0
    for case in range(700):
        ops, stored = make_batch(rng, case)
        wire_ = rng.random() < 0.8
        a = outcome(ref_check_batch_shape, ref_prepare_batch, ops, stored, wire_)
        b = outcome(range_ops.check_batch_shape, range_ops.prepare_batch, ops, stored, wire_, case % 2 == 0)
        assert a == b, (case, ops)
        fast += isinstance(ops, list) and range_ops._plan(ops) is not None
    assert fast > 150  # the fast path was exercised, not just the fallback


ALL_TYPES = {"s": STRING, "a": STRING, "i": INT32, "l": INT64, "d": DOUBLE, "b": BOOLEAN, "t": DATETIME, "g": GUID, "x": BINARY}
GOOD = {STRING: "plain ascii", INT32: -7, INT64: 2**53, DOUBLE: 2.5, BOOLEAN: True, DATETIME: 638396640000000000,
        GUID: "00000000-0000-0000-0000-00000000000a", BINARY: b"\x00\xff"}
_G = "0123abcd-0000-4000-8000-00000000000a"
BAD_VALUES: dict[int, list[Any]] = {
    STRING: [StrSub("x"), b"x", "\ud800", "a\udfffb", "x" * 32768, "x" * 32769, "é" * 32768, "é" * 32769,
             "🙂" * 16384, "🙂" * 16385, None, 5, 1.5],
    INT32: [2**31, 2**31 - 1, -(2**31), -(2**31) - 1, True, 1.0, "5", None, 2**64],
    INT64: [2**63, 2**63 - 1, -(2**63), -(2**63) - 1, True, 1.5, 2**64],
    DOUBLE: [1, True, "1.0", None, float("-inf")],
    BOOLEAN: [1, 0, None, "true"],
    DATETIME: [MIN_DATETIME_TICKS - 1, MAX_DATETIME_TICKS + 1, MIN_DATETIME_TICKS, 1.5, True, -1],
    GUID: [_G.upper(), _G[:35], _G + "0", _G[:8] + "0" + _G[9:], _G[:7] + "-" + _G[8:], _G.replace("-", "") + "----",
           *(_G[: p - 1] + "-0" + _G[p + 1 :] for p in (8, 13, 18, 23)), "٠" * 8 + _G[8:], StrSub(_G), "g" + _G[1:], " " + _G[1:], _G[:-1] + "\n", "0123abcd-0000-4000-8000-00000000000é"],
    BINARY: [bytearray(b"x"), b"\x00" * 65536, b"\x00" * 65537, "x", memoryview(b"x")],
}
SHAPES: list[Callable[[int, Any], Any]] = [
    lambda c, v: [c], lambda c, v: [c, v, 1], lambda c, v: (c, v), lambda c, v: [], lambda c, v: {c: 1, 5: v},
    lambda c, v: [float(c), v], lambda c, v: [c == 1 or c, v], lambda c, v: [c + 8, v], lambda c, v: None,
    lambda c, v: 7, lambda c, v: "ab", lambda c, v: [STRING if c else INT32, v], lambda c, v: [c, v],
]


def typed_batch(n: int = 6, pk: str = "p") -> list[dict]:
    return [{"op": "insert_or_merge", "pk": pk, "rk": f"r{i}", "if_match": None,
             "props": {name: [code, "héllo" if name == "s" else GOOD[code]] for name, code in ALL_TYPES.items()}}
            for i in range(n)]


def same(ops: list, stored: dict | None = None) -> None:
    for wire_ in (True, False):
        a = outcome(ref_check_batch_shape, ref_prepare_batch, ops, stored or {}, wire_)
        b = outcome(range_ops.check_batch_shape, range_ops.prepare_batch, ops, stored or {}, wire_, wire_)
        assert a == b, ops


@pytest.mark.parametrize("at", [0, 1, 5])
def test_each_defect_in_a_valid_batch(at):
    """One bad pair, name, key or shape in a batch that is otherwise valid (the fast path's test)."""
    same(typed_batch())
    for name, code in ALL_TYPES.items():
        for v in BAD_VALUES[code]:
            ops = typed_batch()
            ops[at]["props"][name] = [code, v]
            same(ops)
        for shape in SHAPES:
            ops = typed_batch()
            ops[at]["props"][name] = shape(code, GOOD[code])
            same(ops)
    for bad_name in ["PartitionKey", "Timestamp", "bad name", "1x", "x" * 256, "x" * 255, 5, None, "é"]:
        ops = typed_batch()
        ops[at]["props"][bad_name] = [INT32, 1]
        same(ops)
        ops = typed_batch()
        ops[at]["props"] = {bad_name: [INT32, 1], **{k: v for k, v in ops[at]["props"].items() if k != "s"}}
        same(ops)
    for rk in ["a/b", "a#b", "a?b", "a\\b", "a\x00b", "a\x1fb", "a\x7fb", "a\x85b", "a\x9fb", "\ud800", "é",
               "k" * 256, "k" * 257, "k" * 512, "k" * 513, "🙂" * 256, "🙂" * 257, "日" * 300, StrSub("sub"), 5, None]:
        ops = typed_batch()
        ops[at]["rk"] = rk
        same(ops)
    for pk in ["a/b", "🙂" * 257, "k" * 513, "é" * 256, StrSub("p")]:
        same(typed_batch(pk=pk))
    ops = typed_batch()
    ops[at]["props"] = dict(reversed(ops[at]["props"].items()))  # other order: each op on its own
    same(ops)
    stored = {encode_key("p", f"r{i}"): _pack([9, {n: [STRING, "old"] for n in order}])
              for i, order in enumerate([["s", "i"], list(ALL_TYPES), list(ALL_TYPES)[::-1], ["z"], []])}
    same(ops, stored)
    same(typed_batch(), stored)


@pytest.mark.parametrize("kind", ["insert_or_merge", "merge", "replace"])
def test_merges_that_break_limits(kind):
    """Merged props are validated again when stored names remain: too many, or too large."""
    many = _pack([9, {f"p{k}": [INT32, k] for k in range(200)}])
    large = _pack([9, {f"p{k}": [STRING, "x" * 32768] for k in range(15)}])
    for stored_value, props in [(many, {f"q{k}": [INT32, k] for k in range(60)}),
                                (many, {f"q{k}": [INT32, k] for k in range(52)}),
                                (large, {f"q{k}": [STRING, "y" * 32768] for k in range(2)}),
                                (large, {"q": [STRING, "y" * 100]})]:
        ops = [{"op": kind, "pk": "p", "rk": f"r{i}", "props": dict(props), "if_match": None} for i in range(3)]
        same(ops, {encode_key("p", "r1"): stored_value})


def test_size_limits_in_valid_batches():
    """Entities around 1 MiB (also with characters outside the BMP) and batches around 4 MiB."""
    ascii_big = {f"s{j}": [STRING, "x" * (32768 if j < 15 else 30000)] for j in range(16)}
    astral_big = {f"s{j}": [STRING, "🙂" * (16384 if j < 15 else 15000)] for j in range(16)}
    for big, pk, rk in [(ascii_big, "p", "r"), (ascii_big, "🙂" * 256, "r"), (ascii_big, "é" * 256, "🙂" * 200),
                        (astral_big, "p", "r")]:
        base = entity._props_size([big])
        if big is astral_big:
            base = sum(8 + 2 * len(n) + 4 + len(v.encode("utf-16-le")) for n, (_, v) in big.items())
        keys = 4 + len(pk.encode("utf-16-le")) + len(rk.encode("utf-16-le"))  # 4 + 2 per UTF-16 unit
        seen = set()
        for extra in (-4, -2, 0, 2, 4, 300, 600, 1100):
            room = 1048576 - keys - base - (8 + 2 * len("z") + 4)  # what the last string may take
            ops = [{"op": "insert_or_replace", "pk": pk, "rk": rk,
                    "props": {**big, "z": [STRING, "y" * ((room + extra) // 2)]}}]
            same(ops)
            res = outcome(ref_check_batch_shape, ref_prepare_batch, ops, {}, False)
            seen.add(res[0] if res[0] == "ok" else res[1])
        assert seen == {"ok", "EntityTooLarge"}, seen  # both sides of the limit
    seen = set()
    for size in (41000, 41800, 41900, 42000, 43000):  # 100 entities about 4 MiB in all
        ops = [{"op": "insert_or_merge", "pk": "p", "rk": f"r{i}",
                "props": {"a": [STRING, "x" * 30000], "b": [STRING, "y" * (size - 30000)]}} for i in range(100)]
        same(ops)
        res = outcome(ref_check_batch_shape, ref_prepare_batch, ops, {}, False)
        seen.add(res[0] if res[0] == "ok" else res[1])
    assert seen == {"ok", "RequestBodyTooLarge"}, seen


def test_batch_shape_matches_reference():
    rng = random.Random(3)
    cases: list[Any] = [None, {}, "x", (), [], [{"op": "insert", "pk": "a", "rk": "b"}] * 101, [None], [5],
                        [["pk", "rk"]], [{"pk": "a"}], [{"rk": "a"}], [{"pk": "a", "rk": ["x"]}],
                        [{"pk": float("nan"), "rk": "a"}] * 2, [{"pk": 1, "rk": "a"}, {"pk": 1.0, "rk": "b"}],
                        [{"pk": "a", "rk": "x"}, {"pk": StrSub("a"), "rk": "y"}]]
    for _ in range(2000):
        n = rng.randint(1, 8)
        ops = [{"pk": rng.choice(["a", "a", "a", "b", 1]), "rk": rng.choice(["x", "y", "z", "w", "v", 1, ("t",)])}
               for _ in range(n)]
        if rng.random() < 0.2:
            ops[rng.randrange(n)].pop(rng.choice(["pk", "rk"]))
        cases.append(ops)
    for ops in cases:
        res = []
        for fn in (ref_check_batch_shape, range_ops.check_batch_shape):
            try:
                fn(ops)
                res.append("ok")
            except TableError as e:
                res.append((e.error_code, e.message, e.index))
            except Exception as e:  # noqa: BLE001
                res.append((type(e).__name__, str(e)))
        assert res[0] == res[1], ops


def test_partition_probe(tmp_path):
    """span_may_hold: False only for a span without keys; it gives up (True) on many deletes."""
    store = RangeStore.open(tmp_path / "s")
    try:
        db = store._db

        def holds(pk: str) -> bool:
            return range_ops.span_may_hold(db, pk.encode() + b"\x00", pk.encode() + b"\x01")

        assert not holds("p")
        store.batch([{"op": "insert", "pk": "p", "rk": f"r{i}", "props": {}} for i in range(100)])
        store.batch([{"op": "insert", "pk": "q", "rk": "r", "props": {}}])
        assert holds("p") and holds("q") and not holds("pp") and not holds("o") and not holds("")
        for _ in range(3):  # 100 rows put and deleted 3 times: 700 versions not yet compacted
            store.batch([{"op": "insert_or_replace", "pk": "p", "rk": f"r{i}", "props": {}} for i in range(100)])
            store.batch([{"op": "delete", "pk": "p", "rk": f"r{i}"} for i in range(100)])
        assert holds("p")  # gave up skipping the deletes: the rows are read instead
        assert store.batch([{"op": "insert", "pk": "p", "rk": f"r{i}", "props": {}} for i in range(100)])
        with pytest.raises(TableError) as exc:
            store.batch([{"op": "insert", "pk": "q", "rk": "s", "props": {}}, {"op": "insert", "pk": "q", "rk": "r"}])
        assert (exc.value.error_code, exc.value.index) == ("EntityAlreadyExists", 1)
        store.flush()
        assert holds("q") and not holds("qq")
    finally:
        store.close()


def test_pack_value_matches_protocol_pack():
    class IntSub(int):
        pass

    values: list[Any] = [{}, {"a": [STRING, "x"]}, {"a": (INT32, 5)}, {"a": [STRING, StrSub("s")]},
                         {"a": [INT64, IntSub(7)]}, {"a": [BINARY, bytearray(b"xy")]}, {"a": [DOUBLE, float("nan")]},
                         {StrSub("k"): [BOOLEAN, True]}, {"a": [BINARY, memoryview(b"ab")]}]
    for props in values:
        for ts in (0, 5, 2**40, 638396643000000000):
            assert range_ops.pack_value(ts, props) == _pack([ts, props])
    with pytest.raises(TypeError):
        range_ops.pack_value(1, {"a": [STRING, object()]})
    with pytest.raises(OverflowError):
        range_ops.pack_value(1, {"a": [INT64, 2**64]})


def test_wire_entities_match_entity():
    rng = random.Random(5)
    for _ in range(200):
        n = rng.randint(1, 20)
        rkbs = [rng.choice(["", "a", "é" * rng.randint(0, 130), "k" * rng.randint(0, 300)]).encode() for _ in range(n)]
        values = [_pack([rng.choice([1, 2**40]), {"a": [STRING, "x" * rng.randint(0, 40)]}]) for _ in range(n)]
        if rng.random() < 0.2:
            values[rng.randrange(n)] = _pack([5, {}, 1])  # not the stored layout: decoded and packed instead
        prefix = wire.key_prefix(rng.choice(["p", "é" * 200]).encode())
        assert wire.entities(prefix, rkbs, values) == [wire.entity(prefix, r, v) for r, v in zip(rkbs, values,
                                                                                                  strict=True)]


def test_stores_match_reference_byte_for_byte(tmp_path, monkeypatch):
    """Whole batches and single writes through two stores, one on the reference, with request ids and
    replays: same answers, same errors and byte-identical RocksDB contents."""
    ticks = [638396643000000000]
    ref = RangeStore.open(tmp_path / "ref", clock=lambda: ticks[0])
    new = RangeStore.open(tmp_path / "new", clock=lambda: ticks[0])
    rng = random.Random(11)

    def run(store: RangeStore, reference: bool, fn: Callable) -> Any:
        if reference:
            monkeypatch.setattr(range_store, "check_batch_shape", ref_check_batch_shape)
            monkeypatch.setattr(range_store, "prepare_batch", ref_prepare_batch)
            monkeypatch.setattr(range_store, "prepare_op", ref_prepare_op)
        else:
            monkeypatch.undo()
        try:
            return "ok", fn(store)
        except TableError as e:
            return "error", e.error_code, e.message, e.index
        except Exception as e:  # noqa: BLE001  (e.g. the TypeError of an unhashable RowKey, as before)
            return "exception", type(e).__name__, str(e)

    try:
        for case in range(400):
            pk = f"pk{case % 7}"
            if rng.random() < 0.4:
                ops = sdk_batch(pk, rng.choice([1, 10, 100]))
                for op in rng.sample(ops, min(len(ops), rng.choice([0, 0, 1, 3]))):
                    defect(rng, op, [], pk)
            else:
                ops, _ = make_batch(rng, case)
            single = rng.random() < 0.2 and isinstance(ops, list) and ops and isinstance(ops[0], dict)
            rid = f"{'w' if single else 'b'}{rng.randrange(300)}"  # some ids repeat: replays
            if single:
                a = run(ref, True, lambda s, o=ops[0], r=rid: s.write_wire(o, request_id=r))
                b = run(new, False, lambda s, o=ops[0], r=rid: s.write_wire(o, request_id=r))
            else:
                a = run(ref, True, lambda s, o=ops, r=rid: s.batch_wire(o, request_id=r))
                b = run(new, False, lambda s, o=ops, r=rid: s.batch_wire(o, request_id=r))
            assert a == b, (case, ops)
            ticks[0] += rng.choice([0, 1, 10**7])
        monkeypatch.undo()
        assert list(ref._db.items()) == list(new._db.items())
    finally:
        ref.close()
        new.close()
