"""The 25 conformance cases of reference §10, driven by the real ``azure-data-tables`` SDK (and raw HTTP
where the SDK cannot send the request) against a real cluster started once for the module.

Test names carry the case number: ``test_c05_type_round_trip`` is case 5.
"""

from __future__ import annotations

import itertools
import math
import uuid
from datetime import UTC, datetime

import pytest

azure_tables = pytest.importorskip("azure.data.tables")
pytest.importorskip("granian")

from azure.core import MatchConditions  # noqa: E402
from azure.core.exceptions import (  # noqa: E402
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import (  # noqa: E402
    EdmType,
    EntityProperty,
    TableServiceClient,
    UpdateMode,
)

from tests.cluster import ClusterFactory  # noqa: E402
from tests.rest_helpers import DEV_ACCOUNT  # noqa: E402

_n = itertools.count()


def _name() -> str:
    return f"t{uuid.uuid4().hex[:8]}{next(_n)}"


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory(extra=["--http-port", "0"]) as c:
        yield c


@pytest.fixture(scope="module")
def svc(cluster):
    with TableServiceClient.from_connection_string(cluster.connection_string) as s:
        yield s


@pytest.fixture
def table(svc):
    name = _name()
    client = svc.create_table(name)
    yield client
    svc.delete_table(name)


def _code(exc: Exception) -> str | None:
    """The Azure error code of an SDK exception (some SDK paths re-raise azure-core's plain error)."""
    code = getattr(exc, "error_code", None)
    return str(code.value if hasattr(code, "value") else code) if code else exc.response.headers.get("x-ms-error-code")


def _ent(pk: str = "p", rk: str = "r", **props) -> dict:
    return {"PartitionKey": pk, "RowKey": rk, **props}


# --- 1-4: tables, names, Prefer, inserts -------------------------------------------------------------


def test_c01_create_list_delete_table(svc, raw):
    name = "Mx" + uuid.uuid4().hex[:8]
    r = raw.post("/Tables", {"TableName": name})
    assert r.status == 201, r
    assert r.json()["TableName"] == name
    assert r.json()["odata.metadata"].endswith("/$metadata#Tables/@Element")
    assert "preference-applied" not in r.headers
    assert name in [t.name for t in svc.list_tables()]
    lst = raw.get("/Tables").json()
    assert lst["odata.metadata"].endswith("$metadata#Tables") and {"TableName": name} in lst["value"]
    assert raw.get(f"/Tables('{name}')").json()["TableName"] == name
    assert raw.request("DELETE", f"/Tables('{name}')").status == 204
    r = raw.request("DELETE", "/Tables('nevercreated1')")
    assert (r.status, r.code) == (404, "ResourceNotFound")
    with pytest.raises(ResourceNotFoundError) as ei:
        svc.get_table_client(name).get_entity("a", "b")
    assert _code(ei.value) == "TableNotFound"
    svc.delete_table(name)  # the SDK swallows the 404


@pytest.mark.parametrize("bad,code", [("1abc", "InvalidResourceName"), ("ab", "OutOfRangeInput"),
                                      ("a" * 64, "OutOfRangeInput"), ("a-b", "InvalidResourceName"),
                                      ("tables", "InvalidResourceName")])
def test_c02_table_name_validation(svc, raw, bad, code):
    r = raw.post("/Tables", {"TableName": bad})
    assert (r.status, r.code) == (400, code), r
    with pytest.raises((ValueError, HttpResponseError)):
        svc.create_table(bad)


def test_c02_duplicate_table_any_case(svc):
    name = "My" + uuid.uuid4().hex[:8]
    svc.create_table(name)
    try:
        with pytest.raises(ResourceExistsError):
            svc.create_table(name.lower())
        svc.create_table_if_not_exists(name.upper())
    finally:
        svc.delete_table(name)


@pytest.mark.parametrize("prefer,status,applied", [(None, 201, None), ("return-content", 201, "return-content"),
                                                   ("return-no-content", 204, "return-no-content")])
def test_c03_prefer_matrix(raw, table, prefer, status, applied):
    h = {"Prefer": prefer} if prefer else {}
    r = raw.post(f"/{table.table_name}", _ent("p", f"r{status}{applied}"), headers=h)
    assert r.status == status and r.headers.get("preference-applied") == applied and r.headers["etag"]
    assert (r.body == b"") == (status == 204)
    name = _name()
    r = raw.post("/Tables", {"TableName": name}, headers=h)
    assert r.status == status and r.headers.get("preference-applied") == applied
    raw.request("DELETE", f"/Tables('{name}')")


def test_c03_sdk_insert_result_keys(table):
    assert set(table.create_entity(_ent())) == {"date", "etag", "version"}


def test_c04_duplicate_insert_and_missing_table(svc, table):
    table.create_entity(_ent())
    with pytest.raises(ResourceExistsError) as ei:
        table.create_entity(_ent())
    assert _code(ei.value) == "EntityAlreadyExists"
    with pytest.raises(ResourceNotFoundError) as ei:
        svc.get_table_client("nosuchtable42").create_entity(_ent())
    assert _code(ei.value) == "TableNotFound"


# --- 5-9: payloads --------------------------------------------------------------------------------------


def test_c05_type_round_trip(raw, table):
    dt6 = datetime(2020, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    guid = uuid.uuid4()
    e = _ent("p", "r", S="x", I=7, Big=EntityProperty(2**40, EdmType.INT64), F=5.0, Nan=math.nan,
             Inf=math.inf, NInf=-math.inf, B=True, D=dt6, G=guid, Bin=b"\x00\x01\xff")
    table.create_entity(e)
    got = table.get_entity("p", "r")
    assert got["S"] == "x" and got["I"] == 7 and got["Big"] == EntityProperty(2**40, EdmType.INT64)
    assert got["F"] == 5.0 and isinstance(got["F"], float) and math.isnan(got["Nan"])
    assert got["Inf"] == math.inf and got["NInf"] == -math.inf and got["B"] is True
    assert got["D"] == dt6 and got["G"] == guid and got["Bin"] == b"\x00\x01\xff"
    body = {"PartitionKey": "p", "RowKey": "r7", "D7@odata.type": "Edm.DateTime", "D7": "2013-08-22T01:12:06.2608595Z"}
    assert raw.post(f"/{table.table_name}", body).status == 201
    doc = raw.get(f"/{table.table_name}(PartitionKey='p',RowKey='r')").json()
    assert doc["Big@odata.type"] == "Edm.Int64" and doc["Big"] == "1099511627776"
    assert doc["Nan@odata.type"] == "Edm.Double" and doc["Nan"] == "NaN" and "F@odata.type" not in doc
    assert doc["G@odata.type"] == "Edm.Guid" and doc["Bin@odata.type"] == "Edm.Binary" and doc["Bin"] == "AAH/"
    assert doc["D@odata.type"] == "Edm.DateTime" and doc["D"] == "2020-01-02T03:04:05.123456Z"
    assert "S@odata.type" not in doc and "I@odata.type" not in doc and "B@odata.type" not in doc
    assert "Timestamp@odata.type" not in doc and "PartitionKey@odata.type" not in doc
    assert raw.get(f"/{table.table_name}(PartitionKey='p',RowKey='r7')").json()["D7"] == "2013-08-22T01:12:06.2608595Z"
    assert b'"F":5.0' in raw.get(f"/{table.table_name}(PartitionKey='p',RowKey='r')").body


def test_c06_metadata_levels(raw, table):
    table.create_entity(_ent("p", "r", Big=EntityProperty(5, EdmType.INT64), S="s"))
    path = f"/{table.table_name}(PartitionKey='p',RowKey='r')"
    no = raw.get(path, headers={"Accept": "application/json;odata=nometadata"}).json()
    assert not [k for k in no if k.startswith("odata.") or "@" in k] and no["Big"] == "5"
    full = raw.get(path, headers={"Accept": "application/json;odata=fullmetadata"}).json()
    for k in ("odata.metadata", "odata.type", "odata.id", "odata.etag", "odata.editLink"):
        assert k in full
    assert full["Timestamp@odata.type"] == "Edm.DateTime" and full["odata.type"] == f"{DEV_ACCOUNT}.{table.table_name}"
    assert full["odata.editLink"] == f"{table.table_name}(PartitionKey='p',RowKey='r')"
    minimal = raw.get(path, headers={"Accept": "application/json"}).json()
    assert "odata.etag" in minimal and "odata.type" not in minimal and minimal["Big@odata.type"] == "Edm.Int64"
    fmt = raw.get(path + "?$format=application/json;odata=nometadata",
                  headers={"Accept": "application/json;odata=fullmetadata"}).json()
    assert "odata.etag" not in fmt
    r = raw.get(f"/{table.table_name}()", headers={"Accept": "application/json;odata=fullmetadata"})
    assert "fullmetadata" in r.headers["content-type"] and r.json()["value"][0]["odata.type"]


def test_c07_lenient_typed_input(raw, table):
    body = {"PartitionKey": "p", "RowKey": "r", "A@odata.type": "Edm.Int32", "A": "12345",
            "B@odata.type": "Edm.Boolean", "B": "False", "C@odata.type": "Edm.Double", "C": "3.14", "N": None}
    assert raw.post(f"/{table.table_name}", body).status == 201
    got = table.get_entity("p", "r")
    assert (got["A"], got["B"], got["C"]) == (12345, False, 3.14) and "N" not in got
    bad = {"PartitionKey": "p", "RowKey": "x", "L@odata.type": "Edm.Int64", "L": "9223372036854775808"}
    r = raw.post(f"/{table.table_name}", bad)
    assert (r.status, r.code) == (400, "InvalidInput")


def test_c08_key_handling(raw, table):
    keys = [("p'1", "r 1"), ("@*$!%", "a'b''c"), ("你好", "世界"), ("p", "")]
    for pk, rk in keys:
        table.create_entity(_ent(pk, rk, V=1))
        table.update_entity(_ent(pk, rk, V=2), mode=UpdateMode.REPLACE)
        table.update_entity(_ent(pk, rk, W=3), mode=UpdateMode.MERGE)
        got = table.get_entity(pk, rk)
        assert (got["PartitionKey"], got["RowKey"], got["V"], got["W"]) == (pk, rk, 2, 3)
        table.submit_transaction([("upsert", _ent(pk, rk, X=4)), ("upsert", _ent(pk, rk + "z", X=5))])
        assert table.get_entity(pk, rk + "z")["X"] == 5
        table.submit_transaction([("delete", _ent(pk, rk + "z"))])
        table.delete_entity(pk, rk)
        with pytest.raises(ResourceNotFoundError):
            table.get_entity(pk, rk)
    for bad in ("a/b", "a\\b", "a#b", "a?b", "a\x01b"):
        r = raw.post(f"/{table.table_name}", _ent(bad, "r"))
        assert (r.status, r.code) == (400, "InvalidInput"), bad
    for bad_key in (1, True, 1.5):
        r = raw.post(f"/{table.table_name}", {"PartitionKey": bad_key, "RowKey": "r"})
        assert (r.status, r.code) == (400, "InvalidInput")
    r = raw.post(f"/{table.table_name}", {"PartitionKey": "p"})
    assert (r.status, r.code) == (400, "PropertiesNeedValue")
    with pytest.raises(ValueError):
        table.create_entity({"PartitionKey": "p"})


def test_c09_property_limits(raw, table):
    t = f"/{table.table_name}"
    cases = [({f"P{i}": i for i in range(253)}, "TooManyProperties"), ({"x" * 256: 1}, "PropertyNameTooLong"),
             ({"123": 1}, "PropertyNameInvalid"), ({"a-b": 1}, "PropertyNameInvalid"),
             ({"S": "x" * 32769}, "PropertyValueTooLarge"),
             ({"B@odata.type": "Edm.Binary", "B": "A" * 87384}, "PropertyValueTooLarge"),
             ({f"S{i}": "x" * 30000 for i in range(20)}, "EntityTooLarge")]
    for i, (props, code) in enumerate(cases):
        r = raw.post(t, {"PartitionKey": "p", "RowKey": str(i), **props})
        assert (r.status, r.code) == (400, code), (code, r)
    table.create_entity(_ent("p", "e", ETag="a", etag="b", Etag="c"))
    got = table.get_entity("p", "e")
    assert (got["ETag"], got["etag"], got["Etag"]) == ("a", "b", "c")


# --- 10-14: updates, concurrency, reads ---------------------------------------------------------------


def test_c10_replace_vs_merge(raw, table):
    path = f"/{table.table_name}(PartitionKey='p',RowKey='r')"
    table.create_entity(_ent(A=1, B=2))
    for method, headers in (("PATCH", {}), ("MERGE", {}), ("POST", {"X-HTTP-Method": "MERGE"})):
        r = raw.request(method, path, {"C": 3}, headers={"If-Match": "*", **headers})
        assert r.status == 204 and r.headers["etag"], (method, r)
        got = table.get_entity("p", "r")
        assert (got["A"], got["B"], got["C"]) == (1, 2, 3)
    assert raw.request("PUT", path, {"D": 4}, headers={"If-Match": "*"}).status == 204
    assert set(table.get_entity("p", "r")) == {"PartitionKey", "RowKey", "D"}


def test_c11_upserts(raw, table):
    for method in ("PUT", "PATCH", "MERGE"):
        path = f"/{table.table_name}(PartitionKey='p',RowKey='{method}')"
        r = raw.request(method, path, {"A": 1})
        assert r.status == 204 and r.headers["etag"].startswith('W/"datetime')
        r = raw.request(method, path, {"B": 2})
        assert r.status == 204
        got = table.get_entity("p", method)
        assert got["B"] == 2 and ("A" in got) == (method != "PUT")


def test_c12_concurrency(raw, table):
    etag = table.create_entity(_ent(A=1))["etag"]
    new = table.update_entity(_ent(A=2), etag=etag, match_condition=MatchConditions.IfNotModified)["etag"]
    assert new != etag and new > etag
    with pytest.raises(ResourceModifiedError) as ei:
        table.update_entity(_ent(A=3), etag=etag, match_condition=MatchConditions.IfNotModified)
    assert _code(ei.value) == "UpdateConditionNotSatisfied"
    with pytest.raises(ResourceModifiedError):
        table.update_entity(_ent(A=3), mode=UpdateMode.MERGE, etag=etag, match_condition=MatchConditions.IfNotModified)
    with pytest.raises(ResourceModifiedError):
        table.delete_entity("p", "r", etag=etag, match_condition=MatchConditions.IfNotModified)
    got = table.get_entity("p", "r")
    assert got.metadata["etag"] == new
    ts = got.metadata["timestamp"]
    assert new == "W/\"datetime'" + ts.tables_service_value.replace(":", "%3A") + "'\""
    newer = table.update_entity(_ent(A=4), mode=UpdateMode.MERGE, etag=new,
                                match_condition=MatchConditions.IfNotModified)["etag"]
    assert newer > new
    table.delete_entity("p", "r", etag=newer, match_condition=MatchConditions.IfNotModified)
    path = f"/{table.table_name}(PartitionKey='p',RowKey='gone')"
    for method in ("PUT", "PATCH", "DELETE"):
        r = raw.request(method, path, {"A": 1} if method != "DELETE" else None, headers={"If-Match": "*"})
        assert (r.status, r.code) == (404, "ResourceNotFound"), method
    r = raw.request("PUT", path, {"A": 1}, headers={"If-Match": "garbage"})
    assert (r.status, r.code) == (400, "InvalidInput")
    r = raw.request("DELETE", path)
    assert r.status == 400


def test_c13_get_entity(raw, table):
    table.create_entity(_ent(A=1))
    r = raw.get(f"/{table.table_name}(PartitionKey='p',RowKey='r')")
    doc = r.json()
    assert "value" not in doc and doc["odata.etag"] == r.headers["etag"] and doc["A"] == 1
    assert doc["odata.metadata"].endswith(f"$metadata#{table.table_name}/@Element")
    with pytest.raises(ResourceNotFoundError) as ei:
        table.get_entity("p", "missing")
    assert _code(ei.value) == "ResourceNotFound"


def test_c14_select(table):
    table.create_entity(_ent(A=1, B=2, C=3))
    got = table.get_entity("p", "r", select=["A", "Nope"])
    assert got["A"] == 1 and got["Nope"] is None and "B" not in got
    rows = list(table.query_entities("PartitionKey eq 'p'", select=["B", "Missing"]))
    assert rows[0]["B"] == 2 and rows[0]["Missing"] is None and "A" not in rows[0]
