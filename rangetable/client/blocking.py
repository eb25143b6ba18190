"""The native client: ``TableServiceClient`` and ``TableClient`` with azure-data-tables' API.

Code written for the SDK moves over by changing the import and the constructor::

    from rangetable import TableServiceClient, UpdateMode
    service = TableServiceClient("tcp://127.0.0.1:10012")   # or TableServiceClient.from_cluster()
    table = service.create_table_if_not_exists("orders")
    table.create_entity({"PartitionKey": "p", "RowKey": "1", "Total": 9.5})

Entities are converted by :mod:`rangetable.values` exactly as the SDK types them; errors are
:class:`rangetable.errors.TableError` subclasses named like ``azure.core.exceptions``. Requests
that fail with a retriable error are retried under the client's retry policy (default
:class:`~rangetable.client.retry.ExponentialRetry`); every write carries a request id that stays the same
across retries, so the server applies a retried write at most once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from rangetable.client import calls
from rangetable.client.calls import Call, PagedCall
from rangetable.client.changes import ChangeFeed, ChangePaged
from rangetable.client.models import TableItem, UpdateMode
from rangetable.client.paging import ItemPaged
from rangetable.client.retry import RetryPolicy, call_with_retry, default_policy
from rangetable.client.transport import Connection, Transport, cluster_endpoint
from rangetable.errors import TableError
from rangetable.values import TableEntity

if TYPE_CHECKING:
    from rangetable.messages import NativeRequest

__all__ = ["TableServiceClient", "TableClient"]

T = TypeVar("T")


TransportT = TypeVar("TransportT", bound=Connection)


class ClientBase(Generic[TransportT]):
    """What every client has, blocking or asyncio (:mod:`rangetable.aio`): the endpoint, a transport
    of ``transport_class`` (its own, or its parent's for a client from ``get_table_client``) and the
    retry policy."""

    transport_class: type[TransportT]

    def __init__(
        self,
        endpoint: str,
        *,
        retry_policy: RetryPolicy | None = None,
        timeout: float = 30.0,
        _transport: TransportT | None = None,
    ) -> None:
        self._owns_transport = _transport is None
        self._transport: TransportT = _transport or self.transport_class(endpoint, timeout)  # type: ignore[call-arg]
        self.endpoint: str = self._transport.endpoint
        self.retry_policy: RetryPolicy = retry_policy if retry_policy is not None else default_policy()

    @property
    def url(self) -> str:
        """The endpoint (the SDK's name for it)."""
        return self.endpoint


class _Client(ClientBase[Transport]):
    """What both blocking clients share: requests under the retry policy, close and context management."""

    transport_class = Transport

    def _call(self, body: NativeRequest) -> Any:
        """One request under the retry policy; a write's ``rid`` is fixed before the first try."""
        return call_with_retry(lambda: self._transport.request(body), self.retry_policy)

    def _run(self, call: Call[T]) -> T:
        """Send a :class:`~rangetable.client.calls.Call` and read its answer or error."""
        if call.body is None:
            return call.decode(None)
        try:
            answer = self._call(call.body)
        except TableError as exc:
            return call.failed(exc)
        return call.decode(answer)

    def _paged(self, paged: PagedCall[T]) -> ItemPaged[T]:
        """The items of a paged call, fetched page by page as they are iterated."""
        return ItemPaged(lambda token: paged.page(self._call(paged.body(token))))

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
    def from_cluster(cls, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> TableServiceClient:
        """A client for the local cluster whose ``cluster.json`` lives in ``data_dir`` (a directory or the file;
        default: ``$RANGETABLE_DATA_DIR``, else ``./rangetable-data``, as every CLI command)."""
        return cls(cluster_endpoint(data_dir), **kwargs)

    def get_table_client(self, table_name: str) -> TableClient:
        """A client for one table (which need not exist yet), sharing this client's connection."""
        return TableClient(
            self.endpoint, table_name, retry_policy=self.retry_policy, _transport=self._transport
        )

    def create_table(self, table_name: str, *, ttl: str | int | None = None) -> TableClient:
        """Create a table (with a TTL: ``"30d"``, ``"12h"``, seconds…); raises ResourceExistsError
        (TableAlreadyExists) if it exists."""
        table = self.get_table_client(table_name)
        return self._run(calls.create_table(table_name, ttl=ttl).then(lambda _answer: table))

    def create_table_if_not_exists(self, table_name: str) -> TableClient:
        """Create a table unless it exists; either way return its client."""
        table = self.get_table_client(table_name)
        return self._run(calls.create_table(table_name, exists_ok=True).then(lambda _answer: table))

    def delete_table(self, table_name: str) -> None:
        """Delete a table; no error if it does not exist."""
        self._run(calls.delete_table(table_name))

    def list_tables(
        self, filter: str | None = None, *, results_per_page: int | None = None
    ) -> ItemPaged[TableItem]:
        """All tables (optionally those matching a ``TableName`` filter), as TableItems, page by page."""
        return self._paged(calls.list_tables(filter, results_per_page))

    def query_tables(
        self,
        query_filter: str,
        *,
        results_per_page: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> ItemPaged[TableItem]:
        """Tables matching ``query_filter`` (e.g. ``"TableName eq @name"`` with ``parameters``)."""
        return self._paged(calls.list_tables(query_filter, results_per_page, parameters))


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
        cls, table_name: str, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> TableClient:
        """A client for ``table_name`` on the local cluster whose ``cluster.json`` is in ``data_dir`` (default:
        ``$RANGETABLE_DATA_DIR``, else ``./rangetable-data``)."""
        return cls(cluster_endpoint(data_dir), table_name, **kwargs)

    # --- tables ---------------------------------------------------------------------------------

    def create_table(self, *, ttl: str | int | None = None) -> TableItem:
        """Create this table, with a TTL if given (``"30d"``, ``"12h"``, ``"90m"``, ``"45s"`` or
        seconds: entities older than it are invisible, then reclaimed); raises ResourceExistsError
        (TableAlreadyExists) if it exists."""
        return self._run(calls.create_table(self.table_name, ttl=ttl))

    def set_table_settings(self, *, ttl: str | int | None = None, reads: int | None = None,
                           writes: int | None = None, feed: str | bool | None = None,
                           feed_retention: str | int | None = None,
                           feed_before_images: str | bool | None = None) -> dict[str, Any]:
        """Change this table's TTL (``"none"`` or 0 removes it), reserved throughput (entities/s,
        0 removes it) and change feed (``feed`` on/off, its retention written like a TTL, before-images
        on/off); what is not given stays. Returns the settings now in force. A change holds for reads
        and writes when this returns."""
        return self._run(calls.set_table_settings(self.table_name, ttl=ttl, reads=reads, writes=writes, feed=feed,
                                                  feed_retention=feed_retention, feed_before_images=feed_before_images))

    def get_table_settings(self) -> dict[str, Any]:
        """This table's settings and capacity usage: ``{"table", "ttl", "ttl_s", "reads", "writes",
        "usage": {"used_writes_s", "refused_writes_s", …}}``."""
        return self._run(calls.get_table_settings(self.table_name))

    def create_index(self, name: str, on: str | Iterable[str], include: str | Iterable[str] | None = None
                     ) -> dict[str, Any]:
        """Declare an index of this table on the properties ``on`` (a list or ``"a,b"``), keeping the
        properties in ``include`` (``"all"``: every one; None: only the keys); returns its definition, state
        ``building`` until its build caught up (docs/indexes.md)."""
        return self._run(calls.create_index(self.table_name, name, on, include))

    def list_indexes(self) -> list[dict[str, Any]]:
        """This table's index definitions: ``[{"name", "on", "include", "state", …}]``."""
        return self._run(calls.list_indexes(self.table_name))

    def drop_index(self, name: str) -> None:
        """Drop an index and its entries; ResourceNotFoundError (IndexNotFound) when there is none."""
        self._run(calls.drop_index(self.table_name, name))

    def delete_table(self) -> None:
        """Delete this table; no error if it does not exist."""
        self._run(calls.delete_table(self.table_name))

    # --- single entities ------------------------------------------------------------------------

    # Every write method also takes rangetable's extension (docs/http.md, "Conditions and counters"):
    # ``condition`` (a $filter on the current entity), ``expect`` ("exists" / "absent") and ``counters``
    # (name -> signed amount, added atomically; the new values come back as metadata["counters"]).
    # A condition or expectation that fails raises ConditionCheckFailedError (412).

    def create_entity(self, entity: Mapping[str, Any], *, condition: str | None = None, expect: str | None = None,
                      counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Insert an entity; raises ResourceExistsError (EntityAlreadyExists) if the key is taken.

        Returns ``{"etag", "timestamp", "date"}`` of the stored entity (and ``"counters"`` with counters).
        """
        return self._run(calls.write(self.table_name, "insert", entity, condition=condition, expect=expect,
                                     counters=counters))

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
        return self._run(calls.update_entity(self.table_name, entity, mode, etag=etag, match_condition=match_condition,
                                             condition=condition, expect=expect, counters=counters))

    def upsert_entity(
        self, entity: Mapping[str, Any], mode: UpdateMode | str = UpdateMode.MERGE, *,
        condition: str | None = None, expect: str | None = None, counters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Insert the entity, or merge/replace it into an existing one (``condition``, ``expect``,
        ``counters``: see above)."""
        return self._run(calls.upsert_entity(self.table_name, entity, mode, condition=condition, expect=expect,
                                             counters=counters))

    def upsert_entities(
        self, entities: Iterable[Mapping[str, Any]], mode: UpdateMode | str = UpdateMode.MERGE, *, window: int = 16
    ) -> int:
        """Bulk import: upsert many entities, grouped by PartitionKey into transactions of up to 100
        with ``window`` transactions in flight; returns how many were written. Sorting the input by
        PartitionKey makes the transactions fuller (see :mod:`rangetable.client.bulk`)."""
        from rangetable.client.bulk import bulk_upsert

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
        self._run(calls.delete_entity(self.table_name, args, kwargs, etag=etag, match_condition=match_condition,
                                      condition=condition, expect=expect))

    def get_entity(
        self, partition_key: str, row_key: str, *, select: str | list[str] | None = None
    ) -> TableEntity:
        """Read one entity; raises ResourceNotFoundError if it does not exist."""
        return self._run(calls.get_entity(self.table_name, partition_key, row_key, select))

    # --- queries --------------------------------------------------------------------------------

    def query_entities(
        self,
        query_filter: str,
        *,
        select: str | list[str] | None = None,
        results_per_page: int | None = None,
        parameters: dict[str, Any] | None = None,
        index_staleness: float | None = None,
    ) -> ItemPaged[TableEntity]:
        """Entities matching an OData ``$filter``; ``@name`` placeholders take ``parameters``.

        Iterate for entities, or ``.by_page(continuation_token)`` for pages; the page iterator's
        ``continuation_token`` is ``{"PartitionKey", "RowKey"}`` of the next page, or None. A filter on an
        indexed property is answered through the index; ``index_staleness`` (seconds) accepts an answer that
        far behind the table instead of waiting for the index to hold every earlier write.
        """
        return self._paged(calls.query_entities(self.table_name, query_filter, select=select,
                                                results_per_page=results_per_page, parameters=parameters,
                                                index_staleness=index_staleness))

    def list_entities(
        self, *, select: str | list[str] | None = None, results_per_page: int | None = None
    ) -> ItemPaged[TableEntity]:
        """Every entity of the table, in key order, page by page."""
        return self._paged(calls.query_entities(self.table_name, None, select=select,
                                                results_per_page=results_per_page))

    # --- the change feed ------------------------------------------------------------------------

    def read_changes(self, *, start: str | datetime = "beginning", cursor: str | None = None, follow: bool = False,
                     results_per_page: int = 1000, poll_interval: float = 0.05) -> ChangePaged:
        """The table's changes in order (see :mod:`rangetable.client.changes`): from ``cursor`` (a record's or
        page's), else from ``start`` (``"beginning"``: the oldest change kept; ``"now"``; or a datetime).
        Without ``follow`` the reading stops at the live edge. ``by_page()`` gives pages with a ``cursor``
        and, at the live edge, the ``resolved`` time. A cursor behind the feed's retention raises
        ``FeedTrimmed``; a table whose feed is off, ``FeedDisabled``."""
        feed = ChangeFeed(self.table_name, start=start, cursor=cursor, follow=follow,
                          results_per_page=results_per_page, poll_interval=poll_interval)
        return ChangePaged(feed, self._call)

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
        return self._run(calls.submit_transaction(self.table_name, operations))
