"""Evaluation of entity operations against a range's current state (pure apart from reads).

:func:`prepare_op` validates one op dict and checks it against the stored entity (existence and
If-Match, per Azure's rules), returning the bytes to write; :func:`check_batch_shape` enforces the
entity-group-transaction rules that do not need the data. The range store applies the results.

:func:`prepare_batch` is the hot path of an entity group transaction. The usual batch (one schema:
the same names, codes and value types in every op) is validated as a whole with a few C-level
passes per property instead of pair by pair, and a batch of upserts is then packed and written at
C level too. Whatever those passes cannot vouch for falls back to :func:`prepare_op` per op, so
answers, bytes and errors are always those of the op-by-op evaluation
(``tests/unit/test_ps_batch_speed.py`` compares the two).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any

import msgpack
import rocksdict

from partition_server.wire import NIL, entities, entity, key_prefix
from rangetable import protocol
from rangetable.edm import etag_from_ticks, ticks_from_etag
from rangetable.entity import batch_valid, validate_entity
from rangetable.errors import TableError
from rangetable.keys import encode_key

MAX_BATCH_OPS = 100
MAX_BATCH_BYTES = 4 << 20

_packb = protocol.pack
# Same bytes as protocol.pack for exact built-in types, which it checks first and so more cheaply
# (no isinstance tests); anything else (a tuple, a subclass) raises TypeError: then protocol.pack.
_pack_exact = msgpack.Packer(use_bin_type=True, strict_types=True).pack
_unpackb = msgpack.unpackb
_NO_READ = "insert_or_replace"  # the one kind that does not read the current entity
_PROBE_SKIP = 256  # deleted (or overwritten) versions span_may_hold skips before giving up

_get_op = itemgetter("op")
_get_pk = itemgetter("pk")
_get_rk = itemgetter("rk")
_second = itemgetter(1)
_unpack_raw = partial(msgpack.unpackb, use_list=False, raw=True)  # names stay bytes: cheap to decode
_UPSERTS = frozenset(("insert_or_merge", "insert_or_replace"))
_KINDS = frozenset(("insert", "insert_or_replace", "insert_or_merge", "replace", "merge", "delete"))


def pack_value(ts: int, props: dict) -> bytes:
    """A stored value, ``msgpack([ts, props])``: the bytes :func:`rangetable.protocol.pack` gives."""
    try:
        return _pack_exact([ts, props])
    except TypeError:
        return _packb([ts, props])


def check_if_match(if_match: Any) -> str | None:
    """The ETag to compare, or None for an unconditional ("*" or absent) write."""
    if if_match is None or if_match == "*":
        return None
    if type(if_match) is not str:
        raise TableError("InvalidInput", f"The etag value {if_match!r} is not valid.")
    try:
        ticks_from_etag(if_match)
    except ValueError:
        raise TableError("InvalidInput", f"The etag value {if_match!r} is not valid.") from None
    return if_match


def prepare_op(
    get: Callable[[bytes], bytes | None], op: dict, ts: int, checked: bool = False
) -> tuple[bytes, bytes | None, dict | None]:
    """Evaluate one op against the current state (read through ``get``).

    Returns (key, new value ``msgpack([ts, props])`` or None to delete, the props written or None)
    or raises TableError. ``checked``: the op's keys and props are known to pass ``validate_entity``
    (see :func:`_plan`), so only what a merge adds is validated.
    """
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
        if not checked:
            validate_entity(pk, rk, props)
        return encode_key(pk, rk), pack_value(ts, props), props
    if kind == "insert":
        props = op.get("props")
        if props is None:
            props = {}
        if not checked:
            validate_entity(pk, rk, props)
        key = encode_key(pk, rk)
        if get(key) is not None:
            raise TableError("EntityAlreadyExists")
        return key, pack_value(ts, props), props
    if kind == "delete":
        if not checked:
            validate_entity(pk, rk, {})
        etag = check_if_match(op.get("if_match"))
        key = encode_key(pk, rk)
        cur = get(key)
        if cur is None:
            raise TableError("ResourceNotFound")
        if etag is not None and etag != etag_from_ticks(_unpackb(cur)[0]):
            raise TableError("UpdateConditionNotSatisfied")
        return key, None, None
    if kind not in ("replace", "merge", "insert_or_merge"):
        raise TableError("InvalidInput", f"Unknown operation {kind!r}.")
    props = op.get("props")
    if props is None:
        props = {}
    if not checked:
        validate_entity(pk, rk, props)
    key = encode_key(pk, rk)
    etag = None
    if kind == "insert_or_merge":
        cur = get(key)
    else:
        etag = check_if_match(op.get("if_match"))
        cur = get(key)
        if cur is None:
            raise TableError("ResourceNotFound")
    if cur is not None:
        cts, cprops = _unpackb(cur)
        if etag is not None and etag != etag_from_ticks(cts):
            raise TableError("UpdateConditionNotSatisfied")
        if kind != "replace" and cprops:
            covered = cprops.keys() <= props.keys()
            cprops.update(props)
            props = cprops
            if not covered:  # else the merged props are the very pairs just validated (reordered)
                validate_entity(pk, rk, props)
    return key, pack_value(ts, props), props


def check_batch_shape(ops: list[dict]) -> None:
    """Count, single partition and unique rows; raises TableError naming the offending op."""
    if not isinstance(ops, list):
        raise TableError("InvalidInput", "A batch is a list of operations.")
    if len(ops) > MAX_BATCH_OPS:
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
        try:
            duplicate = rk in seen
            seen.add(rk)
        except TypeError:  # not hashable, so not a string
            raise TableError("InvalidInput", "The RowKey must be a string.", index=i) from None
        if duplicate:
            raise TableError(
                "InvalidDuplicateRow",
                f"A command with RowKey '{rk}' is already present in the batch. "
                "An operation can only be present once in a batch request.",
                index=i,
            )


def span_may_hold(db: rocksdict.Rdict, lo: bytes, hi: bytes) -> bool:
    """False only when no key lies in ``[lo, hi)`` of ``db`` (one seek: cheaper than reading the rows of
    a batch into a new partition). Many uncompacted deletes there count as keys: the seek gives up."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(hi)  # never set_iterate_lower_bound: it sets the upper bound
    ro.set_max_skippable_internal_keys(_PROBE_SKIP)
    it = db.iter(ro)  # dropped on return, so that close() can release the LOCK
    try:
        it.seek(lo)
        if it.valid():
            return True
        it.status()  # raises after too many deletes (or an I/O error): then the rows are read
        return False
    except Exception:
        return True


