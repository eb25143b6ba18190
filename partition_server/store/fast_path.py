"""THE FAST PATH of the partition server: every speed trick of its request path, in one place.

Everything here computes exactly what a plain version beside it computes, only with fewer Python
steps; the plain versions are the readable definitions:

* **spliced replies** — an entity is stored as ``msgpack([ts, props])`` and travels as
  ``msgpack([pk, rk, ts, props])``, so its wire form is a hand-written array header, the two keys as
  msgpack strings, then the stored value without its own header: no decode, no re-encode. Plain
  version: ``protocol.pack(entity_to_wire(entity))`` (``wire_answer`` in ``tests/oracles.py``).
  Speeds up point reads, scan pages and write answers: one entity's answer costs 0.2 µs of CPU
  spliced, 2.7 µs decoded and packed.
* **whole-batch validation and C-level upserts** — the usual entity group transaction (one schema:
  the same names, codes and value types in every op) is validated column by column with a few
  C-level passes, and a batch of upserts is packed and written at C level. Plain version: each op
  validated and evaluated on its own (:func:`partition_server.store.range_ops.evaluate_batch`), to which
  whatever these passes cannot vouch for falls back. A batch of 100 upserts of ~400-byte entities
  costs ~200 µs of CPU here, ~600 µs on the plain path (``rangetable bench store``: EGT of 100).
* **method aliases** bound once at import (an attribute lookup less per call in the server's loop).

``tests/unit/test_ps_fast_vs_plain.py`` runs both versions on the same Hypothesis-generated inputs
and requires the same answers, bytes, stored data and errors.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from itertools import repeat, zip_longest
from operator import getitem, itemgetter
from typing import Any, TypeGuard

import msgpack
import rocksdict
from zmq.backend import Socket as _RawSocket

from partition_server.store import range_ops
from partition_server.store.tee import put_all
from rangetable import protocol, write_conditions
from rangetable.edm import (
    BINARY,
    BOOLEAN,
    DATETIME,
    DOUBLE,
    GUID,
    INT32,
    INT32_MAX,
    INT32_MIN,
    INT64,
    INT64_MAX,
    INT64_MIN,
    MAX_DATETIME_TICKS,
    MIN_DATETIME_TICKS,
    STRING,
)
from rangetable.entity import (
    BAD_KEY_CHARS,
    KEY_CHARS_ALWAYS_SHORT,
    MAX_BINARY_BYTES,
    MAX_ENTITY_SIZE,
    MAX_STRING_CHARS,
    SURROGATE,
    validate_props,
)
from rangetable.errors import TableError
from rangetable.keys import encode_key
from rangetable.protocol import Packed
from rangetable.write_conditions import read_guard

# --- aliases bound once ------------------------------------------------------------------------

set_socket_option = _RawSocket.set  # the Cython method, given a plain int option (see rangetable/protocol.py)
unpackb = msgpack.unpackb
# Same bytes as protocol.pack for exact built-in types, which it checks first and so more cheaply
# (no isinstance tests); anything else (a tuple, a subclass) raises TypeError: then protocol.pack.
_pack_exact = msgpack.Packer(use_bin_type=True, strict_types=True).pack
_unpack_raw = partial(msgpack.unpackb, use_list=False, raw=True)  # names stay bytes: cheap to decode
_get_op = itemgetter("op")
_get_pk = itemgetter("pk")
_get_rk = itemgetter("rk")
_first = itemgetter(0)
_second = itemgetter(1)
_join = b"".join
_REST = slice(1, None)

# --- hand-written msgpack ----------------------------------------------------------------------

STORED_HEADER = 0x92  # msgpack fixarray of 2: the first byte of every stored value [ts, props]
ENTITY_HEADER = b"\x94"  # msgpack fixarray of 4: the wire entity [pk, rk, ts, props]
NIL = b"\xc0"  # msgpack nil: a delete's answer
_PAGE_HEAD = b"\x82\xa8entities"  # msgpack fixmap of 2, then fixstr "entities" (the array follows)
_PAGE_NEXT = b"\xa4next"  # msgpack fixstr "next" (the continuation key or nil follows)
_PAGE_HEAD_FEED = b"\x83\xa8entities"  # the same with a third key, "feed"
_PAGE_FEED = b"\xa4feed"  # msgpack fixstr "feed" (a packed ChangesAnswer follows)
_RECORD_HEAD = b"\x93"  # msgpack fixarray of 3: a request record [ts, kind, result]
# msgpack str headers by UTF-8 length: fixstr (0xa0 | n) below 32 bytes, str8 (0xd9, n) up to 255
_STR_HEADERS = [bytes([0xA0 | n]) for n in range(32)] + [b"\xd9" + bytes([n]) for n in range(32, 256)]
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_UINT64 = 0xCF  # msgpack uint64 marker: how a stored Timestamp (ticks) is encoded


def str_header(n: int) -> bytes:
    """The msgpack header of a str of ``n`` UTF-8 bytes (str16 0xda / str32 0xdb beyond 255)."""
    if n < 256:
        return _STR_HEADERS[n]
    if n < 65536:
        return b"\xda" + _U16.pack(n)
    return b"\xdb" + _U32.pack(n)


def array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items (fixarray 0x90 | n, array16 0xdc, array32 0xdd)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 65536:
        return b"\xdc" + _U16.pack(n)
    return b"\xdd" + _U32.pack(n)


def key_prefix(pkb: bytes) -> bytes:
    """The start of an entity's wire form up to and including its PartitionKey (UTF-8 ``pkb``)."""
    return ENTITY_HEADER + str_header(len(pkb)) + pkb


