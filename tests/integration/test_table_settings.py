"""Table TTL and reserved throughput on a real cluster: the native client, the CLI's coordinator op,
and the unchanged azure-data-tables SDK (the TTL rides on an ``x-rangetable-ttl`` header)."""

from __future__ import annotations

import time

import pytest
from azure.core.exceptions import HttpResponseError
from azure.core.exceptions import ResourceNotFoundError as AzureNotFound
from azure.data.tables import TableServiceClient as AzureService

from rangetable.client import TableServiceClient
from rangetable.client.models import ResourceNotFoundError
from rangetable.client.retry import NoRetry
from rangetable.errors import TableError
from tests.cluster import ClusterFactory


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


def _rows(t) -> list[str]:
    return sorted(e["RowKey"] for e in t.list_entities())


def test_ttl_hides_at_once_and_is_reclaimed(cluster) -> None:
    with TableServiceClient(cluster.native) as svc:
        t = svc.create_table("ttlnative", ttl="3s")
        assert t.get_table_settings()["ttl"] == "3s"
        t.submit_transaction([("upsert", {"PartitionKey": "p", "RowKey": f"r{i:02d}", "v": i}) for i in range(20)])
        t.upsert_entity({"PartitionKey": "q", "RowKey": "a", "v": 1})
        assert len(_rows(t)) == 21
        time.sleep(3.2)
        assert _rows(t) == []  # scans
        with pytest.raises(ResourceNotFoundError):
            t.get_entity("p", "r00")  # point reads
        with pytest.raises(ResourceNotFoundError):
            t.update_entity({"PartitionKey": "q", "RowKey": "a", "v": 2})  # the reads of writes
        t.create_entity({"PartitionKey": "q", "RowKey": "a", "v": 3})  # an insert over an expired row
        assert _rows(t) == ["a"]
        # reclaimed in the background: removing the TTL then brings nothing back
        time.sleep(2.0)
        t.set_table_settings(ttl="none")
        assert _rows(t) == ["a"]
        svc.delete_table("ttlnative")


def test_setting_a_ttl_holds_when_the_call_returns(cluster) -> None:
    with TableServiceClient(cluster.native) as svc:
        t = svc.create_table("ttllater")
        t.upsert_entity({"PartitionKey": "p", "RowKey": "old", "v": 1})
        time.sleep(2.5)
        t.upsert_entity({"PartitionKey": "p", "RowKey": "new", "v": 1})
        assert t.set_table_settings(ttl="2s")["ttl"] == "2s"
        assert _rows(t) == ["new"]
        assert t.set_table_settings(ttl="1h")["ttl"] == "1h"
        with pytest.raises(TableError) as ei:
            t.set_table_settings(ttl="5 fortnights")
        assert ei.value.error_code == "InvalidInput"
        svc.delete_table("ttllater")


def test_ttl_through_the_azure_sdk(cluster) -> None:
    svc = AzureService.from_connection_string(cluster.connection_string)
    t = svc.create_table("ttlrest", headers={"x-rangetable-ttl": "2s"})
    t.upsert_entity({"PartitionKey": "p", "RowKey": "r", "v": 1})
    assert [e["RowKey"] for e in t.list_entities()] == ["r"]
    time.sleep(2.2)
    assert list(t.list_entities()) == []
    with pytest.raises(AzureNotFound):
        t.get_entity("p", "r")
    with pytest.raises(HttpResponseError) as ei:
        svc.create_table("ttlbad", headers={"x-rangetable-ttl": "2 weeks"})
    assert ei.value.status_code == 400
    svc.delete_table("ttlrest")


def test_reserved_writes_refuse_with_server_busy(cluster) -> None:
    with TableServiceClient(cluster.native, retry_policy=NoRetry()) as svc:
        t = svc.create_table("reserved")
        t.set_table_settings(writes=50)
        time.sleep(1.5)  # the lease answers bring the shares
        busy = ok = i = 0
        shown: dict = {}
        deadline = time.monotonic() + 30
        # the usage is a rate from the ranges' latest load report: look at it while the writes go on
        while not (busy and ok and shown.get("usage", {}).get("refused_writes_s")) and time.monotonic() < deadline:
            for _ in range(50):
                i += 1
                try:
                    t.upsert_entity({"PartitionKey": "p", "RowKey": f"r{i}", "v": i})
                    ok += 1
                except TableError as exc:
                    assert exc.error_code == "ServerBusy" and "retry in" in exc.message
                    busy += 1
            shown = t.get_table_settings()
        assert busy > 0 and ok > 0 and shown["usage"].get("refused_writes_s"), (busy, ok, shown)
        assert shown["writes"] == 50
        t.set_table_settings(writes=0)
        svc.delete_table("reserved")
