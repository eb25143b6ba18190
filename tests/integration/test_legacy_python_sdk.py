"""The legacy Python SDK (``azure-cosmosdb-table`` 1.0.6, pinned in requirements.lock) runs the 25
reference cases against a real cluster, twice: with a ``TableEndpoint`` connection string (path-style
URLs, the form whose batches used to fail) and in emulator mode (``is_emulated``: what
``UseDevelopmentStorage=true`` gives, the dev account on the cluster's port).

Each case uses what this SDK can express; what it cannot send (Prefer headers, metadata levels,
Shared Key Lite) is left to the other clients' runs of the same case.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest

from tests.cluster import ClusterFactory
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY

pytest.importorskip("azure.cosmosdb.table")

from azure.common import AzureConflictHttpError, AzureHttpError, AzureMissingResourceHttpError  # noqa: E402
from azure.cosmosdb.table.models import EdmType, Entity, EntityProperty, TablePermissions  # noqa: E402
from azure.cosmosdb.table.tablebatch import TableBatch  # noqa: E402
from azure.cosmosdb.table.tableservice import TableService  # noqa: E402

MODES = ("table_endpoint", "emulator")
_n = itertools.count()


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


def service(cluster, mode: str, key: str = DEV_KEY, sas: str | None = None) -> TableService:
    """The SDK in ``mode``: a TableEndpoint connection string or the emulator (dev account, our port)."""
    if mode == "emulator":  # UseDevelopmentStorage with the cluster's port (the SDK adds /devstoreaccount1)
        conn = f"UseDevelopmentStorage=true;TableEndpoint={urlsplit(cluster.http).netloc};"
        svc = TableService(connection_string=conn + (f"SharedAccessSignature={sas};" if sas is not None else ""))
        if key != DEV_KEY:  # the emulator mode signs with the well-known dev key: swap it for this case
            svc.authentication.account_key = key
        return svc
    conn = (f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};TableEndpoint={cluster.http};"
            f"TableSecondaryEndpoint={cluster.http}-secondary;")
    conn += f"SharedAccessSignature={sas};" if sas is not None else f"AccountKey={key};"
    return TableService(connection_string=conn)


@pytest.fixture(params=MODES)
def svc(request, cluster) -> TableService:
    return service(cluster, request.param)


@pytest.fixture
def table(svc) -> Iterator[str]:
    name = f"lp{uuid.uuid4().hex[:8]}{next(_n)}"
    assert svc.create_table(name)
    yield name
    svc.delete_table(name)


def fails(fn: Callable[[], object], status: int, code: str | None = None) -> AzureHttpError:
    with pytest.raises(AzureHttpError) as info:
        fn()
    assert info.value.status_code == status, info.value
    if code is not None:
        assert code in str(info.value), info.value
    return info.value


def test_c01_create_list_delete_table(svc):
    name = f"lp{uuid.uuid4().hex[:8]}"
    assert svc.create_table(name) is True
    assert name in [t.name for t in svc.list_tables()]
    assert svc.exists(name)
    svc.delete_table(name)
    assert name not in [t.name for t in svc.list_tables()]
    assert svc.delete_table(name) is False  # 404, swallowed by fail_not_exist=False
    fails(lambda: svc.insert_entity(name, {"PartitionKey": "p", "RowKey": "r"}), 404, "TableNotFound")


def test_c02_table_name_validation(svc):
    for bad in ("1abc", "ab", "a" * 64, "a-b", "tables"):
        fails(lambda bad=bad: svc.create_table(bad, fail_on_exist=True), 400)
    name = f"Lp{uuid.uuid4().hex[:8]}"
    svc.create_table(name)
    try:
        assert svc.create_table(name.lower()) is False
        with pytest.raises(AzureConflictHttpError):
            svc.create_table(name.lower(), fail_on_exist=True)
    finally:
        svc.delete_table(name)


def test_c03_insert_answers(svc, table):
    etag = svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "A": 1})
    assert etag.startswith('W/"datetime')


def test_c04_duplicate_insert_and_missing_table(svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r"})
    with pytest.raises(AzureConflictHttpError):
        svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r"})
    fails(lambda: svc.insert_entity("nosuchtable1", {"PartitionKey": "p", "RowKey": "r"}), 404, "TableNotFound")


def test_c05_type_round_trip(svc, table):
    when = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)  # this SDK writes whole seconds
    gid = uuid.UUID("3f2a8f7e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "s": "text", "i": 7, "f": 2.5,
                              "whole": EntityProperty(EdmType.DOUBLE, 5.0), "b": True,
                              "big": EntityProperty(EdmType.INT64, 2**40), "dt": when, "g": EntityProperty(EdmType.GUID, gid),
                              "bin": EntityProperty(EdmType.BINARY, b"\x00\xffabc")})
    e = svc.get_entity(table, "p", "r")
    assert e.s == "text" and e.i == 7 and e.f == 2.5 and e.b is True
    assert e.whole == 5.0 and isinstance(e.whole, float)
    assert e.big == 2**40  # an Int64 comes back as int (the annotation decides the type, not the value)
    assert e.dt == when and e.g.value == str(gid) and e.bin.value == b"\x00\xffabc"  # a Guid comes back as its text


def test_c06_metadata(svc, table):
    etag = svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r"})
    e = svc.get_entity(table, "p", "r")
    assert e.etag == etag and isinstance(e.Timestamp, datetime)
    assert all(x.etag and isinstance(x.Timestamp, datetime) for x in svc.query_entities(table))


def test_c07_lenient_typed_input(svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "i": EntityProperty(EdmType.INT32, "12345"),
                              "b": EntityProperty(EdmType.BOOLEAN, "False"), "none": None})
    e = svc.get_entity(table, "p", "r")
    assert e.i.value == 12345 and e.i.type == EdmType.INT32 and "none" not in e
    assert e.b == "False"  # this SDK sends a Boolean property unannotated: a String, on Azure too
    with pytest.raises(TypeError, match="too large"):  # the SDK refuses an out-of-range Int64 itself
        svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "x",
                                  "n": EntityProperty(EdmType.INT64, "9223372036854775808")})


def test_c08_key_handling(svc, table):
    for pk, rk in (("o'brien", "a b"), ("@*$!%", "你好"), ("p", "")):
        svc.insert_entity(table, {"PartitionKey": pk, "RowKey": rk, "v": 1})
        assert svc.get_entity(table, pk, rk).v == 1
        svc.merge_entity(table, {"PartitionKey": pk, "RowKey": rk, "w": 2})
        svc.delete_entity(table, pk, rk)
    for bad in ("a/b", "a#b", "a?b", "a\\b"):
        fails(lambda bad=bad: svc.insert_entity(table, {"PartitionKey": bad, "RowKey": "r"}), 400)


def test_c09_property_limits(svc, table):
    with pytest.raises(ValueError, match="more properties than allowed"):  # the SDK refuses it itself
        svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", **{f"p{i}": i for i in range(253)}})
    with pytest.raises(ValueError, match="maximum allowed length"):  # refused by the SDK too
        svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "n" * 256: 1})
    fails(lambda: svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "a-b": 1}), 400, "PropertyNameInvalid")
    fails(lambda: svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "s": "x" * 32769}), 400,
          "PropertyValueTooLarge")
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "ETag": 1, "etag2": 2})
    assert svc.get_entity(table, "p", "r").ETag == 1


def test_c10_replace_vs_merge(svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "a": 1, "b": 2})
    svc.merge_entity(table, {"PartitionKey": "p", "RowKey": "r", "c": 3})
    e = svc.get_entity(table, "p", "r")
    assert (e.a, e.b, e.c) == (1, 2, 3)
    svc.update_entity(table, {"PartitionKey": "p", "RowKey": "r", "d": 4})
    e = svc.get_entity(table, "p", "r")
    assert e.d == 4 and "a" not in e and "c" not in e


def test_c11_upserts(svc, table):
    svc.insert_or_replace_entity(table, {"PartitionKey": "p", "RowKey": "r", "a": 1})
    svc.insert_or_merge_entity(table, {"PartitionKey": "p", "RowKey": "r", "b": 2})
    e = svc.get_entity(table, "p", "r")
    assert (e.a, e.b) == (1, 2)
    svc.insert_or_replace_entity(table, {"PartitionKey": "p", "RowKey": "r", "c": 3})
    assert "a" not in svc.get_entity(table, "p", "r")


def test_c12_optimistic_concurrency(svc, table):
    old = svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "a": 1})
    new = svc.update_entity(table, {"PartitionKey": "p", "RowKey": "r", "a": 2}, if_match=old)
    assert new != old
    fails(lambda: svc.merge_entity(table, {"PartitionKey": "p", "RowKey": "r", "a": 3}, if_match=old), 412,
          "UpdateConditionNotSatisfied")
    fails(lambda: svc.delete_entity(table, "p", "r", if_match='W/"wrong"'), 412, "UpdateConditionNotSatisfied")
    fails(lambda: svc.update_entity(table, {"PartitionKey": "p", "RowKey": "none"}), 404, "ResourceNotFound")
    svc.delete_entity(table, "p", "r", if_match=new)


def test_c13_get_entity(svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "a": 1})
    assert svc.get_entity(table, "p", "r").a == 1
    with pytest.raises(AzureMissingResourceHttpError):
        svc.get_entity(table, "p", "none")


def test_c14_select(svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r", "a": 1, "b": 2})
    e = svc.get_entity(table, "p", "r", select="a,zz")
    assert e.a == 1 and "b" not in e
    rows = list(svc.query_entities(table, select="b"))
    assert rows[0].b == 2 and "a" not in rows[0]


def test_c15_filter_literals(svc, table):
    when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    gid = uuid.UUID(int=5)
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "1", "s": "it's", "i": 5, "l": EntityProperty(
        EdmType.INT64, 2**40), "d": 1.5, "b": True, "t": when, "g": EntityProperty(EdmType.GUID, gid),
        "x": EntityProperty(EdmType.BINARY, b"\x0a\xff")})
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "2", "s": "other", "i": 6})
    for flt, want in (("s eq 'it''s'", ["1"]), ("i gt 5", ["2"]), (f"l eq {2**40}L", ["1"]), ("d le 1.5", ["1"]),
                      ("b eq true", ["1"]), ("t eq datetime'2024-01-02T03:04:05Z'", ["1"]),
                      (f"g eq guid'{gid}'", ["1"]), ("x eq X'0aff'", ["1"]),
                      ("not (i eq 5) and (RowKey ge '1' or s eq 'zz')", ["2"]), ("RowKey ge '1' and RowKey lt '2'", ["1"])):
        assert sorted(e.RowKey for e in svc.query_entities(table, flt)) == want, flt


def test_c16_filter_semantics(svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "1", "n": EntityProperty(EdmType.INT64, 7)})
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "2"})
    assert [e.RowKey for e in svc.query_entities(table, "n ne 3")] == ["1"]  # missing: false even for ne
    assert [e.RowKey for e in svc.query_entities(table, "n eq 7")] == ["1"]  # Int32 literal, Int64 column
    assert list(svc.query_entities(table, "n eq '7'")) == []
    assert table in [t.name for t in svc.list_tables()]  # this SDK has no Query Tables filter


def test_c17_filter_errors(svc, table):
    fails(lambda: list(svc.query_entities(table, "startswith(RowKey, 'a')")), 501, "NotImplemented")
    fails(lambda: list(svc.query_entities(table, "RowKey eq")), 400, "InvalidInput")
    fails(lambda: list(svc.query_entities(table, "n eq 99999999999")), 400, "InvalidInput")


def test_c18_paging(svc, table):
    for p in range(3):
        batch = TableBatch()
        for r in range(100):
            batch.insert_entity({"PartitionKey": f"p{p}", "RowKey": f"{r:03d}"})
        svc.commit_batch(table, batch)
    page = svc.query_entities(table, num_results=130)
    first = list(page)
    assert len(first) == 130 and page.next_marker
    rest = list(svc.query_entities(table, marker=page.next_marker))
    keys = [(e.PartitionKey, e.RowKey) for e in first + rest]
    assert keys == sorted(keys) and len(set(keys)) == 300
    assert len(list(svc.query_entities(table))) == 300


def test_c19_batch_happy_path(svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "2", "a": 1})
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "3"})
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "4"})
    with svc.batch(table) as b:
        b.insert_entity({"PartitionKey": "p", "RowKey": "1"})
        b.insert_or_merge_entity({"PartitionKey": "p", "RowKey": "2", "b": 2})
        b.update_entity({"PartitionKey": "p", "RowKey": "3", "c": 3}, if_match="*")
        b.delete_entity("p", "4")
    assert sorted(e.RowKey for e in svc.query_entities(table)) == ["1", "2", "3"]
    e = svc.get_entity(table, "p", "2")
    assert (e.a, e.b) == (1, 2)


def test_c20_batch_atomicity(svc, table):
    from azure.cosmosdb.table.common.retry import no_retry

    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "dup"})
    # the SDK retries a failed batch (a 202 whose body says 409) 3 times, 15 s apart and more, as it does
    # against Azure (its retry policy calls every 2xx it could not use retryable): once is enough here
    svc.retry = no_retry
    batch = TableBatch()
    batch.insert_entity({"PartitionKey": "p", "RowKey": "new"})
    batch.insert_entity({"PartitionKey": "p", "RowKey": "dup"})
    fails(lambda: svc.commit_batch(table, batch), 409, "1:The specified entity already exists")
    with pytest.raises(AzureMissingResourceHttpError):
        svc.get_entity(table, "p", "new")


def test_c21_batch_limits(svc, table):
    from azure.cosmosdb.table.models import AzureBatchValidationError

    batch = TableBatch()
    batch.insert_entity({"PartitionKey": "p", "RowKey": "1"})
    with pytest.raises(AzureBatchValidationError):  # the SDK refuses a duplicate row itself
        batch.insert_entity({"PartitionKey": "p", "RowKey": "1"})
    with pytest.raises(AzureBatchValidationError):  # and a second partition
        batch.insert_entity({"PartitionKey": "q", "RowKey": "1"})
    batch = TableBatch()
    for i in range(100):
        batch.insert_entity({"PartitionKey": "p", "RowKey": str(i)})
    with pytest.raises(AzureBatchValidationError):  # the SDK refuses the 101st itself
        batch.insert_entity({"PartitionKey": "p", "RowKey": "100"})
    svc.commit_batch(table, batch)


def test_c22_shared_key(request, cluster, svc, table):
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r"})
    wrong = "A" * 86 + "=="
    mode = request.node.callspec.params["svc"]
    fails(lambda: service(cluster, mode, key=wrong).get_entity(table, "p", "r"), 403, "AuthenticationFailed")


def test_c23_table_sas(request, cluster, svc, table):
    mode = request.node.callspec.params["svc"]
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r"})
    expiry = datetime.now(UTC) + timedelta(hours=1)
    ro = service(cluster, mode, sas=svc.generate_table_shared_access_signature(table, TablePermissions.QUERY,
                                                                               expiry=expiry))
    assert ro.get_entity(table, "p", "r").RowKey == "r"
    fails(lambda: ro.insert_entity(table, {"PartitionKey": "p", "RowKey": "x"}), 403, "AuthorizationPermissionMismatch")
    old = service(cluster, mode, sas=svc.generate_table_shared_access_signature(
        table, TablePermissions.QUERY, expiry=datetime.now(UTC) - timedelta(minutes=5)))
    fails(lambda: old.get_entity(table, "p", "r"), 403)
    ranged = service(cluster, mode, sas=svc.generate_table_shared_access_signature(
        table, TablePermissions.QUERY + TablePermissions.ADD, expiry=expiry, start_pk="a", end_pk="m"))
    ranged.insert_entity(table, {"PartitionKey": "b", "RowKey": "r"})
    fails(lambda: ranged.insert_entity(table, {"PartitionKey": "z", "RowKey": "r"}), 403)


def test_c24_acl_and_service_xml(svc, table):
    from azure.cosmosdb.table.common.models import AccessPolicy, CorsRule

    policy = AccessPolicy(permission="r", expiry=datetime(2030, 1, 1, tzinfo=UTC), start=datetime(2020, 1, 1,
                                                                                                   tzinfo=UTC))
    svc.set_table_acl(table, {"p1": policy, "p2": AccessPolicy()})
    acl = svc.get_table_acl(table)
    assert set(acl) == {"p1", "p2"} and acl["p1"].permission == "r"
    sas = svc.generate_table_shared_access_signature(table, id="p1")
    assert sas and "si=p1" in sas
    props = svc.get_table_service_properties()
    svc.set_table_service_properties(cors=[CorsRule(["https://a.example"], ["GET"], max_age_in_seconds=5)])
    assert svc.get_table_service_properties().cors[0].allowed_origins == ["https://a.example"]
    svc.set_table_service_properties(cors=props.cors or [])
    stats = svc.get_table_service_stats()
    assert stats.geo_replication.status == "live"


def test_c25_protocol_hygiene(svc, table):
    seen = []
    svc.response_callback = lambda response: seen.append(response)
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r"})
    fails(lambda: svc.get_entity(table, "p", "none"), 404, "ResourceNotFound")
    assert len(seen) == 2
    for resp in seen:
        headers = {k.lower(): v for k, v in resp.headers.items()}
        assert headers["x-ms-request-id"] and headers["x-ms-version"] and headers["date"].endswith("GMT")
    assert {k.lower(): v for k, v in seen[1].headers.items()}["x-ms-error-code"] == "ResourceNotFound"


def test_entity_class_round_trip(svc, table):
    """The SDK's own Entity type (attribute access) goes in and out unchanged."""
    e = Entity(PartitionKey="p", RowKey="r", n=3)
    svc.insert_entity(table, e)
    assert svc.get_entity(table, "p", "r").n == 3
