"""The native client's operations, without I/O: the request each method sends and how its answer
(or its error) becomes the method's result.

The blocking client (:mod:`rangetable.client`) and the asyncio client (:mod:`rangetable.aio`) build
the same :class:`Call` or :class:`PagedCall` here and differ only in how they send it, so the
argument checks, the wire shapes, the decoding and the error types are one piece of code for both.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from rangetable.client.models import (
    ResourceExistsError,
    ResourceNotFoundError,
    TableItem,
    UpdateMode,
    if_match,
    transaction_error,
)
from rangetable.client.paging import parameter_filter_substitution, select_list
from rangetable.client.wire import batch_op, entity_token, write_metadata, write_op
from rangetable.edm import Entity
from rangetable.errors import TableError
from rangetable.index_def import check_def
from rangetable.table_settings import parse_retention, parse_switch, parse_ttl
from rangetable.values import TableEntity, typed_to_entity

if TYPE_CHECKING:
    from rangetable.messages import (
        BatchRequest,
        GetRequest,
        ListTablesRequest,
        NativeRequest,
        QueryRequest,
        TableRequest,
        WriteKind,
        WriteRequest,
    )

T = TypeVar("T")
R = TypeVar("R")


def _none(_answer: Any) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request (``body``; None when there is nothing to send) and the reading of its answer.

    ``tolerate``: an error of this type is not raised, the result is ``decode(None)`` (deleting
    what does not exist; creating a table that does). ``transaction``: a failure naming an
    operation is raised as TableTransactionError.
    """

    body: NativeRequest | None
    decode: Callable[[Any], T]
    tolerate: type[TableError] | None = None
    transaction: bool = False

    def failed(self, exc: TableError) -> T:
        """The result after ``exc`` (when tolerated), else the error to raise, raised."""
        if self.tolerate is not None and isinstance(exc, self.tolerate):
            return self.decode(None)
        if self.transaction:
            raise transaction_error(exc) from None
        raise exc

    def then(self, decode: Callable[[Any], R]) -> Call[R]:
        """The same request with another reading of its answer."""
        return Call(self.body, decode, self.tolerate, self.transaction)


@dataclass(frozen=True, slots=True)
class PagedCall(Generic[T]):
    """A paged request: ``body(token)`` asks for the page at a continuation token, ``page(answer)``
    reads it as ``(next token or None, items)``."""

    first: NativeRequest
    wire_token: Callable[[Any], Any]
    read: Callable[[Any], tuple[Any, list[T]]]

    def body(self, token: Any) -> NativeRequest:
        """The request for the page at ``token`` (None: the first page)."""
        body: dict[str, Any] = dict(self.first)
        wire = self.wire_token(token)
        if wire is not None:
            body["next"] = wire
        return cast("NativeRequest", body)

    def page(self, answer: Any) -> tuple[Any, list[T]]:
        """``(next token, items)`` of an answer (no answer: the last, empty page)."""
        if not answer:
            return None, []
        return self.read(answer)


# --- tables ---------------------------------------------------------------------------------------


def create_table(table: str, *, exists_ok: bool = False, ttl: str | int | None = None) -> Call[TableItem]:
    """Create ``table`` (with a TTL: ``"30d"``, ``"12h"``, seconds…); ResourceExistsError
    (TableAlreadyExists) unless ``exists_ok``."""
    body: TableRequest = {"op": "create_table", "table": table, "rid": uuid.uuid4().hex}  # fixed across retries
    if ttl is not None:
        body["settings"] = {"ttl_s": parse_ttl(ttl)}
    return Call(body, lambda _answer: TableItem(table), tolerate=ResourceExistsError if exists_ok else None)


def set_table_settings(table: str, *, ttl: str | int | None = None, reads: int | None = None,
                       writes: int | None = None, feed: str | bool | None = None,
                       feed_retention: str | int | None = None,
                       feed_before_images: str | bool | None = None) -> Call[dict[str, Any]]:
    """Change ``table``'s TTL (``"none"`` or 0 removes it), reserved throughput (entities/s, 0
    removes it) and change feed; what is not given stays. Answers the settings now in force."""
    changes: dict[str, Any] = {}
    if ttl is not None:
        changes["ttl_s"] = parse_ttl(ttl)
    if feed is not None:
        changes["feed_off"] = int(not parse_switch(feed, "feed"))
    if feed_retention is not None:
        changes["feed_retention_s"] = parse_retention(feed_retention)
    if feed_before_images is not None:
        changes["feed_before"] = int(parse_switch(feed_before_images, "feed_before_images"))
    if reads is not None:
        changes["reads"] = reads
    if writes is not None:
        changes["writes"] = writes
    return Call(cast("NativeRequest", {"op": "set_table", "table": table, "settings": changes}), _same)


