"""Issue #14: Azure behaviours checked through raw HTTP against a real cluster (one for the module).

Each test is one item of the issue: the x-ms-version table, the lower-case weak If-Match, boolean
literals in $filter, Get Service Stats on the secondary only, the read-only secondary endpoint,
CORS refusals and Vary, typed nulls, and the 403 for a request without a date.
"""

from __future__ import annotations

import json
from email.utils import formatdate
from urllib.parse import quote

import pytest

from tests.cluster import ClusterFactory
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, Raw, assert_secondary_refuses_writes, sign

SECONDARY = f"/{DEV_ACCOUNT}-secondary"


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


def _insert(raw: Raw, table: str, pk: str, rk: str, **props) -> str:
    r = raw.post(f"/{table}", {"PartitionKey": pk, "RowKey": rk, **props})
    assert r.status == 201, r
    return r.headers["etag"]


def _query(raw: Raw, table: str, flt: str):
    return raw.get(f"/{table}()?$filter={quote(flt)}")


def test_unknown_x_ms_version_is_400(raw, table):
    for version in ("2099-01-01", "abc"):
        r = raw.get(f"/{table}()", headers={"x-ms-version": version})
        assert (r.status, r.code) == (400, "InvalidHeaderValue"), r
        assert r.headers["x-ms-version"] == "2019-02-02"  # the unknown value is not echoed
        r = raw.get("/?restype=service&comp=properties", headers={"x-ms-version": version})
        assert (r.status, r.code) == (400, "InvalidHeaderValue") and r.headers["content-type"] == "application/xml"
    for version in ("2019-02-02", "2020-12-06", "2025-11-05"):
        r = raw.get(f"/{table}()", headers={"x-ms-version": version})
        assert r.status == 200 and r.headers["x-ms-version"] == version


def test_lower_case_weak_etag(raw, table):
    old = _insert(raw, table, "p", "r", A=1)
    path = f"/{table}(PartitionKey='p',RowKey='r')"
    etag = raw.request("PUT", path, {"A": 1}).headers["etag"]  # an upsert: `old` is now stale
    assert etag != old and old.startswith('W/"')
    r = raw.request("PUT", path, {"A": 2}, headers={"If-Match": "w/" + old[2:]})
    assert (r.status, r.code) == (412, "UpdateConditionNotSatisfied"), r
    r = raw.request("PUT", path, {"A": 2}, headers={"If-Match": "w/" + etag[2:]})
    assert r.status == 204, r
    etag = r.headers["etag"]
    for form in (etag[2:], "garbage", 'W/"a"b"'):  # strong, bare, malformed weak: 400 as before
        r = raw.request("DELETE", path, headers={"If-Match": form})
        assert (r.status, r.code) == (400, "InvalidInput"), (form, r)
    assert raw.request("DELETE", path, headers={"If-Match": "w/" + etag[2:]}).status == 204


def test_boolean_literals_in_filter(raw, table):
    _insert(raw, table, "p", "1", isActive=True)
    _insert(raw, table, "p", "2", isActive=False)
    _insert(raw, table, "q", "1")
    cases = {
        "true": {("p", "1"), ("p", "2"), ("q", "1")},
        "false": set(),
        "(true and RowKey eq '1') and (false or PartitionKey eq 'p')": {("p", "1")},
        "not false and PartitionKey eq 'q'": {("q", "1")},
        "isActive eq true": {("p", "1")},
    }
    for flt, want in cases.items():
        r = _query(raw, table, flt)
        assert r.status == 200, (flt, r)
        assert {(e["PartitionKey"], e["RowKey"]) for e in r.json()["value"]} == want, flt
    for flt in ("isActive", "not isActive"):  # a bare property is not a condition on Azure either
        r = _query(raw, table, flt)
        assert (r.status, r.code) == (400, "InvalidInput"), (flt, r)
        assert "isActive eq true" in r.json()["odata.error"]["message"]["value"]


def test_service_stats_only_on_secondary(raw):
    r = raw.get("/?restype=service&comp=stats")
    assert (r.status, r.code) == (400, "InvalidQueryParameterValue") and r.headers["content-type"] == "application/xml"
    for path in (f"{SECONDARY}/?restype=service&comp=stats", f"{SECONDARY}/{DEV_ACCOUNT}/?restype=service&comp=stats"):
        r = raw.get(path, prefix=False)
        assert r.status == 200 and b"<Status>live</Status>" in r.body, r