def entity(prefix: bytes, rkb: bytes, value: bytes) -> bytes:
    """``msgpack([pk, rk, ts, props])`` from :func:`key_prefix`, the UTF-8 RowKey and the stored value."""
    n = len(rkb)
    if value[0] == STORED_HEADER:
        return prefix + (_STR_HEADERS[n] if n < 256 else str_header(n)) + rkb + value[1:]
    # Not the layout this module knows (never written today): decode and pack instead of splicing.
    pk = unpackb(prefix[1:])
    return protocol.pack([pk, rkb.decode(), *unpackb(value)])


def entities(prefix: bytes, rkbs: list[bytes], values: list[bytes]) -> list[bytes]:
    """:func:`entity` of each UTF-8 RowKey in ``rkbs`` and stored value in ``values`` (one partition),
    spliced at C level in the usual case."""
    if values and max(map(len, rkbs)) < 256 and bytes(map(_first, values)).count(STORED_HEADER) == len(values):
        hdrs = map(_STR_HEADERS.__getitem__, map(len, rkbs))
        rests = map(getitem, values, repeat(_REST))  # bytes, where typeshed's getitem says Sequence[int]
        return list(map(_join, zip(repeat(prefix), hdrs, rkbs, rests)))  # type: ignore[arg-type]  # see rests
    return list(map(entity, repeat(prefix), rkbs, values))


def answer(key: bytes, value: bytes | None) -> bytes:
    """An op's answer in wire form: the entity at ``key`` spliced from its stored ``value``, or nil
    for a delete (``wire_answer`` in ``tests/oracles.py`` packs the same bytes)."""
    return NIL if value is None else entity_bytes(key, value)


def entity_bytes(key: bytes, value: bytes) -> bytes:
    """``msgpack([pk, rk, ts, props])`` from the encoded entity key and the stored value."""
    pkb, _, rkb = key.partition(b"\x00")
    p, r = len(pkb), len(rkb)
    if p < 256 and r < 256 and value[0] == STORED_HEADER:  # the usual case, spliced in one go
        return b"".join((ENTITY_HEADER, _STR_HEADERS[p], pkb, _STR_HEADERS[r], rkb, value[1:]))
    return entity(key_prefix(pkb), rkb, value)


def array(items: list[bytes]) -> Packed:
    """The result ``[item, …]`` from items already packed (a batch's entities in wire form or nil)."""
    return Packed(array_header(len(items)), *items)


def entity_pk(item: bytes) -> str:
    """The PartitionKey of an entity in wire form."""
    return unpackb(item)[0]


def stored_ts(value: bytes) -> int:
    """The Timestamp of a stored value, decoding only that field when it is a uint64 (the usual case)."""
    if value[0] == STORED_HEADER and value[1] == _UINT64:
        return int.from_bytes(value[2:10], "big")
    return unpackb(value)[0]