def get_table_settings(table: str) -> Call[dict[str, Any]]:
    """``table``'s settings and capacity usage."""
    return Call(cast("NativeRequest", {"op": "get_table", "table": table}), _same)


def create_index(table: str, name: str, on: str | Iterable[str], include: str | Iterable[str] | None = None
                 ) -> Call[dict[str, Any]]:
    """Declare index ``name`` of ``table`` on the properties ``on`` (a list or ``"a,b"``), keeping those in
    ``include`` (``"all"``: every one; None: none); answers the definition (state ``building``)."""
    d = check_def(table, name, on if isinstance(on, str) else list(on),
                  include if include is None or isinstance(include, str) else list(include))
    body = {"op": "create_index", "rid": uuid.uuid4().hex, **d.to_wire()}  # rid fixed across retries
    del body["state"]
    return Call(cast("NativeRequest", body), lambda answer: answer["index"])


def list_indexes(table: str) -> Call[list[dict[str, Any]]]:
    """``table``'s index definitions (with what the cluster knows of their progress)."""
    return Call(cast("NativeRequest", {"op": "list_indexes", "table": table}), lambda answer: answer["indexes"])


def drop_index(table: str, name: str) -> Call[None]:
    """Drop index ``name`` of ``table`` (its entries with it); IndexNotFound (a ResourceNotFoundError) if none."""
    return Call(cast("NativeRequest", {"op": "drop_index", "table": table, "name": name}), _none)


def _same(answer: Any) -> Any:
    return answer


def delete_table(table: str) -> Call[None]:
    """Delete ``table``; no error if it does not exist."""
    return Call({"op": "delete_table", "table": table}, _none, tolerate=ResourceNotFoundError)


def list_tables(query_filter: str | None = None, results_per_page: int | None = None,
                parameters: dict[str, Any] | None = None) -> PagedCall[TableItem]:
    """Tables (matching a ``TableName`` filter with ``@name`` ``parameters``), page by page."""
    body: ListTablesRequest = {"op": "list_tables"}
    if query_filter:
        body["filter"] = parameter_filter_substitution(parameters, query_filter)
    if results_per_page is not None:
        body["top"] = results_per_page

    def read(answer: Any) -> tuple[Any, list[TableItem]]:
        return answer.get("next") or None, [TableItem(name) for name in answer.get("tables", [])]

    return PagedCall(body, lambda token: token or None, read)


# --- entities -------------------------------------------------------------------------------------


def write(table: str, kind: WriteKind, entity: Mapping[str, Any], match: str | None = None,
          **extension: Any) -> Call[dict[str, Any]]:
    """A single-entity write; its request id stays the same across retries. ``extension``:
    rangetable's ``condition``, ``expect`` and ``counters`` (:func:`rangetable.client.wire.write_op`);
    the new counter values come back as ``metadata["counters"]``."""
    op = write_op(kind, entity, match, **extension)
    body: WriteRequest = {"op": "write", "table": table, "write": op, "rid": uuid.uuid4().hex}
    counted = op.get("incr")
    return Call(body, lambda answer: write_metadata(answer, counted))


def update_entity(table: str, entity: Mapping[str, Any], mode: UpdateMode | str = UpdateMode.MERGE, *,
                  etag: str | None = None, match_condition: Any = None, **extension: Any) -> Call[dict[str, Any]]:
    """Merge or replace an existing entity, under an ETag condition (and the ``extension``)."""
    match = if_match(etag, match_condition, entity)
    if mode == UpdateMode.REPLACE:
        return write(table, "replace", entity, match, **extension)
    if mode == UpdateMode.MERGE:
        return write(table, "merge", entity, match, **extension)
    raise ValueError(f"Mode type '{mode}' is not supported.")


