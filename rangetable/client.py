"""The native client: ``TableServiceClient`` and ``TableClient`` with azure-data-tables' API.

Code written for the SDK moves over by changing the import and the constructor::

    from rangetable import TableServiceClient, UpdateMode
    service = TableServiceClient("tcp://127.0.0.1:10012")   # or TableServiceClient.from_cluster()
    table = service.create_table_if_not_exists("orders")
    table.create_entity({"PartitionKey": "p", "RowKey": "1", "Total": 9.5})

Entities are converted by :mod:`rangetable.values` exactly as the SDK types them; errors are
:class:`rangetable.errors.TableError` subclasses named like ``azure.core.exceptions``. Requests
that fail with a retriable error are retried under the client's retry policy (default
:class:`~rangetable.retry.ExponentialRetry`); every write carries a request id that stays the same
across retries, so the server applies a retried write at most once.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from rangetable.client_models import (
    ResourceExistsError,
    ResourceNotFoundError,
    TableItem,
    UpdateMode,
    if_match,
    transaction_error,
)
from rangetable.client_paging import ItemPaged, parameter_filter_substitution, select_list
from rangetable.client_transport import Transport, cluster_endpoint
from rangetable.client_wire import batch_op, entity_token, write_metadata, write_op
from rangetable.edm import Entity
from rangetable.errors import TableError
from rangetable.retry import RetryPolicy, call_with_retry, default_policy
from rangetable.values import TableEntity, typed_to_entity

if TYPE_CHECKING:
    from rangetable.messages import (
        BatchRequest,
        GetRequest,
        ListTablesAnswer,
        ListTablesRequest,
        NativeRequest,
        QueryAnswer,
        QueryRequest,
        WriteKind,
        WriteRequest,
    )

__all__ = ["TableServiceClient", "TableClient"]

DEFAULT_DATA_DIR = "./rangetable-data"


class _Client:
    """What both clients share: the transport, the retry policy, close and context management."""

    def __init__(
        self,
        endpoint: str,
        *,
        retry_policy: RetryPolicy | None = None,
        timeout: float = 30.0,
        _transport: Transport | None = None,
    ) -> None:
        self._owns_transport = _transport is None
        self._transport = _transport or Transport(endpoint, timeout)
        self.endpoint: str = self._transport.endpoint
        self.retry_policy: RetryPolicy = retry_policy if retry_policy is not None else default_policy()

    @property
    def url(self) -> str:
        """The endpoint (the SDK's name for it)."""
        return self.endpoint

    def _call(self, body: NativeRequest) -> Any:
        """One request under the retry policy; a write's ``rid`` is fixed before the first try."""
        return call_with_retry(lambda: self._transport.request(body), self.retry_policy)

    def close(self) -> None:
        """Close the connection (a client from ``get_table_client`` leaves its parent's open)."""
        if self._owns_transport:
            self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TableServiceClient(_Client):
    """A client for the tables of a rangetable cluster, reached through a frontend's native endpoint."""

    def __init__(
        self, endpoint: str, *, retry_policy: RetryPolicy | None = None, timeout: float = 30.0
    ) -> None:
        super().__init__(endpoint, retry_policy=retry_policy, timeout=timeout)

    @classmethod
    def from_cluster(cls, data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, **kwargs: Any) -> TableServiceClient:
        """A client for the local cluster whose ``cluster.json`` lives in ``data_dir``."""
        return cls(cluster_endpoint(data_dir), **kwargs)

    def get_table_client(self, table_name: str) -> TableClient:
        """A client for one table (which need not exist yet), sharing this client's connection."""
        return TableClient(
            self.endpoint, table_name, retry_policy=self.retry_policy, _transport=self._transport
        )

    def create_table(self, table_name: str) -> TableClient:
        """Create a table; raises ResourceExistsError (TableAlreadyExists) if it exists."""
        table = self.get_table_client(table_name)
        table.create_table()
        return table

    def create_table_if_not_exists(self, table_name: str) -> TableClient:
        """Create a table unless it exists; either way return its client."""
        table = self.get_table_client(table_name)
        try:
            table.create_table()
        except ResourceExistsError:
            pass
        return table

    def delete_table(self, table_name: str) -> None:
        """Delete a table; no error if it does not exist."""
        self.get_table_client(table_name).delete_table()

    def list_tables(
        self, filter: str | None = None, *, results_per_page: int | None = None
    ) -> ItemPaged[TableItem]:
        """All tables (optionally those matching a ``TableName`` filter), as TableItems, page by page."""

        def fetch(token: Any) -> tuple[Any, list[TableItem]]:
            body: ListTablesRequest = {"op": "list_tables"}
            if filter:
                body["filter"] = filter
            if results_per_page is not None:
                body["top"] = results_per_page
            if token:
                body["next"] = token
            res: ListTablesAnswer | None = self._call(body)
            if not res:
                return None, []
            return res.get("next") or None, [TableItem(name) for name in res.get("tables", [])]

        return ItemPaged(fetch)

    def query_tables(
        self,
        query_filter: str,
        *,
        results_per_page: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> ItemPaged[TableItem]:
        """Tables matching ``query_filter`` (e.g. ``"TableName eq @name"`` with ``parameters``)."""
        return self.list_tables(
            parameter_filter_substitution(parameters, query_filter), results_per_page=results_per_page
        )


class TableClient(_Client):
    """A client for one table: entities, queries and transactions."""

    def __init__(
        self,
        endpoint: str,
        table_name: str,
        *,
        retry_policy: RetryPolicy | None = None,
        timeout: float = 30.0,
        _transport: Transport | None = None,
    ) -> None:
        if not table_name:
            raise ValueError("Please specify a table name.")
        self.table_name: str = table_name
        super().__init__(endpoint, retry_policy=retry_policy, timeout=timeout, _transport=_transport)

    @classmethod
    def from_cluster(
        cls, table_name: str, data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, **kwargs: Any
    ) -> TableClient:
        """A client for ``table_name`` on the local cluster whose ``cluster.json`` is in ``data_dir``."""
        return cls(cluster_endpoint(data_dir), table_name, **kwargs)

    # --- tables ---------------------------------------------------------------------------------

    def create_table(self) -> TableItem:
        """Create this table; raises ResourceExistsError (TableAlreadyExists) if it exists."""
        self._call({"op": "create_table", "table": self.table_name})
        return TableItem(self.table_name)

    def delete_table(self) -> None:
        """Delete this table; no error if it does not exist."""
        try:
            self._call({"op": "delete_table", "table": self.table_name})
        except ResourceNotFoundError:
            pass

    # --- single entities ------------------------------------------------------------------------

    def _write(self, kind: WriteKind, entity: Mapping[str, Any], match: str | None = None,
               **extension: Any) -> dict[str, Any]:
        op = write_op(kind, entity, match, **extension)
        body: WriteRequest = {"op": "write", "table": self.table_name, "write": op, "rid": uuid.uuid4().hex}
        return write_metadata(self._call(body), op.get("incr"))

    # Every write method also takes rangetable's extension (docs/http.md, "Conditions and counters"):
    # ``condition`` (a $filter on the current entity), ``expect`` ("exists" / "absent") and ``counters``
    # (name -> signed amount, added atomically; the new values come back as metadata["counters"]).
    # A condition or expectation that fails raises ConditionCheckFailedError (412).

    def create_entity(self, entity: Mapping[str, Any], *, condition: str | None = None, expect: str | None = None,
                      counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Insert an entity; raises ResourceExistsError (EntityAlreadyExists) if the key is taken.

        Returns ``{"etag", "timestamp", "date"}`` of the stored entity (and ``"counters"`` with counters).
        """
        return self._write("insert", entity, condition=condition, expect=expect, counters=counters)

    def update_entity(
        self,
        entity: Mapping[str, Any],
        mode: UpdateMode | str = UpdateMode.MERGE,
        *,
        etag: str | None = None,
        match_condition: Any = None,
        condition: str | None = None,
        expect: str | None = None,
        counters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Merge or replace an existing entity (ResourceNotFoundError if it is missing).

        With ``match_condition=MatchConditions.IfNotModified`` the stored ETag must equal ``etag``
        (or ``entity.metadata["etag"]``), else ResourceModifiedError (412). ``condition``,
        ``expect`` and ``counters``: see above, e.g. ``update_entity({"PartitionKey": "p", "RowKey":
        "r"}, condition="stock ge 1", counters={"stock": -1})``.
        """
        match = if_match(etag, match_condition, entity)
        if mode == UpdateMode.REPLACE:
            return self._write("replace", entity, match, condition=condition, expect=expect, counters=counters)
        if mode == UpdateMode.MERGE:
            return self._write("merge", entity, match, condition=condition, expect=expect, counters=counters)
        raise ValueError(f"Mode type '{mode}' is not supported.")

    def upsert_entity(
        self, entity: Mapping[str, Any], mode: UpdateMode | str = UpdateMode.MERGE, *,
        condition: str | None = None, expect: str | None = None, counters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Insert the entity, or merge/replace it into an existing one (``condition``, ``expect``,
        ``counters``: see above)."""
        if mode == UpdateMode.MERGE:
            return self._write("insert_or_merge", entity, condition=condition, expect=expect, counters=counters)
        if mode == UpdateMode.REPLACE:
            return self._write("insert_or_replace", entity, condition=condition, expect=expect, counters=counters)
        raise ValueError(
            f"Update mode {mode} is not supported. For a list of supported modes see the UpdateMode enum."
        )

    def upsert_entities(
        self, entities: Iterable[Mapping[str, Any]], mode: UpdateMode | str = UpdateMode.MERGE, *, window: int = 16
    ) -> int:
        """Bulk import: upsert many entities, grouped by PartitionKey into transactions of up to 100
        with ``window`` transactions in flight; returns how many were written. Sorting the input by
        PartitionKey makes the transactions fuller (see :mod:`rangetable.bulk`)."""
        from rangetable.bulk import bulk_upsert

        kind = "merge" if mode == UpdateMode.MERGE else "replace"
        return bulk_upsert(self.endpoint, self.table_name, entities, mode=kind, window=window,
                           timeout=self._transport.timeout).entities

    def delete_entity(
        self,
        *args: Any,
        etag: str | None = None,
        match_condition: Any = None,
        condition: str | None = None,
        expect: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Delete an entity given as ``(partition_key, row_key)`` or as an entity mapping.

        No error when it does not exist (unless ``expect="exists"``). ``etag`` +
        ``MatchConditions.IfNotModified`` make the delete conditional (ResourceModifiedError on
        mismatch); ``condition`` and ``expect``: see above.
        """
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
        try:
            self._write("delete", {"PartitionKey": pk, "RowKey": rk}, match, condition=condition, expect=expect)
        except ResourceNotFoundError:
            pass

    def get_entity(
        self, partition_key: str, row_key: str, *, select: str | list[str] | None = None
    ) -> TableEntity:
        """Read one entity; raises ResourceNotFoundError if it does not exist."""
        names = select_list(select)
        body: GetRequest = {"op": "get", "table": self.table_name, "pk": partition_key, "rk": row_key}
        if names:
            body["select"] = names
        wire = self._call(body)
        return typed_to_entity(Entity(*wire), names)

    # --- queries --------------------------------------------------------------------------------

    def query_entities(
        self,
        query_filter: str,
        *,
        select: str | list[str] | None = None,
        results_per_page: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> ItemPaged[TableEntity]:
        """Entities matching an OData ``$filter``; ``@name`` placeholders take ``parameters``.

        Iterate for entities, or ``.by_page(continuation_token)`` for pages; the page iterator's
        ``continuation_token`` is ``{"PartitionKey", "RowKey"}`` of the next page, or None.
        """
        return self._query(parameter_filter_substitution(parameters, query_filter), select, results_per_page)

    def list_entities(
        self, *, select: str | list[str] | None = None, results_per_page: int | None = None
    ) -> ItemPaged[TableEntity]:
        """Every entity of the table, in key order, page by page."""
        return self._query(None, select, results_per_page)

    def _query(
        self, query_filter: str | None, select: str | list[str] | None, results_per_page: int | None
    ) -> ItemPaged[TableEntity]:
        names = select_list(select)

        def fetch(token: Any) -> tuple[Any, list[TableEntity]]:
            body: QueryRequest = {"op": "query", "table": self.table_name}
            if query_filter:
                body["filter"] = query_filter
            if names:
                body["select"] = names
            if results_per_page is not None:
                body["top"] = results_per_page
            nxt = entity_token(token)
            if nxt is not None:
                body["next"] = nxt
            res: QueryAnswer | None = self._call(body)
            if not res:
                return None, []
            entities = [typed_to_entity(Entity(*w), names) for w in res.get("entities", [])]
            after = res.get("next")
            return ({"PartitionKey": after[0], "RowKey": after[1]} if after else None), entities

        return ItemPaged(fetch)

    # --- transactions ---------------------------------------------------------------------------

    def submit_transaction(self, operations: Iterable[Any]) -> list[dict[str, Any]]:
        """Apply up to 100 operations on one partition atomically.

        ``operations`` are SDK-style tuples: ``("create", entity)``, ``("upsert", entity, {"mode": ...})``,
        ``("update", entity, {"mode", "etag", "match_condition"})``, ``("delete", entity, {...})``;
        each keyword dict may also hold ``condition``, ``expect`` and ``counters`` (see above).
        Returns one metadata dict per operation; on failure nothing is applied and
        :class:`TableTransactionError` names the failing operation in ``.index`` (a condition that
        failed: ``error_code`` ConditionCheckFailed).
        """
        try:
            ops = [batch_op(op) for op in operations]
        except TypeError as exc:
            raise TypeError(
                "The value of 'operations' must be an iterator of Tuples. "
                "Please check documentation for correct Tuple format."
            ) from exc
        if not ops:
            return []
        if len({op["pk"] for op in ops}) > 1:
            raise ValueError("Partition Keys in the batch must all be the same.")
        body: BatchRequest = {"op": "batch", "table": self.table_name, "ops": ops, "rid": uuid.uuid4().hex}
        try:
            results = self._call(body)
        except TableError as exc:
            raise transaction_error(exc) from None
        return [write_metadata(w, op.get("incr")) for op, w in zip(ops, results, strict=True)]

