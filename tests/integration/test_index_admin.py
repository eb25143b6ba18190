"""Declaring secondary indexes on `rangetable up`'s defaults (3 servers, 3 replicas): created by the CLI, the
native client and the REST extension, listed ``building``, their entries table in the map with 3 replicas
but never in a table list nor reachable by a user's data request, dropped alone or with their table, and
Azure's error codes for bad names, properties and missing things."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import main
from rangetable import TableServiceClient
from rangetable.client.models import ResourceExistsError, ResourceNotFoundError
from rangetable.errors import TableError
from tests.cluster import Cluster
from tests.rest_helpers import Raw


@pytest.fixture(scope="module")
def cluster(cluster_factory: Any) -> Cluster:
    return cluster_factory(extra=["--no-dashboard"])


def _cli(c: Cluster, *args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--data-dir", c.data_dir])


def _ok(c: Cluster, *args: str) -> Any:
    run = _cli(c, *args, "--json")
    assert run.exit_code == 0, run.output
    return json.loads(run.output)


def test_create_list_drop_through_the_cli_and_the_native_client(cluster: Cluster) -> None:
    svc = TableServiceClient.from_cluster(cluster.data_dir)
    svc.create_table("Orders")
    made = _ok(cluster, "table", "index", "create", "Orders", "ByCustomer", "--on", "customer,day",
               "--include", "total")
    assert made == {"table": "Orders", "name": "ByCustomer", "on": ["customer", "day"], "include": ["total"],
                    "state": "building"}
    t = svc.get_table_client("Orders")
    assert t.create_index("ByDay", "day", include="all")["include"] == "all"
    listed = _ok(cluster, "table", "index", "list", "orders")
    assert [d["name"] for d in listed] == ["ByCustomer", "ByDay"]  # building, or ready once the applier caught up
    assert {d["state"] for d in listed} <= {"building", "ready"}
    assert t.list_indexes() == listed
    text = _cli(cluster, "table", "index", "list", "Orders")
    assert text.exit_code == 0 and text.output.split("\n")[0].split() == ["name", "on", "include", "state"]
    assert "ByCustomer  customer,day  total" in text.output
    settings = t.get_table_settings()
    assert settings["feed"] == "on" and settings["feed_before_images"] is True
    assert [d["name"] for d in settings["indexes"]] == ["ByCustomer", "ByDay"]

    ranges = _ok(cluster, "ranges", "Orders$ByCustomer")
    (rec,) = ranges["ranges"]
    assert len(rec["replicas"]) == 3 and rec["health"]["copies"] == "3/3"
    assert [d["name"] for d in ranges["indexes"]["orders"]] == ["ByCustomer", "ByDay"]
    assert "Orders$ByCustomer" not in [x.name for x in svc.list_tables()]
    assert "Orders$ByCustomer" not in _ok(cluster, "table", "list")
    with pytest.raises(TableError) as err:  # a user's data request never reaches an index's entries
        svc.get_table_client("Orders$ByCustomer").create_entity({"PartitionKey": "p", "RowKey": "r"})
    assert err.value.error_code == "TableNotFound"
    with pytest.raises(TableError) as err:
        list(svc.get_table_client("Orders$ByCustomer").list_entities())
    assert err.value.error_code == "TableNotFound"
    with pytest.raises(TableError) as err:
        t.set_table_settings(feed_before_images="off")
    assert err.value.error_code == "InvalidInput" and "ByCustomer" in err.value.message

    with pytest.raises(ResourceExistsError) as exists:
        t.create_index("bycustomer", "x")
    assert exists.value.error_code == "IndexAlreadyExists"
    assert _ok(cluster, "table", "index", "drop", "Orders", "ByCustomer")["dropped"] is True
    assert [d["name"] for d in t.list_indexes()] == ["ByDay"]
    assert _ok(cluster, "ranges", "Orders$ByCustomer")["ranges"] == []
    with pytest.raises(ResourceNotFoundError) as missing:
        t.drop_index("ByCustomer")
    assert missing.value.error_code == "IndexNotFound"

    t.delete_table()  # its indexes go with it
    after = _ok(cluster, "ranges")
    assert "orders" not in after["indexes"] and not [r for r in after["ranges"] if r["table"].lower().startswith("orders")]
    svc.create_table("Orders")
    assert svc.get_table_client("Orders").list_indexes() == []


def test_cli_refusals(cluster: Cluster) -> None:
    TableServiceClient.from_cluster(cluster.data_dir).create_table("Refused")
    bad_name = _cli(cluster, "table", "index", "create", "Refused", "9x", "--on", "a")
    assert bad_name.exit_code == 2 and "Index name" in bad_name.output
    reserved = _cli(cluster, "table", "index", "create", "Refused", "ix", "--on", "RowKey")
    assert reserved.exit_code == 2 and "RowKey" in reserved.output
    missing = _cli(cluster, "table", "index", "create", "NoSuchTable", "ix", "--on", "a")
    assert missing.exit_code != 0 and "TableNotFound" in missing.output
    gone = _cli(cluster, "table", "index", "drop", "Refused", "ix")
    assert gone.exit_code != 0 and "IndexNotFound" in gone.output


def test_the_rest_extension(cluster: Cluster) -> None:
    raw = Raw(cluster.http)
    try:
        assert raw.post("/Tables", {"TableName": "RestIx"}).status == 201
        made = raw.request("PUT", "/RestIx/$indexes/ByColor", {"on": ["color"], "include": "all"})
        assert made.status == 201, made
        assert made.json() == {"table": "RestIx", "name": "ByColor", "on": ["color"], "include": "all",
                               "state": "building"}
        again = raw.request("PUT", "/RestIx/$indexes/bycolor", {"on": ["color"]})
        assert (again.status, again.code) == (409, "IndexAlreadyExists")
        assert again.json()["odata.error"]["code"] == "IndexAlreadyExists"
        listed = raw.get("/RestIx/$indexes")
        assert listed.status == 200 and [d["name"] for d in listed.json()["value"]] == ["ByColor"]
        cases: list[tuple[str, dict[str, Any], int, str]] = [
            ("/RestIx/$indexes/9bad", {"on": ["a"]}, 400, "InvalidResourceName"),
            ("/RestIx/$indexes/ix", {"on": ["a-b"]}, 400, "PropertyNameInvalid"),
            ("/RestIx/$indexes/ix", {"on": ["a", "a"]}, 400, "DuplicatePropertiesSpecified"),
            ("/RestIx/$indexes/ix", {"on": []}, 400, "InvalidInput"),
            ("/RestIx/$indexes/ix", {"on": ["PartitionKey"]}, 400, "InvalidInput"),
            ("/NoSuch/$indexes/ix", {"on": ["a"]}, 404, "TableNotFound"),
        ]
        for path, body, status, code in cases:
            r = raw.request("PUT", path, body)
            assert (r.status, r.code) == (status, code), (path, body, r)
        assert "RestIx$ByColor" not in [x["TableName"] for x in raw.get("/Tables").json()["value"]]
        assert raw.get("/RestIx$ByColor()").status in (400, 404)
        unsigned = raw.request("DELETE", "/RestIx/$indexes/ByColor", sign_as=None)
        assert unsigned.status == 403
        dropped = raw.request("DELETE", "/RestIx/$indexes/ByColor")
        assert dropped.status == 204, dropped
        nothing = raw.request("DELETE", "/RestIx/$indexes/ByColor")
        assert (nothing.status, nothing.code) == (404, "IndexNotFound")
        assert raw.get("/RestIx/$indexes").json() == {"value": []}
    finally:
        raw.close()
