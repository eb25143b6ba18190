"""Entity operations evaluated against a range's current state: the plain, readable write path.

One op goes through three steps, each once:

1. :func:`read_op` takes its fields (``op``, ``pk``, ``rk``, ``props``) and refuses an unknown kind;
2. :func:`prepare_op` validates keys and props (``validate_entity``), then the If-Match
   (:func:`condition`) and the extension fields (expectation, condition on column values, counters:
   :func:`rangetable.write_conditions.read_guard`);
3. :func:`evaluate` reads the stored entity, checks the extension's expectation and condition, and
   decides (:func:`decide`), per Azure's rules (existence, ETag, merge), what to write: the key and the
   props (None to delete) with the counters added, stored as ``msgpack([ts, props])``.

:func:`evaluate_batch` runs an entity group transaction op by op after :func:`check_batch_shape`
(the rules that do not need the data). :func:`partition_server.store.fast_path.prepare_batch` computes the
same, faster, for the usual batch; ``tests/unit/test_ps_fast_vs_plain.py`` compares the two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgpack
import rocksdict

from rangetable import protocol, write_conditions
from rangetable.edm import etag_matches, is_weak_etag
from rangetable.entity import validate_entity
from rangetable.errors import TableError
from rangetable.keys import encode_key
from rangetable.write_conditions import Guard, read_guard

MAX_BATCH_OPS = 100
MAX_BATCH_BYTES = 4 << 20
NO_READ = "insert_or_replace"  # the one kind that does not read the current entity
UPSERTS = frozenset(("insert_or_merge", "insert_or_replace"))
KIND_NAMES = ("insert", "insert_or_replace", "insert_or_merge", "replace", "merge", "delete")
KINDS = frozenset(KIND_NAMES)
CONDITIONAL = ("replace", "merge", "delete")  # the kinds that take an If-Match


Op = tuple[str, str, str, dict]  # an op's kind, keys and the props it writes ({} for a delete)


def at_index(e: TableError, i: int) -> TableError:
    """``e`` naming the batch op ``i`` it concerns (unless it names one already)."""
    return e if e.index is not None else TableError(e.error_code, e.message, index=i)


def check_if_match(if_match: Any) -> str | None:
    """The ETag to compare, or None for an unconditional ("*" or absent) write. Any weak ETag is
    compared (one this store never issued matches no entity: 412); a strong or bare one is 400."""
    if if_match is None or if_match == "*":
        return None
    if type(if_match) is not str or not is_weak_etag(if_match):
        raise TableError("InvalidInput", f"The etag value {if_match!r} is not valid.")
    return if_match


def read_op(op: Mapping[str, Any]) -> Op:
    """The fields of op dict ``{"op", "pk", "rk", "props", "if_match"}``; InvalidInput when one of the
    first three is missing or the kind is unknown."""
    try:
        kind = op["op"]
        pk = op["pk"]
        rk = op["rk"]
    except (KeyError, TypeError):
        raise TableError("InvalidInput", "An operation needs 'op', 'pk' and 'rk'.") from None
    if kind not in KIND_NAMES:  # a tuple: an unhashable kind is unknown too, not a TypeError
        raise TableError("InvalidInput", f"Unknown operation {kind!r}.")
    props = op.get("props") if kind != "delete" else None
    return kind, pk, rk, {} if props is None else props


def condition(op: Mapping[str, Any], kind: str) -> str | None:
    """The ETag an op of ``kind`` is conditional on (None: unconditional); only replace, merge and
    delete take one."""
    return check_if_match(op.get("if_match")) if kind in CONDITIONAL else None


def evaluate(read: Callable[[bytes], bytes | None], op: Op, etag: str | None,
             guard: Guard | None = None) -> tuple[bytes, dict | None]:
    """Decide a validated op (see :func:`read_op`), conditional on ``etag`` and ``guard`` (its
    expectation, condition and counters: :mod:`rangetable.write_conditions`), against the stored
    entity (read through ``read``).

    Returns (key, the props to write, or None to delete); the caller stores them as
    ``msgpack([ts, props])`` (:func:`pack_value`). Raises ConditionCheckFailed (checked first), then
    EntityAlreadyExists, ResourceNotFound, UpdateConditionNotSatisfied, CounterOverflow, or a
    validation error of the props a merge or the counters produce.
    """
    kind, pk, rk, props = op
    key = encode_key(pk, rk)
    if guard is None:
        if kind == NO_READ:
            return key, props
        cur = read(key)
        return key, decide(kind, pk, rk, props, None if cur is None else msgpack.unpackb(cur), etag)
    cur = read(key)
    stored = None if cur is None else msgpack.unpackb(cur)
    write_conditions.check(guard, pk, rk, stored)
    written = decide(kind, pk, rk, props, stored, etag)
    if guard.counters and written is not None:  # a merge leaves the counters' stored values (no name is in both)
        written = {**written, **write_conditions.add_counters(guard.counters, {} if stored is None else stored[1])}
        validate_entity(pk, rk, written)
    return key, written


def decide(kind: str, pk: str, rk: str, props: dict, stored: list | None, etag: str | None) -> dict | None:
    """The props an op of ``kind`` writes (None: delete) given the decoded stored value ``[ts, props]``
    (None: no row), per Azure's rules (existence, ETag, merge)."""
    if kind == NO_READ:
        return props
    if kind == "insert":
        if stored is not None:
            raise TableError("EntityAlreadyExists")
        return props
    if stored is None:
        if kind != "insert_or_merge":
            raise TableError("ResourceNotFound")
        return props
    cts, cprops = stored
    if etag is not None and not etag_matches(etag, cts):
        raise TableError("UpdateConditionNotSatisfied")
    if kind == "delete":
        return None
    if kind != "replace" and cprops:
        covered = cprops.keys() <= props.keys()
        cprops.update(props)
        props = cprops
        if not covered:  # stored properties remain beside the new ones: the union must fit Azure's limits
            validate_entity(pk, rk, props)
    return props