def upsert_entity(table: str, entity: Mapping[str, Any],
                  mode: UpdateMode | str = UpdateMode.MERGE, **extension: Any) -> Call[dict[str, Any]]:
    """Insert the entity, or merge/replace it into an existing one (and the ``extension``)."""
    if mode == UpdateMode.MERGE:
        return write(table, "insert_or_merge", entity, **extension)
    if mode == UpdateMode.REPLACE:
        return write(table, "insert_or_replace", entity, **extension)
    raise ValueError(f"Update mode {mode} is not supported. For a list of supported modes see the UpdateMode enum.")


def delete_entity(table: str, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                  etag: str | None = None, match_condition: Any = None, **extension: Any) -> Call[None]:
    """Delete an entity given as ``(partition_key, row_key)`` or as an entity mapping (positional
    ``args`` or keywords ``entity``, ``partition_key``, ``row_key``); no error when it is missing
    (unless the ``extension`` expects it to exist)."""
    entity = kwargs.pop("entity", None)
    pk = kwargs.pop("partition_key", None)
    rk = kwargs.pop("row_key", None)
    if kwargs:
        raise TypeError(f"unexpected keyword arguments: {', '.join(kwargs)}")
    if entity is None and args and isinstance(args[0], Mapping):
        entity = args[0]
    if entity is not None:
        pk, rk = entity["PartitionKey"], entity["RowKey"]
    else:
        rest = list(args)
        if pk is None and rest:
            pk = rest.pop(0)
        if rk is None and rest:
            rk = rest.pop(0)
        if pk is None or rk is None:
            raise TypeError("delete_entity needs an entity or a partition_key and a row_key")
    match = if_match(etag, match_condition, entity)
    call = write(table, "delete", {"PartitionKey": pk, "RowKey": rk}, match, **extension)
    return Call(call.body, _none, tolerate=ResourceNotFoundError)


def get_entity(table: str, partition_key: str, row_key: str, select: str | list[str] | None = None) -> Call[TableEntity]:
    """Read one entity; ResourceNotFoundError if it does not exist."""
    names = select_list(select)
    body: GetRequest = {"op": "get", "table": table, "pk": partition_key, "rk": row_key}
    if names:
        body["select"] = names
    return Call(body, lambda wire: typed_to_entity(Entity(*wire), names))


def query_entities(table: str, query_filter: str | None, *, select: str | list[str] | None = None,
                   results_per_page: int | None = None, parameters: dict[str, Any] | None = None,
                   index_staleness: float | None = None) -> PagedCall[TableEntity]:
    """Entities matching an OData ``$filter`` (None: all) with ``@name`` ``parameters``, page by page;
    the continuation token is ``{"PartitionKey", "RowKey"}`` of the next page. ``index_staleness``: seconds an
    answer through a secondary index may lag its table (default: none — it sees every write acknowledged
    before the query began)."""
    names = select_list(select)
    body: QueryRequest = {"op": "query", "table": table}
    if index_staleness is not None:
        body["staleness"] = float(index_staleness)
    if query_filter:
        body["filter"] = parameter_filter_substitution(parameters, query_filter)
    if names:
        body["select"] = names
    if results_per_page is not None:
        body["top"] = results_per_page

    def read(answer: Any) -> tuple[Any, list[TableEntity]]:
        entities = [typed_to_entity(Entity(*w), names) for w in answer.get("entities", [])]
        after = answer.get("next")
        return ({"PartitionKey": after[0], "RowKey": after[1]} if after else None), entities

    return PagedCall(body, entity_token, read)


def submit_transaction(table: str, operations: Iterable[Any]) -> Call[list[dict[str, Any]]]:
    """Up to 100 SDK-style operation tuples on one partition, applied atomically; a failure raises
    TableTransactionError naming the operation in ``.index``. No operations: nothing is sent."""
    try:
        ops = [batch_op(op) for op in operations]
    except TypeError as exc:
        raise TypeError(
            "The value of 'operations' must be an iterator of Tuples. "
            "Please check documentation for correct Tuple format."
        ) from exc
    if not ops:
        return Call(None, lambda _answer: [])
    if len({op["pk"] for op in ops}) > 1:
        raise ValueError("Partition Keys in the batch must all be the same.")
    body: BatchRequest = {"op": "batch", "table": table, "ops": ops, "rid": uuid.uuid4().hex}
    return Call(body, lambda results: [write_metadata(w, op.get("incr")) for op, w in zip(ops, results, strict=True)],
                transaction=True)