def test_secondary_serves_reads_and_refuses_writes(raw, table):
    _insert(raw, table, "p", "r", A=1)
    r = raw.get(f"{SECONDARY}/{table}()", prefix=False)
    assert r.status == 200 and [e["RowKey"] for e in r.json()["value"]] == ["r"]
    assert r.json()["odata.metadata"].endswith(f"/{DEV_ACCOUNT}-secondary/$metadata#{table}")
    r = raw.get(f"{SECONDARY}/{table}(PartitionKey='p',RowKey='r')", prefix=False)
    assert r.status == 200 and r.json()["A"] == 1 and r.headers["etag"]
    r = raw.get(f"{SECONDARY}/Tables", prefix=False)
    assert r.status == 200 and table in [t["TableName"] for t in r.json()["value"]]
    writes = [
        ("POST", f"/{table}", {"PartitionKey": "p", "RowKey": "new"}, {}),
        ("PUT", f"/{table}(PartitionKey='p',RowKey='r')", {"A": 2}, {}),
        ("PATCH", f"/{table}(PartitionKey='p',RowKey='r')", {"A": 2}, {"If-Match": "*"}),
        ("DELETE", f"/{table}(PartitionKey='p',RowKey='r')", None, {"If-Match": "*"}),
        ("POST", "/Tables", {"TableName": "neverthere"}, {}),
        ("DELETE", f"/Tables('{table}')", None, {}),
        ("POST", f"/{table}(PartitionKey='p',RowKey='r')", {"A": 3}, {"X-HTTP-Method": "MERGE"}),
        ("POST", "/$batch", "--b\r\n\r\n--b--\r\n", {"Content-Type": "multipart/mixed; boundary=b"}),
        ("PUT", f"/{table}?comp=acl", "<SignedIdentifiers/>", {"Content-Type": "application/xml"}),
    ]
    for method, path, body, headers in writes:
        r = raw.request(method, SECONDARY + path, body, headers=headers, prefix=False)
        assert (r.status, r.code) == (403, "InsufficientAccountPermissions"), (method, path, r)
        assert "Write operations are not allowed." in r.body.decode()
    r = raw.request("PUT", f"{SECONDARY}/?restype=service&comp=properties", "<StorageServiceProperties/>",
                    headers={"Content-Type": "application/xml"}, prefix=False)
    assert (r.status, r.code) == (403, "InsufficientAccountPermissions")
    r = raw.get(f"/{table}(PartitionKey='p',RowKey='r')")  # nothing was written
    assert r.json()["A"] == 1 and raw.get(f"/{table}(PartitionKey='p',RowKey='new')").status == 404
    r = raw.request("POST", SECONDARY + f"/{table}", {"PartitionKey": "p", "RowKey": "x"},
                    headers={"Authorization": f"SharedKey {DEV_ACCOUNT}:{sign('nope')}"}, sign_as=None, prefix=False)
    assert (r.status, r.code) == (403, "AuthenticationFailed")  # authentication comes first


def test_secondary_from_the_python_sdk(cluster, table, raw):
    tables = pytest.importorskip("azure.data.tables")
    from azure.core.credentials import AzureNamedKeyCredential

    _insert(raw, table, "p", "r", A=1)
    cred = AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY)
    with tables.TableClient(cluster.http + "-secondary", table, credential=cred) as t:
        assert [(e["RowKey"], e["A"]) for e in t.list_entities()] == [("r", 1)]
        assert t.get_entity("p", "r")["A"] == 1
        assert_secondary_refuses_writes(t, "p", "r")
    assert [e["RowKey"] for e in raw.get(f"/{table}()").json()["value"]] == ["r"]


def _set_cors(raw: Raw, rules: str) -> None:
    body = f"<StorageServiceProperties><Cors>{rules}</Cors></StorageServiceProperties>"
    assert raw.request("PUT", "/?restype=service&comp=properties", body,
                       headers={"Content-Type": "application/xml"}).status == 202


