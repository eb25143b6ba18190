"""The asyncio client's own integration tests against a real cluster: many tasks on one client, tasks
cancelled mid-request, retries while a partition server fails over and the frontend restarts. (The cases
both clients share run in ``test_client.py`` and ``test_client_transactions.py``.)"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Coroutine
from typing import Any

import pytest

from rangetable import FixedRetry, ResourceNotFoundError, TableError
from rangetable.aio import TableClient, TableServiceClient
from rangetable.client.aio.transport import AsyncTransport
from tests.cluster import Cluster, ClusterFactory


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def _new_table(service: TableServiceClient) -> TableClient:
    return await service.create_table(f"aio{uuid.uuid4().hex[:10]}")


def test_many_tasks_on_one_client(cluster: Cluster) -> None:
    async def main() -> None:
        async with TableServiceClient(cluster.native) as service:
            table = await _new_table(service)

            async def worker(n: int) -> int:
                for i in range(10):
                    await table.upsert_entity({"PartitionKey": f"w{n % 16}", "RowKey": f"{n:03d}-{i}", "N": i})
                    assert (await table.get_entity(f"w{n % 16}", f"{n:03d}-{i}"))["N"] == i
                return sum([1 async for _ in table.query_entities("PartitionKey eq @p", parameters={"p": f"w{n % 16}"})])

            seen = await asyncio.gather(*(worker(n) for n in range(256)))
            assert all(s >= 10 for s in seen)
            keys = [(e["PartitionKey"], e["RowKey"]) async for e in table.list_entities(results_per_page=300)]
            assert len(keys) == 2560 == len(set(keys)) and keys == sorted(keys)
            assert len(service._transport._waiting) == 0

    run(main())


def test_cancelled_tasks_leave_the_client_usable(cluster: Cluster) -> None:
    async def main() -> None:
        async with TableServiceClient(cluster.native) as service:
            table = await _new_table(service)
            writes = [asyncio.create_task(table.create_entity({"PartitionKey": "c", "RowKey": f"{i:03d}"}))
                      for i in range(200)]
            await asyncio.sleep(0.005)
            for task in writes[::2]:
                task.cancel()
            done = await asyncio.gather(*writes, return_exceptions=True)
            cancelled = {i for i, d in enumerate(done) if isinstance(d, asyncio.CancelledError)}
            assert cancelled and all(isinstance(d, dict) for i, d in enumerate(done) if i not in cancelled)

            async def scan() -> int:
                return sum([1 async for _ in table.list_entities(results_per_page=1)])

            scanning = asyncio.create_task(scan())  # a query cancelled between its pages
            await asyncio.sleep(0.05)
            scanning.cancel()
            with pytest.raises(asyncio.CancelledError):
                await scanning
            # the client works on; a cancelled write was applied entirely or not at all
            stored = {e["RowKey"] async for e in table.list_entities()}
            assert {f"{i:03d}" for i in range(200) if i not in cancelled} <= stored
            for i in cancelled:
                key = f"{i:03d}"
                if key not in stored:
                    with pytest.raises(ResourceNotFoundError):
                        await table.get_entity("c", key)
                await table.upsert_entity({"PartitionKey": "c", "RowKey": key, "Again": True})
            assert len([e async for e in table.list_entities()]) == 200
            assert len(service._transport._waiting) == 0

    run(main())


class CountsRetriable(AsyncTransport):
    """A real transport counting the retriable errors its requests met (what the retry policy retried)."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        super().__init__(endpoint, timeout)
        self.retriable: Counter[str] = Counter()

    async def request(self, body: Any, timeout: float | None = None) -> Any:
        try:
            return await super().request(body, timeout)
        except TableError as exc:
            if exc.retriable:
                self.retriable[exc.error_code] += 1
            raise


@pytest.mark.slow
def test_retries_carry_writes_through_a_failover_and_a_frontend_restart(cluster: Cluster) -> None:
    """Inserts from 32 tasks while the primary of the table's range is killed (its range fails over), then
    while the frontend is killed (the supervisor restarts it; the requests in flight are lost and retried):
    every insert succeeds once, none twice (a retried insert applied twice would answer EntityAlreadyExists)."""
    policy = FixedRetry(delay=0.2, max_attempts=100)

    async def main() -> None:
        transport = CountsRetriable(cluster.native, timeout=2)
        async with TableClient(cluster.native, f"aio{uuid.uuid4().hex[:10]}", retry_policy=policy,
                               _transport=transport) as table:
            await table.create_table()
            await table.create_entity({"PartitionKey": "f", "RowKey": "first"})
            primary = next(r["primary"] for r in cluster.status()["ranges"] if r["table"] == table.table_name)
            n = 0

            async def inserter(k: int, stop: asyncio.Event) -> int:
                made = 0
                while not stop.is_set():
                    await table.create_entity({"PartitionKey": "f", "RowKey": f"{k:02d}-{made:05d}"})
                    made += 1
                return made

            for victim in (primary, "fe-1"):
                stop = asyncio.Event()
                tasks = [asyncio.create_task(inserter(k + n, stop)) for k in range(32)]
                await asyncio.sleep(0.5)
                old = cluster.kill(victim)
                await asyncio.sleep(1.5)
                if victim == "fe-1":
                    await asyncio.to_thread(cluster.wait, lambda old=old: cluster.pid("fe-1") != old, 30, "frontend restart")
                stop.set()
                made = await asyncio.gather(*tasks)
                assert all(m > 0 for m in made)
                rows = [e["RowKey"] async for e in table.query_entities("PartitionKey eq 'f'")]
                assert len([r for r in rows if r != "first" and int(r[:2]) >= n]) == sum(made), victim
                n += 32
                if victim == "fe-1":  # requests in flight died with it (a quick failover may not need retries)
                    assert transport.retriable, "no request was retried while the frontend was down"
                print(victim, dict(transport.retriable))
                transport.retriable.clear()
            await transport.close()

    run(main())
