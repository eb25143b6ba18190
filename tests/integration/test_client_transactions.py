"""Integration tests of the native clients' transactions, retried writes and threads against a real
cluster (``tests/cluster.py``), each on both clients (the blocking one and ``rangetable.aio``).

One cluster (coordinator, two partition servers, a frontend) is started for the module; each test
uses its own table.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from rangetable import (
    FixedRetry,
    MatchConditions,
    ResourceExistsError,
    ResourceNotFoundError,
    TableClient,
    TableError,
    TableServiceClient,
    TableTransactionError,
    UpdateMode,
)
from rangetable.client.aio.transport import AsyncTransport
from rangetable.client.transport import Transport
from tests.cluster import ClusterFactory
from tests.integration.aio_blocking import Clients
from tests.integration.client_fixtures import (  # noqa: F401  (fixtures)
    aio_loop_fixture,
    clients_fixture,
    service_fixture,
    table_fixture,
)


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


# --- transactions ------------------------------------------------------------------------------


def test_submit_transaction_success(table: TableClient) -> None:
    table.create_entity({"PartitionKey": "b", "RowKey": "existing", "V": 1})
    table.create_entity({"PartitionKey": "b", "RowKey": "doomed"})
    ops = [
        ("create", {"PartitionKey": "b", "RowKey": "new", "V": 1}),
        ("upsert", {"PartitionKey": "b", "RowKey": "up", "V": 2}, {"mode": UpdateMode.REPLACE}),
        ("update", {"PartitionKey": "b", "RowKey": "existing", "W": 3}, {"mode": UpdateMode.MERGE}),
        ("delete", {"PartitionKey": "b", "RowKey": "doomed"}),
    ]
    result = table.submit_transaction(ops)
    assert len(result) == 4
    assert all(r["etag"] for r in result[:3])
    assert table.get_entity("b", "existing") == {"PartitionKey": "b", "RowKey": "existing", "V": 1, "W": 3}
    assert table.get_entity("b", "new")["V"] == 1
    with pytest.raises(ResourceNotFoundError):
        table.get_entity("b", "doomed")
    assert table.submit_transaction([]) == []


def test_submit_transaction_failure_has_index(table: TableClient) -> None:
    table.create_entity({"PartitionKey": "b", "RowKey": "taken"})
    ops = [
        ("create", {"PartitionKey": "b", "RowKey": "x1"}),
        ("upsert", {"PartitionKey": "b", "RowKey": "x2"}),
        ("create", {"PartitionKey": "b", "RowKey": "taken"}),
    ]
    with pytest.raises(TableTransactionError) as info:
        table.submit_transaction(ops)
    err = info.value
    assert err.index == 2 and err.error_code == "EntityAlreadyExists" and err.status_code == 409
    assert isinstance(err, TableError)
    assert [e["RowKey"] for e in table.list_entities()] == ["taken"]  # nothing applied
    with pytest.raises(ValueError):
        table.submit_transaction(
            [("create", {"PartitionKey": "a", "RowKey": "1"}), ("create", {"PartitionKey": "b", "RowKey": "1"})]
        )
    stale = table.get_entity("b", "taken")
    table.update_entity({"PartitionKey": "b", "RowKey": "taken", "V": 1})
    with pytest.raises(TableTransactionError) as info:
        table.submit_transaction(
            [
                ("create", {"PartitionKey": "b", "RowKey": "y"}),
                ("update", stale, {"etag": stale.metadata["etag"], "match_condition": MatchConditions.IfNotModified}),
            ]
        )
    assert (info.value.index, info.value.status_code) == (1, 412)


def test_transaction_on_missing_table(service: TableServiceClient) -> None:
    t = service.get_table_client(f"nosuch{uuid.uuid4().hex[:8]}")
    with pytest.raises(ResourceNotFoundError):
        t.submit_transaction([("create", {"PartitionKey": "a", "RowKey": "b"})])


# --- retries and threads -----------------------------------------------------------------------


def lose_first_write_reply(rids: list[str], body: dict, result):
    """``result``, unless ``body`` is the first write: then its reply is "lost" after the server applied it."""
    if body["op"] in ("write", "batch"):
        rids.append(body["rid"])
        if len(rids) == 1:
            raise TableError("OperationTimedOut", "reply lost (injected)")
    return result


class LosesFirstWriteReply(Transport):
    """A real transport whose first write reply is lost."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint, timeout=10)
        self.rids: list[str] = []

    def request(self, body: dict, timeout: float | None = None):
        return lose_first_write_reply(self.rids, body, super().request(body, timeout))


class LosesFirstAsyncWriteReply(AsyncTransport):
    """A real asyncio transport whose first write reply is lost."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint, timeout=10)
        self.rids: list[str] = []

    async def request(self, body: dict, timeout: float | None = None):
        return lose_first_write_reply(self.rids, body, await super().request(body, timeout))


@pytest.mark.parametrize("how", ["create_entity", "submit_transaction"])
def test_retried_write_is_applied_once(table: TableClient, clients: Clients, how: str) -> None:
    lossy = LosesFirstAsyncWriteReply if clients.name == "asyncio" else LosesFirstWriteReply
    transport = lossy(table.endpoint)
    client = clients.TableClient(
        table.endpoint, table.table_name, retry_policy=FixedRetry(delay=0.01, max_attempts=3), _transport=transport
    )
    with client:
        entity = {"PartitionKey": "once", "RowKey": "1", "V": 1}
        if how == "create_entity":
            md = client.create_entity(entity)  # a second insert would be EntityAlreadyExists
        else:
            md = client.submit_transaction([("create", entity), ("create", {**entity, "RowKey": "2"})])[0]
    assert len(transport.rids) == 2 and transport.rids[0] == transport.rids[1]
    assert table.get_entity("once", "1").metadata["etag"] == md["etag"]
    with pytest.raises(ResourceExistsError):
        table.create_entity(entity)  # a new request (new rid) is not deduplicated


def test_one_client_many_threads(table: TableClient) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(40):
                table.upsert_entity({"PartitionKey": f"th{n}", "RowKey": f"{i:03d}", "N": i})
                assert table.get_entity(f"th{n}", f"{i:03d}")["N"] == i
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(1 for _ in table.list_entities()) == 320
