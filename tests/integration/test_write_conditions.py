"""Issue #22, items 1 and 2, end to end on a real cluster: conditions on column values and atomic
counters through the native client, the unchanged Azure SDK over REST (extension headers per call and
per batch operation), raw HTTP and the CLI.
"""

from __future__ import annotations

import itertools
import json
import uuid
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from cli.main import main
from rangetable import ConditionCheckFailedError, EdmType, EntityProperty, TableServiceClient
from rangetable.client.models import TableTransactionError
from rangetable.errors import TableError
from tests.cluster import ClusterFactory
from tests.rest_helpers import Raw

_n = itertools.count()


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


@pytest.fixture
def table(cluster):
    name = f"w{uuid.uuid4().hex[:8]}{next(_n)}"
    with TableServiceClient(cluster.native) as svc:
        client = svc.create_table(name)
        yield client
        svc.delete_table(name)


# --- native ---------------------------------------------------------------------------------------


def test_native_conditional_decrement_and_counters(table):
    table.create_entity({"PartitionKey": "p", "RowKey": "r", "stock": 2, "status": "open"})
    key = {"PartitionKey": "p", "RowKey": "r"}
    got = [table.update_entity(key, condition="stock ge 1 and status eq 'open'", counters={"stock": -1})["counters"]
           for _ in range(2)]
    assert got == [{"stock": 1}, {"stock": 0}]
    with pytest.raises(ConditionCheckFailedError) as e:
        table.update_entity(key, condition="stock ge 1", counters={"stock": -1})
    assert e.value.status_code == 412 and e.value.error_code == "ConditionCheckFailed" and "stock ge 1" in e.value.message
    assert table.get_entity("p", "r")["stock"] == 0
    meta = table.upsert_entity({"PartitionKey": "p", "RowKey": "n"}, counters={
        "big": EntityProperty(5, EdmType.INT64), "avg": 0.5})
    assert meta["counters"] == {"big": 5, "avg": 0.5}
    with pytest.raises(TableError) as e2:
        table.update_entity({"PartitionKey": "p", "RowKey": "n"}, counters={"big": EntityProperty(2**63 - 1, "Edm.Int64")})
    assert e2.value.error_code == "CounterOverflow" and e2.value.status_code == 400
    with pytest.raises(ConditionCheckFailedError):
        table.create_entity({"PartitionKey": "p", "RowKey": "x"}, condition="stock ge 1")
    with pytest.raises(ConditionCheckFailedError):
        table.upsert_entity({"PartitionKey": "p", "RowKey": "r"}, expect="absent")
    with pytest.raises(ConditionCheckFailedError):
        table.delete_entity("p", "r", condition="status eq 'closed'")
    table.delete_entity("p", "r", condition="status eq 'open'", expect="exists")
    with pytest.raises(ConditionCheckFailedError):
        table.delete_entity("p", "r", expect="exists")


def test_native_transaction_names_the_failing_condition(table):
    table.create_entity({"PartitionKey": "p", "RowKey": "a", "stock": 1})
    ops = [("update", {"PartitionKey": "p", "RowKey": "a"}, {"counters": {"stock": -1}, "condition": "stock ge 1"}),
           ("create", {"PartitionKey": "p", "RowKey": "b"}),
           ("upsert", {"PartitionKey": "p", "RowKey": "c"}, {"condition": "stock ge 1"})]
    with pytest.raises(TableTransactionError) as e:
        table.submit_transaction(ops)
    assert (e.value.index, e.value.error_code) == (2, "ConditionCheckFailed")
    assert table.get_entity("p", "a")["stock"] == 1
    ops[2] = ("upsert", {"PartitionKey": "p", "RowKey": "c"}, {"expect": "absent"})
    out = table.submit_transaction(ops)
    assert out[0]["counters"] == {"stock": 0} and "counters" not in out[2]
    assert table.get_entity("p", "a")["stock"] == 0


# --- REST: the Azure SDK, unchanged -----------------------------------------------------------------


def test_sdk_sends_the_extension_headers(cluster, table):
    tables = pytest.importorskip("azure.data.tables")
    from azure.core.exceptions import HttpResponseError

    seen: dict[str, str] = {}

    def hook(response) -> None:
        seen.update(response.http_response.headers)

    with tables.TableClient.from_connection_string(cluster.connection_string, table.table_name) as t:
        t.create_entity({"PartitionKey": "p", "RowKey": "r", "stock": 1})
        t.update_entity({"PartitionKey": "p", "RowKey": "r"}, headers={
            "x-rangetable-condition": "stock ge 1", "x-rangetable-counters": '{"stock": -1}'}, raw_response_hook=hook)
        assert json.loads(seen["x-rangetable-counters"]) == {"stock": 0}
        with pytest.raises(HttpResponseError) as e:
            t.update_entity({"PartitionKey": "p", "RowKey": "r"}, headers={
                "x-rangetable-condition": "stock ge 1", "x-rangetable-counters": '{"stock": -1}'})
        assert e.value.status_code == 412 and e.value.error_code == "ConditionCheckFailed"
        assert "stock ge 1" in str(e.value)
        with pytest.raises(tables.TableTransactionError) as te:
            t.submit_transaction([
                ("upsert", {"PartitionKey": "p", "RowKey": "s"}, {"headers": {"x-rangetable-counters": '{"n": 1}'}}),
                ("update", {"PartitionKey": "p", "RowKey": "r"}, {"headers": {"x-rangetable-condition": "stock ge 1"}}),
            ])
        assert te.value.index == 1 and te.value.error_code == "ConditionCheckFailed"
        with pytest.raises(HttpResponseError):
            t.get_entity("p", "s")  # nothing of the failed transaction was written
        t.submit_transaction([
            ("upsert", {"PartitionKey": "p", "RowKey": "s"}, {"headers": {"x-rangetable-counters": '{"n": 1}'}}),
            ("update", {"PartitionKey": "p", "RowKey": "r"}, {"headers": {"x-rangetable-condition": "stock eq 0"}}),
        ])
        assert t.get_entity("p", "s")["n"] == 1


