"""Batches for the fast-vs-plain tests of the partition server (``test_ps_fast_vs_plain.py``,
``test_ps_batch_shape.py``): the product's plain evaluation as a ``prepare`` function, random batches
(mostly of one schema, with random defects) and the rows already stored, an SDK-shaped batch, and
``outcome``, which runs a batch through a ``prepare`` and records what it decided, wrote and answered.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import msgpack

from partition_server.store import range_ops
from rangetable import protocol
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
from rangetable.errors import TableError
from rangetable.keys import encode_key
from tests import oracles

_pack = protocol.pack


def plain_batch(get: Callable, ops: list[dict], ts: int, wb: Any, wire_: bool = True, probe: Any = None) -> tuple:
    """The product's plain evaluation, reading row by row (no multi-get, no probe), answers packed
    from the decoded entities."""
    keys, values, written = range_ops.evaluate_batch(get, ops, ts, wb)
    return ([oracles.wire_answer(k, v) for k, v in zip(keys, values, strict=True)] if wire_ else []), written


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
    """A random valid value of EDM type ``code``, edge values often."""
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
    """A random malformed typed pair (or not a pair at all) near ``[code, v]``."""
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
    """Valid typed props with the names and types of ``schema`` (indexes into NAMES/CODES)."""
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
