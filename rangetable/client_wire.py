"""The native client's translations between the SDK's arguments and the wire messages.

:class:`rangetable.client.TableClient` takes what ``azure-data-tables`` takes (entity mappings,
transaction tuples, continuation tokens as dicts) and sends :mod:`rangetable.messages` shapes; the
functions here do the converting, both ways, and hold no connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rangetable.client_models import TransactionOperation, UpdateMode, if_match
from rangetable.edm import etag_from_ticks
from rangetable.values import TablesDatetime, entity_to_typed

if TYPE_CHECKING:
    from rangetable.messages import WireEntity, WriteKind, WriteOp


def write_op(kind: WriteKind, entity: Mapping[str, Any], match: str | None = None) -> WriteOp:
    """An entity mapping as the wire write operation ``kind`` with the ETag condition ``match``."""
    pk, rk, props = entity_to_typed(entity)
    return {"op": kind, "pk": pk, "rk": rk, "props": props, "if_match": match}


def write_metadata(wire: WireEntity | None) -> dict[str, Any]:
    """The SDK-style metadata dict of a write result (``None`` for a delete)."""
    if wire is None:
        return {"etag": None, "timestamp": None, "date": None}
    ts = wire[2]
    when = TablesDatetime.from_ticks(ts)
    return {"etag": etag_from_ticks(ts), "timestamp": when, "date": when}


def entity_token(token: Any) -> list[str | None] | None:
    """A query continuation token (``{"PartitionKey", "RowKey"}`` or a pair) in wire form."""
    if not token:
        return None
    if isinstance(token, Mapping):
        return [token.get("PartitionKey"), token.get("RowKey")]
    if isinstance(token, list | tuple) and len(token) == 2:
        return [token[0], token[1]]
    raise ValueError("Invalid continuation token format.")


def batch_op(operation: Any) -> WriteOp:
    """One SDK-style transaction tuple as a wire write operation."""
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
    return write_op(name, entity, match)


def _mode_name(mode: Any, merge: WriteKind, replace: WriteKind) -> WriteKind:
    if mode == UpdateMode.MERGE:
        return merge
    if mode == UpdateMode.REPLACE:
        return replace
    raise ValueError(f"Mode type '{mode}' is not supported.")
