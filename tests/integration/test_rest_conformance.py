"""The 25 conformance cases of reference §10, driven by the real ``azure-data-tables`` SDK (and raw HTTP
where the SDK cannot send the request) against a real cluster started once for the module.

Test names carry the case number: ``test_c05_type_round_trip`` is case 5.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import formatdate

import pytest

azure_tables = pytest.importorskip("azure.data.tables")
pytest.importorskip("granian")

from azure.core import MatchConditions  # noqa: E402
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential  # noqa: E402
from azure.core.exceptions import (  # noqa: E402
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import (  # noqa: E402
    EdmType,
    EntityProperty,
    RequestTooLargeError,
    TableAccessPolicy,
    TableClient,
    TableCorsRule,
    TableSasPermissions,
    TableServiceClient,
    TableTransactionError,
    UpdateMode,
    generate_table_sas,
)

from tests.cluster import ClusterFactory  # noqa: E402
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, Raw, batch_body  # noqa: E402

_n = itertools.count()


def _name() -> str:
    return f"t{uuid.uuid4().hex[:8]}{next(_n)}"


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory(servers=2, extra=["--http-port", "0"]) as c:
        yield c


@pytest.fixture(scope="module")
def svc(cluster):
    with TableServiceClient.from_connection_string(cluster.connection_string) as s:
        yield s


@pytest.fixture(scope="module")
def raw(cluster):
    r = Raw(cluster.http)
    yield r
    r.close()


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


# --- 15-18: queries ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qtable(svc):
    name = _name()
    t = svc.create_table(name)
    rows = [
        _ent("a", "1", S="it's", I=1, L=EntityProperty(10, EdmType.INT64), D=1.5, B=True,
             T=datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=UTC), G=uuid.UUID(int=1), X=b"\x01\x02"),
        _ent("a", "2", S="b", I=2, L=EntityProperty(20, EdmType.INT64), D=2.5, B=False,
             T=datetime(2021, 1, 1, tzinfo=UTC), G=uuid.UUID(int=2), X=b"\x03"),
        _ent("b", "1", S="c", I=3, N=5),
        _ent("c", "1", Other="x"),
    ]
    for r in rows:
        t.create_entity(r)
    yield t
    svc.delete_table(name)


def _keys(client, flt: str, params: dict | None = None) -> list[tuple[str, str]]:
    return [(e["PartitionKey"], e["RowKey"]) for e in client.query_entities(flt, parameters=params or None)]


@pytest.mark.parametrize("flt,params,want", [
    ("S eq @s", {"s": "it's"}, [("a", "1")]),
    ("S ne 'b'", {}, [("a", "1"), ("b", "1")]),
    ("I gt 1 and I le 3", {}, [("a", "2"), ("b", "1")]),
    ("I lt 2 or I ge 3", {}, [("a", "1"), ("b", "1")]),
    ("L eq 10L", {}, [("a", "1")]),
    ("L ge @big", {"big": 2**33}, []),
    ("L lt @big", {"big": 2**33}, [("a", "1"), ("a", "2")]),
    ("D gt 2.0", {}, [("a", "2")]),
    ("B eq true", {}, [("a", "1")]),
    ("T lt @t", {"t": datetime(2020, 6, 1, tzinfo=UTC)}, [("a", "1")]),
    ("T eq datetime'2020-01-01T00:00:00.1234560Z'", {}, [("a", "1")]),
    ("G eq @g", {"g": uuid.UUID(int=2)}, [("a", "2")]),
    ("X eq X'0102'", {}, [("a", "1")]),
    ("not (I eq 1) and (PartitionKey eq 'a' or PartitionKey eq 'b')", {}, [("a", "2"), ("b", "1")]),
    ("PartitionKey ge 'a' and PartitionKey lt 'b'", {}, [("a", "1"), ("a", "2")]),
])
def test_c15_filter_literals(qtable, flt, params, want):
    assert _keys(qtable, flt, params) == want


def test_c16_filter_semantics(svc, qtable):
    assert _keys(qtable, "Other ne 'y'") == [("c", "1")]  # missing property: false even for ne
    assert _keys(qtable, "L eq 10") == [("a", "1")]  # Int64 column, Int32 literal
    assert _keys(qtable, "I eq '1'") == []  # string literal against a number
    name = qtable.table_name
    assert [t.name for t in svc.query_tables("TableName eq @n", parameters={"n": name})] == [name]


@pytest.mark.parametrize("flt,status,code", [("startswith(S, 'a')", 501, "NotImplemented"),
                                             ("S eq", 400, "InvalidInput"), ("I eq 99999999999", 400, "InvalidInput")])
def test_c17_filter_errors(raw, qtable, flt, status, code):
    from urllib.parse import quote

    r = raw.get(f"/{qtable.table_name}()?$filter={quote(flt)}")
    assert (r.status, r.code) == (status, code), r


def test_c18_paging(svc, raw):
    name = _name()
    t = svc.create_table(name)
    try:
        for p in range(25):
            t.submit_transaction([("create", _ent(f"p{p:02d}", f"{i:03d}")) for i in range(100)])
        sizes, path, seen = [], f"/{name}()", []
        while True:
            r = raw.get(path)
            sizes.append(len(r.json()["value"]))
            seen += [(e["PartitionKey"], e["RowKey"]) for e in r.json()["value"]]
            npk = r.headers.get("x-ms-continuation-nextpartitionkey")
            if not npk:
                assert "x-ms-continuation-nextrowkey" not in r.headers
                break
            path = f"/{name}()?NextPartitionKey={npk}&NextRowKey={r.headers['x-ms-continuation-nextrowkey']}"
        assert sizes == [1000, 1000, 500] and seen == sorted(seen) and len(set(seen)) == 2500
        pages = t.list_entities(results_per_page=10).by_page()
        first = list(next(pages))
        assert len(first) == 10
        token = pages.continuation_token
        rest = [e for page in t.list_entities(results_per_page=300).by_page(continuation_token=token) for e in page]
        assert [(e["PartitionKey"], e["RowKey"]) for e in first + rest] == seen
        r = raw.get(f"/{name}()?$top=10")
        assert len(r.json()["value"]) == 10 and r.headers["x-ms-continuation-nextpartitionkey"]
        r = raw.get(f"/{name}()?NextPartitionKey=garbage")
        assert (r.status, r.code) == (400, "InvalidInput")
        r = raw.get(f"/{name}()?NextPartitionKey=1!cDAw&NextRowKey=")  # "p00", empty NextRowKey
        assert (r.status, r.code) == (400, "InvalidInput")
    finally:
        svc.delete_table(name)
    names = sorted(t.name for t in svc.list_tables())
    pages = svc.list_tables(results_per_page=2).by_page()
    got = [t.name for page in pages for t in page]
    assert got == names
    r = raw.get("/Tables?$top=1")
    if len(names) > 1:
        assert r.headers["x-ms-continuation-nexttablename"]


# --- 19-21: batches ---------------------------------------------------------------------------------


def test_c19_batch_happy_path(raw, table):
    t = table.table_name
    table.create_entity(_ent("b", "3", A=1))
    table.create_entity(_ent("b", "4"))
    body = batch_body("batch_abc", "changeset_def", [
        ("POST", f"/{t}", {}, json.dumps({"PartitionKey": "b", "PartitionKey@odata.type": "Edm.String",
                                          "RowKey": "1", "RowKey@odata.type": "Edm.String"})),
        ("PATCH", f"/{t}(PartitionKey='b',RowKey='2')", {}, json.dumps({"M": 1})),
        ("PUT", f"/{t}(PartitionKey='b',RowKey='3')", {"If-Match": "*"}, json.dumps({"R": 2})),
        ("DELETE", f"/{t}(PartitionKey='b',RowKey='4')", {"If-Match": "*"}, None),
    ], f"http://{raw.host}:{raw.port}{raw.prefix}")
    r = raw.post("/$batch", body, headers={"Content-Type": "multipart/mixed; boundary=batch_abc"})
    assert r.status == 202 and r.headers["content-type"].startswith("multipart/mixed")
    text = r.body.decode()
    assert [ln for ln in text.split("\r\n") if ln.startswith("HTTP/1.1")] == [
        "HTTP/1.1 201 Created", "HTTP/1.1 204 No Content", "HTTP/1.1 204 No Content", "HTTP/1.1 204 No Content"]
    assert text.count("ETag:") == 3
    table.create_entity(_ent("c", "3"))
    table.create_entity(_ent("c", "4"))
    res = table.submit_transaction([("create", _ent("c", "1")), ("upsert", _ent("c", "2"), {"mode": "merge"}),
                                    ("update", _ent("c", "3", X=1), {"mode": "replace"}), ("delete", _ent("c", "4"))])
    assert [("etag" in x) for x in res] == [True, True, True, False]
    assert table.get_entity("c", "3")["X"] == 1 and table.get_entity("b", "3")["R"] == 2


def test_c20_batch_atomicity(svc, table):
    table.create_entity(_ent("p", "dup"))
    with pytest.raises(TableTransactionError) as ei:
        table.submit_transaction([("create", _ent("p", "new")), ("create", _ent("p", "dup"))])
    assert (ei.value.index, _code(ei.value)) == (1, "EntityAlreadyExists")
    assert ei.value.message.startswith("1:")
    with pytest.raises(ResourceNotFoundError):
        table.get_entity("p", "new")
    with pytest.raises(TableTransactionError) as ei:
        table.submit_transaction([("upsert", _ent("p", "a")), ("delete", _ent("p", "nothere"))])
    assert (ei.value.index, _code(ei.value)) == (1, "ResourceNotFound")
    with pytest.raises((TableTransactionError, ResourceNotFoundError)):
        svc.get_table_client("nosuchtable43").submit_transaction([("create", _ent())])


def test_c21_batch_limits(raw, table):
    with pytest.raises(TableTransactionError) as ei:
        table.submit_transaction([("create", _ent("p", str(i))) for i in range(101)])
    assert _code(ei.value) == "InvalidInput" and "100" in ei.value.message
    with pytest.raises(TableTransactionError) as ei:
        table.submit_transaction([("upsert", _ent("p", "x")), ("upsert", _ent("p", "x"))])
    assert (_code(ei.value), ei.value.index) == ("InvalidDuplicateRow", 1)
    t, base = table.table_name, f"http://{raw.host}:{raw.port}{raw.prefix}"
    two = batch_body("batch_1", "changeset_1", [("POST", f"/{t}", {}, json.dumps(_ent("p1", "r"))),
                                                ("POST", f"/{t}", {}, json.dumps(_ent("p2", "r")))], base)
    r = raw.post("/$batch", two, headers={"Content-Type": "multipart/mixed; boundary=batch_1"})
    assert r.status == 202 and "HTTP/1.1 400" in r.body.decode() and "1:" in r.body.decode()
    with pytest.raises(RequestTooLargeError):
        table.submit_transaction([("upsert", _ent("p", str(i), S="x" * 30000, T="y" * 30000)) for i in range(80)])
    second = two.replace(b"--batch_1--", b"--batch_1\r\nContent-Type: multipart/mixed; boundary=changeset_2\r\n\r\n"
                         b"--changeset_2--\r\n--batch_1--")
    r = raw.post("/$batch", second, headers={"Content-Type": "multipart/mixed; boundary=batch_1"})
    assert (r.status, r.code) == (400, "InvalidInput")
    for broken in (b"garbage", two[: len(two) // 2], two.replace(b"HTTP/1.1\r\n", b"\r\n", 1).replace(b"POST ", b"", 1)):
        r = raw.post("/$batch", broken, headers={"Content-Type": "multipart/mixed; boundary=batch_1"})
        assert r.status == 400, r
    r = raw.post("/$batch", two, headers={"Content-Type": "application/json"})
    assert r.status == 400


# --- 22-24: authentication, SAS, ACL and service XML ------------------------------------------------------


def test_c22_shared_key(cluster, raw, table):
    table.create_entity(_ent("p'1", "r 1", A=1))
    path = f"/{table.table_name}(PartitionKey='p%27%271',RowKey='r%201')"
    assert raw.get(path).json()["A"] == 1
    assert raw.get(path, sign_as="SharedKeyLite").status == 200
    assert raw.get(f"/{table.table_name}?comp=acl", headers={"Accept": "application/xml"}).status == 200
    stale = formatdate(time.time() - 20 * 60, usegmt=True)
    r = raw.get(path, date=stale)
    assert (r.status, r.code) == (403, "AuthenticationFailed")
    r = raw.get(path, sign_as=None)
    assert (r.status, r.code) == (403, "AuthenticationFailed")
    wrong = DEV_KEY[:-8] + "AAAAAAA="
    with TableClient(cluster.http, table.table_name, credential=AzureNamedKeyCredential(DEV_ACCOUNT, wrong)) as c:
        with pytest.raises(ClientAuthenticationError):
            c.get_entity("p'1", "r 1")


def _sas_client(cluster, table_name: str, **kw) -> TableClient:
    cred = AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY)
    token = generate_table_sas(cred, table_name, **kw)
    return TableClient(cluster.http, table_name, credential=AzureSasCredential(token))


def test_c23_table_sas(cluster, table):
    for pk in "abc":
        table.create_entity(_ent(pk, "1"))
    soon = datetime.now(UTC) + timedelta(hours=1)
    with _sas_client(cluster, table.table_name, permission=TableSasPermissions(read=True), expiry=soon) as c:
        assert len(list(c.list_entities())) == 3 and c.get_entity("a", "1")["RowKey"] == "1"
        with pytest.raises(HttpResponseError) as ei:
            c.create_entity(_ent("d", "1"))
        assert (ei.value.status_code, _code(ei.value)) == (403, "AuthorizationPermissionMismatch")
    past = datetime.now(UTC) - timedelta(minutes=1)
    with _sas_client(cluster, table.table_name, permission="r", expiry=past) as c:
        with pytest.raises(HttpResponseError) as ei:
            c.get_entity("a", "1")
        assert ei.value.status_code == 403
    table.set_table_access_policy({"pol1": TableAccessPolicy(permission="ra", expiry=soon)})
    with _sas_client(cluster, table.table_name, policy_id="pol1") as c:
        c.create_entity(_ent("e", "1"))
        table.set_table_access_policy({})
        with pytest.raises(HttpResponseError) as ei:
            c.get_entity("e", "1")
        assert ei.value.status_code == 403
    with _sas_client(cluster, table.table_name, permission="rau", expiry=soon, start_pk="b", end_pk="c") as c:
        assert sorted(e["PartitionKey"] for e in c.list_entities()) == ["b", "c"]
        c.upsert_entity(_ent("b", "2"))
        with pytest.raises(HttpResponseError) as ei:
            c.upsert_entity(_ent("a", "2"))
        assert ei.value.status_code == 403


def test_c24_acl_and_service_xml(svc, raw, table):
    start = datetime(2020, 1, 1, tzinfo=UTC)
    table.set_table_access_policy({"full": TableAccessPolicy(permission="raud", start=start,
                                                             expiry=datetime(2030, 1, 1, tzinfo=UTC)),
                                   "bare": None})
    got = table.get_table_access_policy()
    assert set(got) == {"full", "bare"} and got["bare"] is None and got["full"].permission == "raud"
    assert got["full"].start == start
    with pytest.raises((ValueError, HttpResponseError)):
        table.set_table_access_policy({f"id{i}": TableAccessPolicy(permission="r") for i in range(6)})
    bad = ('<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>x</Id><AccessPolicy>'
           "<Permission>w</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>")
    r = raw.request("PUT", f"/{table.table_name}?comp=acl", bad, headers={"Content-Type": "application/xml"})
    assert (r.status, r.code) == (400, "InvalidXmlDocument") and r.headers["content-type"] == "application/xml"
    r = raw.request("PUT", f"/{table.table_name}?comp=acl", "<nope", headers={"Content-Type": "application/xml"})
    assert (r.status, r.code) == (400, "InvalidXmlDocument")
    assert raw.request("HEAD", f"/{table.table_name}?comp=acl").status == 200
    svc.set_service_properties(cors=[TableCorsRule(["http://ok.example"], ["GET", "PUT"], max_age_in_seconds=60,
                                                   allowed_headers=["x-ms-*"])])
    props = svc.get_service_properties()
    assert props["cors"][0].allowed_origins == ["http://ok.example"] and props["analytics_logging"].version == "1.0"
    stats = svc.get_service_stats()
    assert stats["geo_replication"]["status"] == "live"
    h = {"Origin": "http://ok.example", "Access-Control-Request-Method": "GET",
         "Access-Control-Request-Headers": "x-ms-date"}
    r = raw.request("OPTIONS", "/Tables", headers=h, sign_as=None)
    assert r.status == 200 and r.headers["access-control-allow-origin"] == "http://ok.example"
    r = raw.request("OPTIONS", "/Tables", headers={**h, "Origin": "http://evil.example"}, sign_as=None)
    assert (r.status, r.code) == (403, "CorsPreflightFailure")
    r = raw.get("/Tables", headers={"Origin": "http://ok.example"})
    assert r.headers["access-control-allow-origin"] == "http://ok.example"


# --- 25: protocol hygiene and bad input --------------------------------------------------------------


def test_c25_protocol_hygiene(raw, table):
    t = f"/{table.table_name}"
    ok = raw.get(t + "()", headers={"x-ms-client-request-id": "abc-123"})
    err = raw.get(t + "(PartitionKey='x',RowKey='y')", headers={"x-ms-client-request-id": "zz"})
    for r, crid in ((ok, "abc-123"), (err, "zz")):
        assert r.headers["x-ms-request-id"] and r.headers["x-ms-version"] == "2019-02-02"
        assert r.headers["x-ms-client-request-id"] == crid
        datetime.strptime(r.headers["date"], "%a, %d %b %Y %H:%M:%S GMT")
        assert int(r.headers["content-length"]) == len(r.body)
    assert err.code == "ResourceNotFound" and err.headers["content-type"].startswith("application/json")
    assert err.json()["odata.error"]["code"] == "ResourceNotFound"
    big = b'{"PartitionKey":"p","RowKey":"r","S":"' + b"x" * (5 * 1024 * 1024) + b'"}'
    cases = [
        ("FOO", t + "()", None, {}, 405), ("GET", "/a/b/c", None, {}, 400), ("GET", t + "(PartitionKey='x')", None, {}, 400),
        ("POST", t, "{not json", {}, 400), ("POST", t, "[1,2]", {}, 400), ("POST", t, '{"PartitionKey":"p","RowKey":"r","A":[1]}', {}, 400),
        ("POST", t, '{"PartitionKey":"p","RowKey":"r","A":1,"A":2}', {}, 400),
        ("POST", t, '{"PartitionKey":"p","RowKey":"r","A@odata.type":"Edm.Nope","A":"1"}', {}, 400),
        ("POST", t, big, {}, 413), ("PUT", t + "(PartitionKey='x',RowKey='y')", "{}", {"X-HTTP-Method": "MERGE"}, 400),
        ("POST", t + "(PartitionKey='x',RowKey='y')", "{}", {"X-HTTP-Method": "BOGUS"}, 400),
        ("GET", t + "()?$top=5000", None, {}, 400), ("GET", t + "()?$top=abc", None, {}, 400),
        ("GET", "/?restype=service&comp=nope", None, {}, 400), ("PATCH", "/Tables", "{}", {}, 405),
        ("GET", t + "(PartitionKey='%ff',RowKey='y')", None, {}, 400),
        ("POST", "/Tables", '{"TableName": 5}', {}, 400),
    ]
    for method, path, body, headers, status in cases:
        r = raw.request(method, path, body, headers=headers)
        assert r.status == status, (method, path, r)
        assert r.code and r.headers["x-ms-request-id"]


def test_bench_http_smoke(cluster):
    """`rangetable bench http` runs end to end (tiny sizes; the figures themselves are not checked)."""
    from cli.bench.http import run_http_bench

    lines: list[str] = []
    res = run_http_bench(cluster.refresh(), n=20, batches=2, big=0, procs=2, echo=lines.append)
    assert set(res) == {"insert", "get", "upsert", "batch100", "pk_query", "pk_query_big", "scan_page", "reject",
                        "server_rss_mib"}
    phases = [r for r in res.values() if isinstance(r, dict)]
    assert all(r["ops"] > 0 and r["cpu_ms_per_op"] >= 0 for r in phases) and len(lines) == 10  # + server RSS