def _prefetch(get: Callable, ops: list[dict]) -> Callable[[bytes], bytes | None]:
    """A reader of the current values of every row the ops address, fetched with one multi-get.

    The rows of a batch are distinct and nothing is written before the commit, so each op sees
    exactly what a get of its own would. Falls back to ``get`` when a key cannot be encoded (the op
    fails validation before it reads) or no op reads.
    """
    try:
        keys = [encode_key(op["pk"], op["rk"]) for op in ops if op.get("op") != _NO_READ]
    except (AttributeError, KeyError, TypeError, UnicodeError):
        return get
    if not keys:
        return get
    return dict(zip(keys, get(keys), strict=True)).get


def _plan(ops: list[dict]) -> tuple[list, list[str], list[str], list[dict | None]] | None:
    """(kinds, pks, rks, props) of a batch of known kinds in which every op passes
    ``validate_entity``, shown with a few C-level passes over the whole batch; None when that
    cannot be shown (then each op is validated on its own, which finds the error and its op)."""
    try:
        if set(map(type, ops)) != {dict}:
            return None
        kinds = list(map(_get_op, ops))
        if not _KINDS.issuperset(kinds):
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


def _upsert_all(keys: list[bytes], rkbs: list[bytes], curs: list[bytes | None], props: list[dict],
                names: tuple[bytes, ...] | None, ts: int, wb: rocksdict.WriteBatch,
                prefix: bytes | None) -> tuple[list[bytes], list[dict | None]] | None:
    """The op loop of :func:`prepare_batch` at C level for valid insert_or_merge / insert_or_replace
    ops, when each writes its own props: no row exists, or its stored props have just the names
    ``names`` in that order (merging gives the new props, in their order). Else None, having
    written nothing. ``prefix`` is the wire prefix, or None for no wire answers."""
    present = list(filter(None, curs))  # an insert_or_replace reads nothing: None
    if present and list(map(tuple, map(_second, map(_unpack_raw, present)))).count(names) != len(present):
        return None
    try:
        values = list(map(_pack_exact, map(list, zip(repeat(ts), props))))
    except TypeError:  # see pack_value
        values = list(map(_packb, zip(repeat(ts), props)))  # a tuple packs as a list does
    if sum(map(len, keys)) + sum(map(len, values)) > MAX_BATCH_BYTES:
        return None  # the op loop finds which op's error comes first
    deque(map(wb.put, keys, values), maxlen=0)
    return ([] if prefix is None else entities(prefix, rkbs, values)), props