def page(items: list[bytes], next_key: bytes | None, feed: Packed | None = None) -> Packed:
    """The scan result ``{"entities": [...], "next": next_key}`` from entities in wire form; with ``feed`` (a
    packed :class:`rangetable.messages.ChangesAnswer`) also ``"feed": feed``."""
    if feed is None:
        return Packed(_PAGE_HEAD, array_header(len(items)), *items, _PAGE_NEXT, protocol.pack(next_key))
    return Packed(_PAGE_HEAD_FEED, array_header(len(items)), *items, _PAGE_NEXT, protocol.pack(next_key),
                  _PAGE_FEED, *feed.parts)


def request_record(ts: int, kind: bytes, answer: bytes) -> bytes:
    """A request record ``msgpack([ts, kind, result])`` from the packed ``kind`` and ``answer``."""
    return _RECORD_HEAD + protocol.pack(ts) + kind + answer


def pack_value(ts: int, props: dict) -> bytes:
    """A stored value, ``msgpack([ts, props])``: the bytes :func:`rangetable.protocol.pack` gives."""
    try:
        return _pack_exact([ts, props])
    except TypeError:
        return protocol.pack([ts, props])


# --- validation of a whole batch at once ----------------------------------------------------------------------------
#
# An entity group transaction usually holds one shape: the same property names in the same order, with
# the same type code and value type per name. Such a batch is validated column by column, at C level,
# instead of pair by pair; whatever cannot be shown valid that way is left to validate_entity, op by
# op, which alone decides the error. tests/unit/test_ps_fast_vs_plain.py compares both on generated batches.

_HEX_OR_DASH = b"-0123456789abcdef"  # a canonical GUID's characters (_GUID)
_GAP = object()  # a missing item of a pair
_INT_LIMITS = {INT32: (INT32_MIN, INT32_MAX, 4), INT64: (INT64_MIN, INT64_MAX, 8),
               DATETIME: (MIN_DATETIME_TICKS, MAX_DATETIME_TICKS, 8)}  # (lowest, highest, size)
_FIXED_SIZES = {DOUBLE: (float, 8), BOOLEAN: (bool, 1)}  # (value type, size)


def batch_valid(pks: list, rks: list, props: list) -> bool:
    """True when ``validate_entity(pk, rk, p)`` would pass for every PartitionKey in ``pks`` (all
    equal), RowKey in ``rks`` and props dict in ``props``, shown for the whole batch at once; False
    when that cannot be shown (not necessarily invalid: check each entity then)."""
    try:
        size = _keys_size(pks, rks)
        psize = _props_size(props) if props else 0
    except (TypeError, ValueError):  # e.g. a RowKey that is not a str, a pair that is not iterable
        return False
    return size is not None and psize is not None and size + psize <= MAX_ENTITY_SIZE


def _key_chars_ok(s: str) -> bool:
    """True when ``s`` has no character ``validate_key`` forbids (``BAD_KEY_CHARS``); in
    ASCII those are ``/ \\ # ?`` and the control characters, i.e. the ones not printable."""
    if s.isascii():
        return s.isprintable() and "/" not in s and "\\" not in s and "#" not in s and "?" not in s
    return BAD_KEY_CHARS.search(s) is None


def _keys_size(pks: list, rks: list) -> int | None:
    """Bound on the keys' share of any op's entity size when every (pk, rk) passes validation, else None.

    The PartitionKeys are one str (the shape check saw them equal); the RowKeys go through ``join``,
    which, like ``validate_key``, takes any str. A forbidden character is one character, so it
    shows in the join as well."""
    pk = pks[0]
    if type(pk) is not str or len(pk) > KEY_CHARS_ALWAYS_SHORT or pks.count(pk) != len(pks):
        return None
    joined = "".join(rks)
    longest = max(map(len, rks))
    if longest > KEY_CHARS_ALWAYS_SHORT or not _key_chars_ok(pk) or not _key_chars_ok(joined):
        return None
    n = len(pk) + longest
    return 4 + 2 * (n if pk.isascii() and joined.isascii() else 2 * n)  # ≤ 2 UTF-16 units a char


def _guids_ok(col: tuple[str, ...]) -> bool:
    """Every str in ``col`` is a canonical lower-case GUID (``_GUID``), checked on their join."""
    m = len(col)
    if set(map(len, col)) != {36}:
        return False
    joined = "".join(col)
    if not joined.isascii():
        return False
    b = joined.encode()
    dash = b"-" * m
    return (b.count(b"-") == 4 * m and b[8::36] == dash and b[13::36] == dash and b[18::36] == dash
            and b[23::36] == dash and not b.translate(None, _HEX_OR_DASH))