def test_raw_headers_percent_encoding_errors_and_int64(cluster, table):
    raw = Raw(cluster.http)
    try:
        path = f"/{table.table_name}(PartitionKey='p',RowKey='r')"
        assert raw.request("PUT", path, {"name": "café", "qty": 1}).status == 204
        cond = quote("name eq 'café'", safe=" '")
        r = raw.request("MERGE", path, {}, headers={"x-rangetable-condition": cond, "If-Match": "*",
                                                    "x-rangetable-counters": '{"big@odata.type":"Edm.Int64","big":"7"}'})
        assert r.status == 204, r
        assert json.loads(r.headers["x-rangetable-counters"]) == {"big@odata.type": "Edm.Int64", "big": "7"}
        r = raw.request("MERGE", path, {}, headers={"x-rangetable-condition": "qty ge"})
        assert (r.status, r.code) == (400, "InvalidInput")
        r = raw.request("MERGE", path, {}, headers={"x-rangetable-counters": "[1]"})
        assert (r.status, r.code) == (400, "InvalidHeaderValue")
        r = raw.request("MERGE", path, {}, headers={"x-rangetable-counters": '{"qty": 2147483647}'})
        assert (r.status, r.code) == (400, "CounterOverflow")
        retried = {"x-rangetable-counters": '{"qty": 5}', "x-ms-client-request-id": str(uuid.uuid4())}
        first = raw.request("MERGE", path, {}, headers=retried)
        again = raw.request("MERGE", path, {}, headers=retried)  # the SDK's retry keeps its client request id
        assert first.headers["etag"] == again.headers["etag"] and again.headers["x-rangetable-counters"] == '{"qty":6}'
        assert raw.get(path).json()["qty"] == 6
        assert raw.request("MERGE", path, {}, headers={"x-rangetable-counters": '{"qty": -5}'}).status == 204
        once = {"x-rangetable-condition": "qty eq 1", "x-rangetable-counters": '{"qty": 1}',
                "x-ms-client-request-id": str(uuid.uuid4())}
        assert raw.request("MERGE", path, {}, headers=once).status == 204
        assert raw.request("MERGE", path, {}, headers=once).status == 204  # not 412: the first try's answer
        assert raw.request("MERGE", path, {}, headers={"x-rangetable-counters": '{"qty": -1}'}).status == 204
        r = raw.request("DELETE", path, headers={"If-Match": "*", "x-rangetable-expect": "absent"})
        assert (r.status, r.code) == (412, "ConditionCheckFailed")
        assert raw.get(path).json()["qty"] == 1
    finally:
        raw.close()


# --- CLI ------------------------------------------------------------------------------------------------


def test_cli_if_expect_add(cluster, table):
    def run(*args: str):
        return CliRunner().invoke(main, [*args, "--data-dir", cluster.data_dir])

    t = table.table_name
    key = '{"PartitionKey":"p","RowKey":"r"}'
    assert run("entity", "put", t, '{"PartitionKey":"p","RowKey":"r","stock":1}').exit_code == 0
    out = run("entity", "merge", t, key, "--if", "stock ge 1", "--add", "stock=-1", "--add", "sold=1L", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["counters"] == {"stock": 0, "sold@odata.type": "Edm.Int64", "sold": "1"}
    out = run("entity", "merge", t, key, "--if", "stock ge 1", "--add", "stock=-1")
    assert out.exit_code != 0 and "ConditionCheckFailed" in out.output
    out = run("entity", "put", t, key, "--expect", "absent")
    assert out.exit_code != 0 and "ConditionCheckFailed" in out.output
    assert run("entity", "delete", t, "p", "r", "--if", "stock eq 1").exit_code != 0
    assert run("entity", "delete", t, "p", "r", "--if", "stock eq 0").exit_code == 0


def test_cli_table_and_entity_commands_answer_json(cluster):
    def run(*args: str) -> dict:
        out = CliRunner().invoke(main, [*args, "--data-dir", cluster.data_dir, "--json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    assert run("table", "create", "JsonOut", "--ttl", "1d") == {"table": "JsonOut", "created": True, "ttl": "1d"}
    run("entity", "put", "JsonOut", '{"PartitionKey":"p","RowKey":"r","n":1}')
    assert run("entity", "get", "JsonOut", "p", "r")["n"] == 1
    assert run("entity", "delete", "JsonOut", "p", "r") == {"table": "JsonOut", "PartitionKey": "p", "RowKey": "r",
                                                            "deleted": True}
    frame = run("top", "--once")
    assert [s["id"] for s in frame["servers"]] == ["ps-1", "ps-2", "ps-3"]
    assert run("table", "delete", "JsonOut") == {"table": "JsonOut", "deleted": True}