def prepare_batch(
    get: Callable, ops: list[dict], ts: int, wb: rocksdict.WriteBatch, wire: bool = True,
    probe: Callable[[bytes, bytes], bool] | None = None,
) -> tuple[list[bytes], list[dict | None]]:
    """Evaluate an entity group transaction (shape already checked) into ``wb``.

    ``get`` reads one key or, given a list, several; ``probe(lo, hi)``, if given, is False only when
    no key lies in ``[lo, hi)``, so that a batch into an empty partition need not read its rows one
    by one. Returns each op's result packed in wire form
    (``[pk, rk, ts, props]`` or nil; none without ``wire``) and the props it wrote (None for a
    delete). A failure raises TableError with ``index`` set to the failing op (except
    RequestBodyTooLarge, which concerns the whole request).

    Outcome, bytes and errors are those of :func:`prepare_op` applied op by op; when the whole
    batch is shown valid up front (:func:`_plan`, the usual case) the ops skip their own validation,
    and a batch of upserts that each write their own props skips the op loop (:func:`_upsert_all`).
    """
    plan = _plan(ops)
    if plan is None:
        return _prepare_each(_prefetch(get, ops), ops, ts, wb, wire)
    kinds, pks, rks, props = plan
    pkb = pks[0].encode()
    rkbs = list(map(str.encode, rks))
    lo = pkb + b"\x00"
    keys = list(map(lo.__add__, rkbs))
    if probe is not None and not probe(lo, pkb + b"\x01"):  # the partition's span: see keys.py
        curs = [None] * len(keys)
    elif _NO_READ not in kinds:
        curs = get(keys)
    else:  # read only the rows of the ops that look at them, as _prefetch does
        want = [k for k, kind in zip(keys, kinds, strict=True) if kind != _NO_READ]
        found = dict(zip(want, get(want), strict=True)) if want else {}
        curs = list(map(found.get, keys))
    if _UPSERTS.issuperset(kinds):
        first = next((p for p in props if p), None)
        names = tuple(n.encode() for n in first) if first else None
        done = _upsert_all(keys, rkbs, curs, props, names, ts, wb, key_prefix(pkb) if wire else None)
        if done is not None:
            return done
    return _prepare_each(dict(zip(keys, curs, strict=True)).get, ops, ts, wb, wire, checked=True)


def _prepare_each(
    read: Callable[[bytes], bytes | None], ops: list[dict], ts: int, wb: rocksdict.WriteBatch, wire: bool,
    checked: bool = False,
) -> tuple[list[bytes], list[dict | None]]:
    """:func:`prepare_batch` op by op, each through :func:`prepare_op` (any batch), reading the
    current rows through ``read``."""
    put = wb.put
    items: list[bytes] = []
    written: list[dict | None] = []
    size = 0
    prefix = b""
    plen = 0
    for i, op in enumerate(ops):
        try:
            key, value, props = prepare_op(read, op, ts, checked)
        except TableError as e:
            if e.index is None:
                raise TableError(e.error_code, e.message, index=i) from None
            raise
        if value is None:
            wb.delete(key)
            size += len(key)
            if wire:
                items.append(NIL)
        else:
            put(key, value)
            size += len(key) + len(value)
            if wire:
                if not prefix:  # every op has the same PartitionKey: splice its header once
                    pkb = key[: key.index(b"\x00")]
                    prefix, plen = key_prefix(pkb), len(pkb) + 1
                items.append(entity(prefix, key[plen:], value))
        if size > MAX_BATCH_BYTES:
            raise TableError("RequestBodyTooLarge", "The batch request exceeds 4 MiB.")
        written.append(props)
    return items, written