def _props_size(P: list) -> int | None:
    """Bound on the props' share of any entity size when every props dict in ``P`` passes
    ``validate_props``, else None. Only shows the usual case: the same names in the same order,
    with the same type code and value type per name.

    Pairs are read as ``validate_props`` reads them, ``code, v = pair``, i.e. by iterating them:
    ``zip_longest`` over a name's pairs gives exactly two rows (codes, values) when each pair
    yields two items, and a gap otherwise. A code need only equal (==) the first op's code of that
    name, since codes are only ever compared with ==. The first op itself goes through
    ``validate_props``, which also vouches for the names.
    """
    if set(map(type, P)) != {dict}:
        return None
    names = tuple(P[0])
    m = len(P)
    if list(map(tuple, P)).count(names) != m:
        return None
    if not names:
        return 0
    try:
        validate_props(P[0])
    except TableError:
        return None
    size = 0
    for name, col in zip(names, zip(*map(dict.values, P), strict=True), strict=True):
        codes, vals = zip_longest(*col, fillvalue=_GAP)  # ValueError unless at most 2 and some 2 long
        code, t = codes[0], type(vals[0])
        if codes.count(code) != m or set(map(type, vals)) != {t}:
            return None
        size += 8 + 2 * len(name)
        if code == STRING:
            if t is not str:
                return None
            joined = "".join(vals)
            ascii_ = joined.isascii()  # else at most 2 UTF-16 units a character
            u16 = max(map(len, vals)) * (1 if ascii_ else 2)
            if u16 > MAX_STRING_CHARS or (not ascii_ and SURROGATE.search(joined) is not None):
                return None
            size += 2 * u16 + 4
        elif code in _INT_LIMITS:
            lo, hi, nbytes = _INT_LIMITS[code]
            if t is not int or min(vals) < lo or max(vals) > hi:
                return None
            size += nbytes
        elif code in _FIXED_SIZES:
            vtype, nbytes = _FIXED_SIZES[code]
            if t is not vtype:
                return None
            size += nbytes
        elif code == GUID:
            if t is not str or not _guids_ok(vals):
                return None
            size += 16
        elif code == BINARY:
            longest = max(map(len, vals))
            if t is not bytes or longest > MAX_BINARY_BYTES:
                return None
            size += longest + 4
        else:
            return None
    return size


# --- entity group transactions -----------------------------------------------------------------


def prefetch(get: Callable, ops: Sequence[Mapping[str, Any]]) -> Callable[[bytes], bytes | None]:
    """A reader of the current values of every row the ops address, fetched with one multi-get.

    The rows of a batch are distinct and nothing is written before the commit, so each op sees
    exactly what a get of its own would. Falls back to ``get`` when a key cannot be encoded (the op
    fails validation before it reads) or no op reads.
    """
    try:
        keys = [encode_key(op["pk"], op["rk"]) for op in ops
                if op.get("op") != range_ops.NO_READ or not write_conditions.FIELDS.isdisjoint(op)]
    except (AttributeError, KeyError, TypeError, UnicodeError):
        return get
    if not keys:
        return get
    return dict(zip(keys, get(keys), strict=True)).get


def _plain_dicts(ops: Sequence[Mapping[str, Any]]) -> TypeGuard[Sequence[dict]]:
    """Whether every op is a plain dict (as msgpack decodes a map), which :func:`_plan`'s passes need."""
    return set(map(type, ops)) == {dict}


def _plan(ops: Sequence[Mapping[str, Any]]) -> tuple[list, list[str], list[str], list[dict | None]] | None:
    """(kinds, pks, rks, props) of a batch of known kinds in which every op passes
    ``validate_entity``, shown with a few C-level passes over the whole batch; None when that
    cannot be shown (then each op is validated on its own, which finds the error and its op)."""
    try:
        if not _plain_dicts(ops):
            return None
        kinds = list(map(_get_op, ops))
        if not range_ops.KINDS.issuperset(kinds):
            return None
        pks = list(map(_get_pk, ops))
        rks = list(map(_get_rk, ops))
    except (KeyError, TypeError):
        return None
    props = list(map(dict.get, ops, repeat("props")))
    P = [p for k, p in zip(kinds, props, strict=True) if k != "delete"] if "delete" in kinds else props
    if not batch_valid(pks, rks, P):
        return None
    return kinds, pks, rks, props


