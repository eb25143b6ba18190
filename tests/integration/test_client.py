"""Integration tests of the native clients against a real cluster (``tests/cluster.py``): tables, entities,
queries, SDK compatibility (transactions, retries and threads: ``test_client_transactions.py``).

Every test runs on both clients, the blocking one and ``rangetable.aio`` (the ``clients`` fixture of
``client_fixtures.py``). One cluster (coordinator, two partition servers, a frontend) is started for the
module; each test uses its own table.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime

import pytest

from rangetable import (
    EdmType,
    EntityProperty,
    MatchConditions,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    TableClient,
    TableEntity,
    TableError,
    TableServiceClient,
    UpdateMode,
)
from rangetable.edm import datetime_to_ticks, ticks_from_etag
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


# --- tables ------------------------------------------------------------------------------------


def test_create_exists_delete_table(service: TableServiceClient) -> None:
    name = f"tbl{uuid.uuid4().hex[:8]}"
    t = service.create_table(name)
    assert type(getattr(t, "_target", t)).__name__ == "TableClient" and t.table_name == name
    with pytest.raises(ResourceExistsError) as info:
        service.create_table(name)
    assert (info.value.error_code, info.value.status_code) == ("TableAlreadyExists", 409)
    assert service.create_table_if_not_exists(name).table_name == name
    assert name in {ti.name for ti in service.list_tables()}
    service.delete_table(name)
    service.delete_table(name)  # missing: no error, like the SDK
    assert name not in {ti.name for ti in service.list_tables()}
    with pytest.raises(ResourceNotFoundError):
        t.get_entity("p", "r")


def test_list_tables_paging_and_query(service: TableServiceClient) -> None:
    prefix = f"pg{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}{i}" for i in range(5)]
    for n in names:
        service.create_table(n)
    try:
        flt = f"TableName ge '{prefix}' and TableName lt '{prefix}~'"
        pages = service.list_tables(flt, results_per_page=2).by_page()
        seen: list[list[str]] = []
        for page in pages:
            seen.append([t.name for t in page])
        assert [n for p in seen for n in p] == names
        assert all(len(p) <= 2 for p in seen) and len(seen) >= 3
        first = service.list_tables(flt, results_per_page=2).by_page()
        next(first)
        token = first.continuation_token
        assert token
        rest = [t.name for p in service.list_tables(flt, results_per_page=2).by_page(token) for t in p]
        assert rest == names[2:]
        found = [t.name for t in service.query_tables("TableName eq @n", parameters={"n": names[3]})]
        assert found == [names[3]]
    finally:
        for n in names:
            service.delete_table(n)


def test_table_client_constructed_directly(cluster, clients: Clients) -> None:
    name = f"direct{uuid.uuid4().hex[:8]}"
    with clients.TableClient(cluster.native, name) as t:
        assert t.create_table().name == name
        t.create_entity({"PartitionKey": "a", "RowKey": "b"})
        assert t.get_entity("a", "b")["RowKey"] == "b"
        t.delete_table()
        t.delete_table()


def test_from_cluster(cluster, clients: Clients) -> None:
    with clients.service_from_cluster(cluster.data_dir) as svc:
        assert svc.endpoint == cluster.native
        list(svc.list_tables())


# --- entities ----------------------------------------------------------------------------------


def test_create_get_and_metadata(table: TableClient) -> None:
    md = table.create_entity({"PartitionKey": "p", "RowKey": "r", "Name": "x", "N": 1})
    assert md["etag"].startswith("W/\"datetime'")
    assert ticks_from_etag(md["etag"]) == md["timestamp"].ticks
    e = table.get_entity("p", "r")
    assert isinstance(e, TableEntity)
    assert e == {"PartitionKey": "p", "RowKey": "r", "Name": "x", "N": 1}
    assert e.metadata["etag"] == md["etag"]
    assert e.metadata["timestamp"] == md["timestamp"]
    with pytest.raises(ResourceExistsError) as info:
        table.create_entity({"PartitionKey": "p", "RowKey": "r"})
    assert (info.value.error_code, info.value.status_code) == ("EntityAlreadyExists", 409)
    with pytest.raises(ResourceNotFoundError) as info:
        table.get_entity("p", "missing")
    assert info.value.status_code == 404
    sel = table.get_entity("p", "r", select=["Name", "Nope"])
    assert sel == {"Name": "x", "Nope": None}


def test_update_merge_and_replace(table: TableClient) -> None:
    table.create_entity({"PartitionKey": "p", "RowKey": "r", "A": 1, "B": "b"})
    table.update_entity({"PartitionKey": "p", "RowKey": "r", "A": 2})  # MERGE by default
    assert table.get_entity("p", "r") == {"PartitionKey": "p", "RowKey": "r", "A": 2, "B": "b"}
    table.update_entity({"PartitionKey": "p", "RowKey": "r", "C": True}, mode=UpdateMode.REPLACE)
    assert table.get_entity("p", "r") == {"PartitionKey": "p", "RowKey": "r", "C": True}
    with pytest.raises(ResourceNotFoundError):
        table.update_entity({"PartitionKey": "p", "RowKey": "nobody", "A": 1})


def test_etag_conditions(table: TableClient) -> None:
    table.create_entity({"PartitionKey": "p", "RowKey": "r", "V": 1})
    old = table.get_entity("p", "r")
    md = table.update_entity(
        {"PartitionKey": "p", "RowKey": "r", "V": 2},
        etag=old.metadata["etag"],
        match_condition=MatchConditions.IfNotModified,
    )
    assert md["etag"] != old.metadata["etag"]
    old["V"] = 3
    with pytest.raises(ResourceModifiedError) as info:  # the entity's own (stale) etag is used
        table.update_entity(old, mode=UpdateMode.REPLACE, match_condition=MatchConditions.IfNotModified)
    assert (info.value.error_code, info.value.status_code) == ("UpdateConditionNotSatisfied", 412)
    with pytest.raises(ResourceModifiedError):
        table.delete_entity("p", "r", etag=old.metadata["etag"], match_condition=MatchConditions.IfNotModified)
    current = table.get_entity("p", "r")
    assert current["V"] == 2
    table.delete_entity(current, match_condition=MatchConditions.IfNotModified)
    with pytest.raises(ResourceNotFoundError):
        table.get_entity("p", "r")


def test_upsert(table: TableClient) -> None:
    key = {"PartitionKey": "p", "RowKey": "r"}
    table.upsert_entity({**key, "A": 1, "B": 2})  # inserts
    table.upsert_entity({**key, "A": 10})  # merges
    assert table.get_entity("p", "r") == {**key, "A": 10, "B": 2}
    table.upsert_entity({**key, "C": 3}, mode=UpdateMode.REPLACE)
    assert table.get_entity("p", "r") == {**key, "C": 3}
    table.upsert_entity({"PartitionKey": "p", "RowKey": "new", "Z": 0}, mode=UpdateMode.REPLACE)
    assert table.get_entity("p", "new")["Z"] == 0


def test_delete_forms(table: TableClient) -> None:
    for rk in "abc":
        table.create_entity({"PartitionKey": "p", "RowKey": rk})
    table.delete_entity("p", "a")
    table.delete_entity(partition_key="p", row_key="b")
    table.delete_entity({"PartitionKey": "p", "RowKey": "c"})
    table.delete_entity("p", "never-existed")  # no error, like the SDK
    assert list(table.list_entities()) == []


def test_edm_round_trip(table: TableClient) -> None:
    when = datetime(2023, 7, 8, 9, 10, 11, 123456, tzinfo=UTC)
    gid = uuid.uuid4()
    entity = {
        "PartitionKey": "types",
        "RowKey": "1",
        "Str": "héllo ✓ 𝄞",
        "Empty": "",
        "I32": 2**31 - 1,
        "I32Neg": -(2**31),
        "I64Small": EntityProperty(5, EdmType.INT64),
        "I64Big": 2**62,
        "Dbl": 1.25,
        "NaN": math.nan,
        "Inf": -math.inf,
        "DblFromInt": EntityProperty(3, EdmType.DOUBLE),
        "T": True,
        "F": False,
        "When": when,
        "Precise": EntityProperty("2020-02-03T04:05:06.1234567Z", EdmType.DATETIME),
        "Guid": gid,
        "Bin": b"\x00\xffbinary",
        "EmptyBin": b"",
        "Skipped": None,
    }
    table.create_entity(entity)
    e = table.get_entity("types", "1")
    assert e["Str"] == "héllo ✓ 𝄞" and e["Empty"] == ""
    assert e["I32"] == 2**31 - 1 and type(e["I32"]) is int
    assert e["I32Neg"] == -(2**31)
    assert e["I64Small"] == EntityProperty(5, EdmType.INT64)
    assert e["I64Big"] == EntityProperty(2**62, EdmType.INT64)
    assert e["Dbl"] == 1.25 and isinstance(e["Dbl"], float)
    assert math.isnan(e["NaN"]) and e["Inf"] == -math.inf
    assert e["DblFromInt"] == 3.0 and isinstance(e["DblFromInt"], float)
    assert e["T"] is True and e["F"] is False
    assert e["When"] == when and e["When"].tzinfo is not None
    assert e["Precise"].ticks == datetime_to_ticks(datetime(2020, 2, 3, 4, 5, 6, tzinfo=UTC)) + 1234567
    assert e["Precise"].tables_service_value == "2020-02-03T04:05:06.1234567Z"
    assert e["Guid"] == gid
    assert e["Bin"] == b"\x00\xffbinary" and e["EmptyBin"] == b""
    assert "Skipped" not in e
    # writing the entity back keeps every type, including the 100 ns datetime
    table.update_entity(e, mode=UpdateMode.REPLACE)
    again = table.get_entity("types", "1")
    assert again["Precise"].ticks == e["Precise"].ticks
    assert again["I64Small"] == EntityProperty(5, EdmType.INT64)
    # filters see the types too
    assert [x["RowKey"] for x in table.query_entities("I64Small eq 5L")] == ["1"]
    assert [x["RowKey"] for x in table.query_entities("Guid eq @g", parameters={"g": gid})] == ["1"]
    assert [x["RowKey"] for x in table.query_entities("Bin eq @b", parameters={"b": b"\x00\xffbinary"})] == ["1"]


def test_invalid_entities(table: TableClient) -> None:
    with pytest.raises(TableError) as info:
        table.create_entity({"RowKey": "r"})
    assert (info.value.error_code, info.value.status_code) == ("PropertiesNeedValue", 400)
    with pytest.raises(TableError) as info:
        table.create_entity({"PartitionKey": "a/b", "RowKey": "r"})
    assert info.value.status_code == 400


# --- queries -----------------------------------------------------------------------------------


def _fill(table: TableClient, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        ops = [
            ("create", {"PartitionKey": f"p{p:02d}", "RowKey": f"r{r:04d}", "N": r, "Even": r % 2 == 0})
            for r in range(per_partition)
        ]
        for i in range(0, len(ops), 100):
            table.submit_transaction(ops[i : i + 100])


def test_query_filter_select_parameters(table: TableClient) -> None:
    _fill(table, 3, 20)
    got = list(table.query_entities("PartitionKey eq @pk and N lt @n", parameters={"pk": "p01", "n": 5}))
    assert [e["RowKey"] for e in got] == [f"r{r:04d}" for r in range(5)]
    assert all(e["PartitionKey"] == "p01" for e in got)
    sel = list(table.query_entities("N eq 7", select=["N", "RowKey"]))
    assert sel == [{"N": 7, "RowKey": "r0007"}] * 3
    sel2 = list(table.query_entities("N eq 7", select="N"))
    assert sel2 == [{"N": 7}] * 3
    assert list(table.query_entities("Even eq @e and N ge 18", parameters={"e": True})) != []
    assert len(list(table.query_entities("Even eq true"))) == 30


def test_query_pages_and_continuation(table: TableClient) -> None:
    _fill(table, 2, 25)
    pager = table.query_entities("N ge 0", results_per_page=10).by_page()
    sizes, keys, tokens = [], [], []
    for page in pager:
        items = list(page)
        sizes.append(len(items))
        keys += [(e["PartitionKey"], e["RowKey"]) for e in items]
        tokens.append(pager.continuation_token)
    assert all(s <= 10 for s in sizes)
    assert keys == sorted(keys) and len(keys) == 50
    assert tokens[-1] is None and all(t for t in tokens[:-1])
    # resume from the token after the first page
    first = table.query_entities("N ge 0", results_per_page=10).by_page()
    head = [(e["PartitionKey"], e["RowKey"]) for e in next(first)]
    token = first.continuation_token
    assert set(token) == {"PartitionKey", "RowKey"}
    resumed = table.query_entities("N ge 0", results_per_page=10).by_page(continuation_token=token)
    tail = [(e["PartitionKey"], e["RowKey"]) for p in resumed for e in p]
    assert head + tail == keys


def test_list_entities_over_1000(table: TableClient) -> None:
    _fill(table, 4, 300)  # 1200 entities
    pager = table.list_entities().by_page()
    pages = [list(p) for p in pager]
    assert len(pages) >= 2
    assert all(len(p) <= 1000 for p in pages)
    keys = [(e["PartitionKey"], e["RowKey"]) for p in pages for e in p]
    assert len(keys) == 1200 == len(set(keys))
    assert keys == sorted(keys)
    assert sum(1 for _ in table.list_entities(select=["N"], results_per_page=500)) == 1200


# --- SDK compatibility -------------------------------------------------------------------------


def sdk_style_workflow(service, table_name: str, UpdateMode, EntityProperty, EdmType, ResourceExistsError):
    """Code as written against azure-data-tables; only the client construction differs."""
    table = service.create_table_if_not_exists(table_name=table_name)
    try:
        table.create_entity(entity={"PartitionKey": "color", "RowKey": "brand", "Price": 5.0, "Count": 3})
        try:
            table.create_entity({"PartitionKey": "color", "RowKey": "brand"})
        except ResourceExistsError:
            pass
        entity = table.get_entity(partition_key="color", row_key="brand")
        entity["Count"] = EntityProperty(2**40, EdmType.INT64)
        table.update_entity(mode=UpdateMode.REPLACE, entity=entity)
        table.upsert_entity(mode=UpdateMode.MERGE, entity={"PartitionKey": "color", "RowKey": "other", "Price": 1.0})
        cheap = [e["RowKey"] for e in table.query_entities(query_filter="Price lt @p", parameters={"p": 3.0})]
        all_rows = [e["RowKey"] for e in table.list_entities(results_per_page=1)]
        names = [t.name for t in service.list_tables()]
        table.submit_transaction([("delete", {"PartitionKey": "color", "RowKey": "other"})])
        table.delete_entity(partition_key="color", row_key="brand")
        return cheap, all_rows, table_name in names, table.get_entity.__name__
    finally:
        service.delete_table(table_name=table_name)


def test_sdk_snippet_runs_unchanged(cluster, clients: Clients) -> None:
    import rangetable as tables  # instead of: import azure.data.tables as tables

    service = clients.TableServiceClient(cluster.native)  # instead of: .from_connection_string(...)
    with service:
        result = sdk_style_workflow(
            service,
            f"sdk{uuid.uuid4().hex[:8]}",
            tables.UpdateMode,
            tables.EntityProperty,
            tables.EdmType,
            tables.ResourceExistsError,
        )
    assert result == (["other"], ["brand", "other"], True, "get_entity")


def test_errors_carry_codes(table: TableClient) -> None:
    with pytest.raises(TableError) as info:
        table.get_entity("p", "none")
    err = info.value
    assert isinstance(err, ResourceNotFoundError)
    assert err.error_code in ("ResourceNotFound", "EntityNotFound") and err.status_code == 404
    assert not err.retriable
    with pytest.raises(TableError) as info:
        list(table.query_entities("this is not a filter"))
    assert info.value.status_code == 400