def prepare_op(read: Callable[[bytes], bytes | None], op: Mapping[str, Any]) -> tuple[bytes, dict | None]:
    """Validate one op dict (the entity, its If-Match, its extension fields) and evaluate it (see
    :func:`evaluate`)."""
    kind, pk, rk, props = valid = read_op(op)
    validate_entity(pk, rk, props)
    return evaluate(read, valid, condition(op, kind), read_guard(op, kind, props))


def pack_value(ts: int, props: dict) -> bytes:
    """A stored value: ``msgpack([ts, props])``."""
    return protocol.pack([ts, props])


def check_batch_size(size: int) -> None:
    """RequestBodyTooLarge once a batch's keys and values pass 4 MiB."""
    if size > MAX_BATCH_BYTES:
        raise TableError("RequestBodyTooLarge", "The batch request exceeds 4 MiB.")


def check_batch_shape(ops: Sequence[Mapping[str, Any]]) -> None:
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


def evaluate_batch(read: Callable[[bytes], bytes | None], ops: Sequence[Mapping[str, Any]], ts: int,
                   wb: rocksdict.WriteBatch, pack: Callable[[int, dict], bytes] = pack_value,
                   prepare: Callable[[Callable[[bytes], bytes | None], Mapping[str, Any]],
                                     tuple[bytes, dict | None]] = prepare_op,
                   ) -> tuple[list[bytes], list[bytes | None], list[dict | None]]:
    """Evaluate an entity group transaction (shape already checked) into ``wb``, op by op, reading
    the current rows through ``read``, deciding each op with ``prepare`` (:func:`prepare_op`; the fast
    path passes one that skips validating entities it has shown valid) and packing stored values
    with ``pack``.

    Returns each op's key, stored value (None for a delete) and props written (None for a delete);
    ``fast_path.answer`` of a key and value is the op's answer. A failure raises TableError with
    ``index`` set to the failing op (except RequestBodyTooLarge, which concerns the whole request).
    """
    keys: list[bytes] = []
    values: list[bytes | None] = []
    written: list[dict | None] = []
    size = 0
    for i, op in enumerate(ops):
        try:
            key, props = prepare(read, op)
        except TableError as e:
            raise at_index(e, i) from None
        if props is None:
            value = None
            wb.delete(key)
            size += len(key)
        else:
            value = pack(ts, props)
            wb.put(key, value)
            size += len(key) + len(value)
        check_batch_size(size)
        keys.append(key)
        values.append(value)
        written.append(props)
    return keys, values, written