def _upsert_all(keys: list[bytes], rkbs: list[bytes], curs: list[bytes | None], props: list[dict | None],
                names: tuple[bytes, ...] | None, ts: int, wb: rocksdict.WriteBatch,
                prefix: bytes | None) -> tuple[list[bytes], list[dict | None]] | None:
    """The op loop of :func:`prepare_batch` at C level for valid insert_or_merge / insert_or_replace
    ops, when each writes its own props: no row exists, or its stored props have just the names
    ``names`` in that order (merging gives the new props, in their order). Else None, having
    written nothing. ``prefix`` is the wire prefix, or None for no wire answers."""
    present = list(filter(None, curs))  # an insert_or_replace reads nothing: None
    if present:
        stored: list[tuple[bytes, ...] | None] = list(map(tuple, map(_second, map(_unpack_raw, present))))
        if stored.count(names) != len(present):
            return None
    try:
        values = list(map(_pack_exact, map(list, zip(repeat(ts), props))))
    except TypeError:  # see pack_value
        values = list(map(protocol.pack, zip(repeat(ts), props)))  # a tuple packs as a list does
    if sum(map(len, keys)) + sum(map(len, values)) > range_ops.MAX_BATCH_BYTES:
        return None  # the op loop finds which op's error comes first
    put_all(wb, keys, values)
    return ([] if prefix is None else entities(prefix, rkbs, values)), props


def prepare_batch(
    get: Callable, ops: Sequence[Mapping[str, Any]], ts: int, wb: rocksdict.WriteBatch, wire: bool = True,
    probe: Callable[[bytes, bytes], bool] | None = None,
) -> tuple[list[bytes], list[dict | None]]:
    """:func:`partition_server.store.range_ops.evaluate_batch`, fast: same answers, writes and errors.

    ``get`` reads one key or, given a list, several; ``probe(lo, hi)``, if given, is False only when
    no key lies in ``[lo, hi)``, so that a batch into an empty partition need not read its rows one
    by one. When the whole batch is shown valid up front (:func:`_plan`, the usual case) the ops are
    evaluated without validating each again, and a batch of upserts that each write their own
    props, with no condition or counter, skips the op loop (:func:`_upsert_all`); otherwise the plain
    evaluation runs.
    """
    plan = _plan(ops)
    if plan is None:
        keys, values, written = range_ops.evaluate_batch(prefetch(get, ops), ops, ts, wb, pack_value)
        return (list(map(answer, keys, values)) if wire else []), written
    kinds, pks, rks, props = plan
    guarded = not all(map(write_conditions.FIELDS.isdisjoint, ops))  # conditions or counters: read every row
    pkb = pks[0].encode()
    rkbs = list(map(str.encode, rks))
    lo = pkb + b"\x00"
    keys = list(map(lo.__add__, rkbs))
    if probe is not None and not probe(lo, pkb + b"\x01"):  # the partition's span: see keys.py
        curs: list[bytes | None] = [None] * len(keys)
    elif guarded or range_ops.NO_READ not in kinds:
        curs = get(keys)
    else:  # read only the rows of the ops that look at them, as prefetch does
        want = [k for k, kind in zip(keys, kinds, strict=True) if kind != range_ops.NO_READ]
        found = dict(zip(want, get(want), strict=True)) if want else {}
        curs = list(map(found.get, keys))
    if not guarded and range_ops.UPSERTS.issuperset(kinds):
        first = next((p for p in props if p), None)
        names = tuple(n.encode() for n in first) if first else None
        done = _upsert_all(keys, rkbs, curs, props, names, ts, wb, key_prefix(pkb) if wire else None)
        if done is not None:
            return done
    keys, values, written = range_ops.evaluate_batch(dict(zip(keys, curs, strict=True)).get, ops, ts, wb, pack_value,
                                                     prepare=_prepare_valid)
    return (list(map(answer, keys, values)) if wire else []), written


def _prepare_valid(read: Callable[[bytes], bytes | None], op: Mapping[str, Any]) -> tuple[bytes, dict | None]:
    """:func:`partition_server.store.range_ops.prepare_op` for an op whose entity is known valid: its
    conditions checked and the op evaluated, the entity not validated again."""
    valid = range_ops.read_op(op)
    kind = valid[0]
    return range_ops.evaluate(read, valid, range_ops.condition(op, kind), read_guard(op, kind, valid[3]))