RULE = ("<CorsRule><AllowedOrigins>http://ok.example</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods>"
        "<MaxAgeInSeconds>60</MaxAgeInSeconds><ExposedHeaders>x-ms-*</ExposedHeaders>"
        "<AllowedHeaders>x-ms-*</AllowedHeaders></CorsRule>")


def test_cors_refusals_and_vary(raw, table):
    _set_cors(raw, RULE)
    try:
        ok = {"Origin": "http://ok.example", "Access-Control-Request-Method": "GET"}
        r = raw.request("OPTIONS", f"/{table}()", headers=ok, sign_as=None)
        assert r.status == 200 and r.headers["access-control-allow-origin"] == "http://ok.example"
        r = raw.request("OPTIONS", f"/{table}()", headers={"Origin": "http://ok.example"}, sign_as=None)
        assert (r.status, r.code) == (400, "InvalidHeaderValue") and r.headers["content-type"] == "application/xml"
        assert b"A required CORS header is not present." in r.body and "access-control-allow-origin" not in r.headers
        for method in ("DELETE", "POST", "MERGE"):
            r = raw.request("OPTIONS", f"/{table}()", headers={**ok, "Access-Control-Request-Method": method},
                            sign_as=None)
            assert (r.status, r.code) == (403, "CorsPreflightFailure"), (method, r)
            assert "access-control-allow-origin" not in r.headers
        r = raw.request("OPTIONS", f"/{table}()", headers={**ok, "Origin": "http://evil.example"}, sign_as=None)
        assert (r.status, r.code) == (403, "CorsPreflightFailure")
        r = raw.get(f"/{table}()", headers={"Origin": "http://evil.example"})
        assert r.status == 200 and r.headers.get("vary") == "Origin" and "access-control-allow-origin" not in r.headers
        r = raw.get(f"/{table}()", headers={"Origin": "http://ok.example"})
        assert r.headers["access-control-allow-origin"] == "http://ok.example" and r.headers["vary"] == "Origin"
        assert r.headers["access-control-expose-headers"] == "x-ms-*"
        r = raw.request("PUT", f"{SECONDARY}/{table}(PartitionKey='p',RowKey='r')", {"A": 1}, prefix=False,
                        headers={"Origin": "http://ok.example"})  # an error answer carries CORS headers too
        assert r.status == 403 and r.headers["access-control-allow-origin"] == "http://ok.example"
    finally:
        _set_cors(raw, "")
    r = raw.get(f"/{table}()", headers={"Origin": "http://evil.example"})  # no rules at all: no CORS headers
    assert r.status == 200 and "vary" not in r.headers


def test_typed_nulls_are_refused(raw, table):
    for annotation in ("Edm.DateTime", "Edm.Double", "Edm.Int64", "Edm.String"):
        body = {"PartitionKey": "p", "RowKey": "r", "A@odata.type": annotation, "A": None}
        r = raw.post(f"/{table}", body)
        assert (r.status, r.code) == (400, "InvalidInput"), (annotation, r)
        r = raw.request("PATCH", f"/{table}(PartitionKey='p',RowKey='r')", {"A@odata.type": annotation, "A": None})
        assert (r.status, r.code) == (400, "InvalidInput"), (annotation, r)
    assert raw.get(f"/{table}(PartitionKey='p',RowKey='r')").status == 404  # nothing half-written
    r = raw.post(f"/{table}", {"PartitionKey": "p", "RowKey": "r", "A": None, "B": 1})  # untyped null: absent
    assert r.status == 201 and "A" not in r.json() and r.json()["B"] == 1


def test_no_date_header_is_403(raw, table):
    path = f"/{DEV_ACCOUNT}/{table}()"
    sts = f"GET\n\n\n\n/{DEV_ACCOUNT}{path}"
    raw.conn.request("GET", path, headers={"x-ms-version": "2019-02-02", "Accept": "application/json",
                                           "Authorization": f"SharedKey {DEV_ACCOUNT}:{sign(sts)}"})
    resp = raw.conn.getresponse()
    body = resp.read()
    assert resp.status == 403 and resp.getheader("x-ms-error-code") == "AuthenticationFailed", body
    r = raw.get(f"/{table}()", date=formatdate(usegmt=True))  # the same request with a date is served
    assert r.status == 200 and json.loads(r.body)["value"] == []
