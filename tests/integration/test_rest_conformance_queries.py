"""Conformance cases 15-25 of reference §10 (queries, paging, batches, authentication, SAS, ACL and service
XML, protocol hygiene) and the bench smoke test, driven by the real ``azure-data-tables`` SDK (and raw
HTTP) against a real cluster started once for the module. Cases 1-14: ``test_rest_conformance.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import formatdate

import pytest

azure_tables = pytest.importorskip("azure.data.tables")
pytest.importorskip("granian")

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential  # noqa: E402
from azure.core.exceptions import (  # noqa: E402
    ClientAuthenticationError,
    HttpResponseError,
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
    TableTransactionError,
    generate_table_sas,
)

from tests.integration import test_rest_conformance as _cases_1_14  # noqa: E402
from tests.integration.test_rest_conformance import _code, _ent, _name  # noqa: E402
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, batch_body  # noqa: E402

# the fixtures of cases 1-14 (one cluster per module, as before the split)
cluster, svc, table = _cases_1_14.cluster, _cases_1_14.svc, _cases_1_14.table  # raw: tests/integration/conftest.py

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
    assert set(res) == {"insert", "get", "upsert", "batch100", "pk_query", "pk_query_big", "point_or", "scan_page",
                        "reject", "server_rss_mib"}
    phases = [r for r in res.values() if isinstance(r, dict)]
    assert all(r["ops"] > 0 and r["cpu_ms_per_op"] >= 0 for r in phases) and len(lines) == 11  # + server RSS
