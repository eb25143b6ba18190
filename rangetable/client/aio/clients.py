"""The asyncio native client: ``TableServiceClient`` and ``TableClient`` with the API of
``azure.data.tables.aio``.

Every method does what the blocking client's method of the same name does (:mod:`rangetable.client`:
the same arguments, results, errors and retry policies; both build their requests with
:mod:`rangetable.client.calls`), as a coroutine; ``list_tables``, ``query_tables``,
``list_entities`` and ``query_entities`` return an :class:`~rangetable.client.aio.paging.AsyncItemPaged`
at once. All clients from one service client share its socket, on which any number of tasks may
have requests in flight.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self, TypeVar

from rangetable.client import calls
from rangetable.client.aio.paging import AsyncChangePaged, AsyncItemPaged
from rangetable.client.aio.transport import AsyncTransport, call_with_retry
from rangetable.client.blocking import ClientBase
from rangetable.client.changes import ChangeFeed
from rangetable.client.models import TableItem, UpdateMode
from rangetable.client.retry import RetryPolicy
from rangetable.client.transport import cluster_endpoint
from rangetable.errors import TableError
from rangetable.values import TableEntity

if TYPE_CHECKING:
    from rangetable.client.calls import Call, PagedCall
    from rangetable.messages import NativeRequest

__all__ = ["TableServiceClient", "TableClient"]

T = TypeVar("T")


class _AsyncClient(ClientBase[AsyncTransport]):
    """What both clients share: requests under the retry policy, close and ``async with``."""

    transport_class = AsyncTransport

    async def _call(self, body: NativeRequest) -> Any:
        """One request under the retry policy; a write's ``rid`` is fixed before the first try."""
        return await call_with_retry(lambda: self._transport.request(body), self.retry_policy)

    async def _run(self, call: Call[T]) -> T:
        """Send a :class:`~rangetable.client.calls.Call` and read its answer or error."""
        if call.body is None:
            return call.decode(None)
        try:
            answer = await self._call(call.body)
        except TableError as exc:
            return call.failed(exc)
        return call.decode(answer)

    def _paged(self, paged: PagedCall[T]) -> AsyncItemPaged[T]:
        """The items of a paged call, fetched page by page as they are iterated."""

        async def fetch(token: Any) -> tuple[Any, list[T]]:
            return paged.page(await self._call(paged.body(token)))

        return AsyncItemPaged(fetch)

    async def close(self) -> None:
        """Close the connection (a client from ``get_table_client`` leaves its parent's open)."""
        if self._owns_transport:
            await self._transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class TableServiceClient(_AsyncClient):
    """A client for the tables of a rangetable cluster, reached through a frontend's native endpoint."""

    def __init__(self, endpoint: str, *, retry_policy: RetryPolicy | None = None, timeout: float = 30.0) -> None:
        super().__init__(endpoint, retry_policy=retry_policy, timeout=timeout)

    @classmethod
    def from_cluster(cls, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> TableServiceClient:
        """A client for the local cluster whose ``cluster.json`` lives in ``data_dir`` (default:
        ``$RANGETABLE_DATA_DIR``, else ``./rangetable-data``, as every CLI command)."""
        return cls(cluster_endpoint(data_dir), **kwargs)

    def get_table_client(self, table_name: str) -> TableClient:
        """A client for one table (which need not exist yet), sharing this client's connection."""
        return TableClient(self.endpoint, table_name, retry_policy=self.retry_policy, _transport=self._transport)

    async def create_table(self, table_name: str, *, ttl: str | int | None = None) -> TableClient:
        """Create a table (with a TTL if given) and return its client; ResourceExistsError
        (TableAlreadyExists) if it exists."""
        table = self.get_table_client(table_name)
        return await self._run(calls.create_table(table_name, ttl=ttl).then(lambda _answer: table))

    async def create_table_if_not_exists(self, table_name: str) -> TableClient:
        """Create a table unless it exists; either way return its client."""
        table = self.get_table_client(table_name)
        return await self._run(calls.create_table(table_name, exists_ok=True).then(lambda _answer: table))

    async def delete_table(self, table_name: str) -> None:
        """Delete a table; no error if it does not exist."""
        await self._run(calls.delete_table(table_name))

    def list_tables(self, filter: str | None = None, *,
                    results_per_page: int | None = None) -> AsyncItemPaged[TableItem]:
        """All tables (optionally those matching a ``TableName`` filter), as TableItems, page by page."""
        return self._paged(calls.list_tables(filter, results_per_page))

    def query_tables(self, query_filter: str, *, results_per_page: int | None = None,
                     parameters: dict[str, Any] | None = None) -> AsyncItemPaged[TableItem]:
        """Tables matching ``query_filter`` (e.g. ``"TableName eq @name"`` with ``parameters``)."""
        return self._paged(calls.list_tables(query_filter, results_per_page, parameters))


class TableClient(_AsyncClient):
    """A client for one table: entities, queries and transactions."""

    def __init__(self, endpoint: str, table_name: str, *, retry_policy: RetryPolicy | None = None,
                 timeout: float = 30.0, _transport: AsyncTransport | None = None) -> None:
        if not table_name:
            raise ValueError("Please specify a table name.")
        self.table_name: str = table_name
        super().__init__(endpoint, retry_policy=retry_policy, timeout=timeout, _transport=_transport)

    @classmethod
    def from_cluster(cls, table_name: str, data_dir: str | os.PathLike[str] | None = None,
                     **kwargs: Any) -> TableClient:
        """A client for ``table_name`` on the local cluster whose ``cluster.json`` is in ``data_dir`` (default:
        ``$RANGETABLE_DATA_DIR``, else ``./rangetable-data``)."""
        return cls(cluster_endpoint(data_dir), table_name, **kwargs)

    async def create_table(self, *, ttl: str | int | None = None) -> TableItem:
        """Create this table (with a TTL if given); ResourceExistsError (TableAlreadyExists) if it exists."""
        return await self._run(calls.create_table(self.table_name, ttl=ttl))

    async def set_table_settings(self, *, ttl: str | int | None = None, reads: int | None = None,
                                 writes: int | None = None, feed: str | bool | None = None,
                                 feed_retention: str | int | None = None,
                                 feed_before_images: str | bool | None = None) -> dict[str, Any]:
        """Change this table's TTL, reserved throughput and change feed (see the blocking client); the
        settings now in force."""
        return await self._run(calls.set_table_settings(self.table_name, ttl=ttl, reads=reads, writes=writes,
                                                        feed=feed, feed_retention=feed_retention,
                                                        feed_before_images=feed_before_images))

    async def get_table_settings(self) -> dict[str, Any]:
        """This table's settings and capacity usage."""
        return await self._run(calls.get_table_settings(self.table_name))

    async def create_index(self, name: str, on: str | Iterable[str], include: str | Iterable[str] | None = None
                     ) -> dict[str, Any]:
        """Declare an index of this table on the properties ``on`` (a list or ``"a,b"``), keeping the
        properties in ``include`` (``"all"``: every one; None: only the keys); returns its definition, state
        ``building`` until its build caught up (docs/indexes.md)."""
        return await self._run(calls.create_index(self.table_name, name, on, include))

    async def list_indexes(self) -> list[dict[str, Any]]:
        """This table's index definitions: ``[{"name", "on", "include", "state", …}]``."""
        return await self._run(calls.list_indexes(self.table_name))

    async def drop_index(self, name: str) -> None:
        """Drop an index and its entries; ResourceNotFoundError (IndexNotFound) when there is none."""
        await self._run(calls.drop_index(self.table_name, name))

    async def delete_table(self) -> None:
        """Delete this table; no error if it does not exist."""
        await self._run(calls.delete_table(self.table_name))

    # Every write method also takes rangetable's extension, as the blocking client: ``condition``,
    # ``expect`` and ``counters`` (docs/http.md, "Conditions and counters").

    async def create_entity(self, entity: Mapping[str, Any], *, condition: str | None = None,
                            expect: str | None = None, counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Insert an entity and return its ``{"etag", "timestamp", "date"}``; ResourceExistsError
        (EntityAlreadyExists) if the key is taken."""
        return await self._run(calls.write(self.table_name, "insert", entity, condition=condition, expect=expect,
                                           counters=counters))

    async def update_entity(self, entity: Mapping[str, Any], mode: UpdateMode | str = UpdateMode.MERGE, *,
                            etag: str | None = None, match_condition: Any = None, condition: str | None = None,
                            expect: str | None = None, counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Merge or replace an existing entity, under an ETag condition (as the blocking client)."""
        return await self._run(calls.update_entity(self.table_name, entity, mode, etag=etag,
                                                   match_condition=match_condition, condition=condition,
                                                   expect=expect, counters=counters))

    async def upsert_entity(self, entity: Mapping[str, Any], mode: UpdateMode | str = UpdateMode.MERGE, *,
                            condition: str | None = None, expect: str | None = None,
                            counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Insert the entity, or merge/replace it into an existing one."""
        return await self._run(calls.upsert_entity(self.table_name, entity, mode, condition=condition, expect=expect,
                                                   counters=counters))

    async def upsert_entities(self, entities: Iterable[Mapping[str, Any]],
                              mode: UpdateMode | str = UpdateMode.MERGE, *, window: int = 16) -> int:
        """Bulk import, as the blocking client's ``upsert_entities`` (:mod:`rangetable.client.bulk`, pipelined
        on a socket of its own, in a worker thread); returns how many entities were written."""
        from rangetable.client.bulk import bulk_upsert

        kind = "merge" if mode == UpdateMode.MERGE else "replace"
        result = await asyncio.to_thread(bulk_upsert, self.endpoint, self.table_name, entities, mode=kind,
                                         window=window, timeout=self._transport.timeout)
        return result.entities

    async def delete_entity(self, *args: Any, etag: str | None = None, match_condition: Any = None,
                            condition: str | None = None, expect: str | None = None, **kwargs: Any) -> None:
        """Delete an entity given as ``(partition_key, row_key)`` or as an entity mapping; no error
        when it does not exist (unless ``expect="exists"``)."""
        await self._run(calls.delete_entity(self.table_name, args, kwargs, etag=etag, match_condition=match_condition,
                                            condition=condition, expect=expect))

    async def get_entity(self, partition_key: str, row_key: str, *,
                         select: str | list[str] | None = None) -> TableEntity:
        """Read one entity; ResourceNotFoundError if it does not exist."""
        return await self._run(calls.get_entity(self.table_name, partition_key, row_key, select))

    def query_entities(self, query_filter: str, *, select: str | list[str] | None = None,
                       results_per_page: int | None = None,
                       parameters: dict[str, Any] | None = None,
                       index_staleness: float | None = None) -> AsyncItemPaged[TableEntity]:
        """Entities matching an OData ``$filter``; ``@name`` placeholders take ``parameters``.
        ``async for`` the entities, or ``by_page(continuation_token)`` for pages."""
        return self._paged(calls.query_entities(self.table_name, query_filter, select=select,
                                                results_per_page=results_per_page, parameters=parameters,
                                                index_staleness=index_staleness))

    def list_entities(self, *, select: str | list[str] | None = None,
                      results_per_page: int | None = None) -> AsyncItemPaged[TableEntity]:
        """Every entity of the table, in key order, page by page."""
        return self._paged(calls.query_entities(self.table_name, None, select=select,
                                                results_per_page=results_per_page))

    def read_changes(self, *, start: str | datetime = "beginning", cursor: str | None = None, follow: bool = False,
                     results_per_page: int = 1000, poll_interval: float = 0.05) -> AsyncChangePaged:
        """The table's changes in order, as the blocking client's ``read_changes``: ``async for`` the records,
        or ``by_page()`` for pages with a ``cursor`` and, at the live edge, the ``resolved`` time."""
        feed = ChangeFeed(self.table_name, start=start, cursor=cursor, follow=follow,
                          results_per_page=results_per_page, poll_interval=poll_interval)
        return AsyncChangePaged(feed, self._call)

    async def submit_transaction(self, operations: Iterable[Any]) -> list[dict[str, Any]]:
        """Apply up to 100 SDK-style operation tuples on one partition atomically; one metadata dict
        per operation, or TableTransactionError naming the failing one in ``.index``."""
        return await self._run(calls.submit_transaction(self.table_name, operations))
