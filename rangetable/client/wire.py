"""The native client's translations between the SDK's arguments and the wire messages.

:class:`rangetable.client.TableClient` takes what ``azure-data-tables`` takes (entity mappings,
transaction tuples, continuation tokens as dicts) and sends :mod:`rangetable.messages` shapes; the
functions here do the converting, both ways, and hold no connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rangetable.client.models import TransactionOperation, UpdateMode, if_match
from rangetable.edm import etag_from_ticks
from rangetable.values import TablesDatetime, entity_to_typed, to_typed

if TYPE_CHECKING:
    from rangetable.messages import WireEntity, WriteKind, WriteOp


def write_op(kind: WriteKind, entity: Mapping[str, Any], match: str | None = None, *,
             condition: str | None = None, expect: str | None = None,
             counters: Mapping[str, Any] | None = None) -> WriteOp:
    """An entity mapping as the wire write operation ``kind`` with the ETag condition ``match`` and
    rangetable's extension (:mod:`rangetable.write_conditions`): the row ``expect`` ation
    ("exists", "absent"), a ``condition`` on the current entity in the ``$filter`` language, and
    ``counters`` (property name → signed amount, typed like a property value: int → Int32 or Int64,
    float → Double, or ``EntityProperty(amount, EdmType.INT64)``)."""
    pk, rk, props = entity_to_typed(entity)
    op: WriteOp = {"op": kind, "pk": pk, "rk": rk, "props": props, "if_match": match}
    incr = None if counters is None else {
        name: pair for name, pair in ((n, to_typed(v)) for n, v in counters.items()) if pair}
    return with_extension(op, condition, expect, incr)


def with_extension(op: WriteOp, condition: str | None, expect: str | None,
                   incr: dict[str, list] | None) -> WriteOp:
    """``op`` with rangetable's extension fields set where given: ``cond``, ``expect`` and ``incr``
    (typed counters: name → [type, amount])."""
    if condition is not None:
        op["cond"] = condition
    if expect is not None:
        op["expect"] = expect
    if incr is not None:
        op["incr"] = incr
    return op


def write_metadata(wire: WireEntity | None, counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The SDK-style metadata dict of a write result (``None`` for a delete); with ``counters`` (the
    names the write counted) also ``"counters"``: each one's new value."""
    if wire is None:
        return {"etag": None, "timestamp": None, "date": None}
    ts = wire[2]
    when = TablesDatetime.from_ticks(ts)
    out = {"etag": etag_from_ticks(ts), "timestamp": when, "date": when}
    if counters:
        props = wire[3]
        out["counters"] = {name: props[name][1] for name in counters if name in props}
    return out


def entity_token(token: Any) -> list[str | None] | None:
    """A query continuation token (``{"PartitionKey", "RowKey"}`` or a pair) in wire form."""
    if not token:
        return None
    if isinstance(token, Mapping):
        return [token.get("PartitionKey"), token.get("RowKey")]
    if isinstance(token, list | tuple) and len(token) == 2:
        return [token[0], token[1]]
    raise ValueError("Invalid continuation token format.")


EXTENSION_KWARGS = ("condition", "expect", "counters")
"""The keyword arguments of rangetable's extension, on every write method and in transaction tuples."""


def batch_op(operation: Any) -> WriteOp:
    """One SDK-style transaction tuple as a wire write operation; its keyword dict may hold
    :data:`EXTENSION_KWARGS` beside the SDK's."""
    if isinstance(operation, str | bytes) or not isinstance(operation, tuple | list):
        raise TypeError(f"not an operation tuple: {operation!r}")
    if len(operation) == 3:
        kind, entity, kwargs = operation
        kwargs = dict(kwargs or {})
    elif len(operation) == 2:
        (kind, entity), kwargs = operation, {}
    else:
        raise TypeError(f"not an operation tuple: {operation!r}")
    try:
        kind = TransactionOperation(kind.lower() if isinstance(kind, str) else kind)
    except (ValueError, AttributeError):
        raise ValueError(f"Unrecognized operation: {kind}") from None
    if not isinstance(entity, Mapping) or "PartitionKey" not in entity or "RowKey" not in entity:
        raise ValueError("PartitionKey and/or RowKey were not provided in entity")
    mode = kwargs.pop("mode", UpdateMode.MERGE)
    etag = kwargs.pop("etag", None)
    condition = kwargs.pop("match_condition", None)
    extension = {name: kwargs.pop(name) for name in EXTENSION_KWARGS if name in kwargs}
    if kwargs:
        raise ValueError(f"Unsupported arguments for {kind.value}: {', '.join(kwargs)}")
    name: WriteKind
    match: str | None
    if kind is TransactionOperation.CREATE:
        name, match = "insert", None
    elif kind is TransactionOperation.UPSERT:
        name, match = _mode_name(mode, "insert_or_merge", "insert_or_replace"), None
    elif kind is TransactionOperation.UPDATE:
        name, match = _mode_name(mode, "merge", "replace"), if_match(etag, condition, entity)
    else:
        name, match = "delete", if_match(etag, condition, entity)
        entity = {"PartitionKey": entity["PartitionKey"], "RowKey": entity["RowKey"]}
    return write_op(name, entity, match, **extension)


def _mode_name(mode: Any, merge: WriteKind, replace: WriteKind) -> WriteKind:
    if mode == UpdateMode.MERGE:
        return merge
    if mode == UpdateMode.REPLACE:
        return replace
    raise ValueError(f"Mode type '{mode}' is not supported.")
