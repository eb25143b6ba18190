"""Evaluation of entity operations against a range's current state (pure apart from reads).

:func:`prepare_op` validates one op dict and checks it against the stored entity (existence and
If-Match, per Azure's rules), returning the bytes to write; :func:`check_batch_shape` enforces the
entity-group-transaction rules that do not need the data. The range store applies the results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import rocksdict

from partition_server.wire import NIL, entity, key_prefix
from rangetable import protocol
from rangetable.edm import etag_from_ticks, ticks_from_etag
from rangetable.entity import validate_entity
from rangetable.errors import TableError
from rangetable.keys import encode_key

MAX_BATCH_OPS = 100
MAX_BATCH_BYTES = 4 << 20

_packb = protocol.pack
_unpackb = msgpack.unpackb
_NO_READ = "insert_or_replace"  # the one kind that does not read the current entity


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
    get: Callable[[bytes], bytes | None], op: dict, ts: int
) -> tuple[bytes, bytes | None, dict | None]:
    """Evaluate one op against the current state (read through ``get``).

    Returns (key, new value ``msgpack([ts, props])`` or None to delete, the props written or None)
    or raises TableError.
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
        validate_entity(pk, rk, props)
        return encode_key(pk, rk), _packb([ts, props]), props
    if kind == "insert":
        props = op.get("props")
        if props is None:
            props = {}
        validate_entity(pk, rk, props)
        key = encode_key(pk, rk)
        if get(key) is not None:
            raise TableError("EntityAlreadyExists")
        return key, _packb([ts, props]), props
    if kind == "delete":
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
    return key, _packb([ts, props]), props


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
        if rk in seen:
            raise TableError(
                "InvalidDuplicateRow",
                f"A command with RowKey '{rk}' is already present in the batch. "
                "An operation can only be present once in a batch request.",
                index=i,
            )
        try:
            seen.add(rk)
        except TypeError:
            raise TableError("InvalidInput", "The RowKey must be a string.", index=i) from None


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


def prepare_batch(
    get: Callable, ops: list[dict], ts: int, wb: rocksdict.WriteBatch, wire: bool = True
) -> tuple[list[bytes], list[dict | None]]:
    """Evaluate an entity group transaction (shape already checked) into ``wb``.

    ``get`` reads one key or, given a list, several. Returns each op's result packed in wire form
    (``[pk, rk, ts, props]`` or nil; none without ``wire``) and the props it wrote (None for a
    delete). A failure raises TableError with ``index`` set to the failing op (except
    RequestBodyTooLarge, which concerns the whole request).
    """
    read = _prefetch(get, ops)
    put = wb.put
    items: list[bytes] = []
    written: list[dict | None] = []
    size = 0
    prefix = b""
    plen = 0
    for i, op in enumerate(ops):
        try:
            key, value, props = prepare_op(read, op, ts)
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
