"""Issue #23: five behaviours clients nobody on this project wrote still caught, each through raw HTTP
and through the client that showed it, against a real cluster (one for the module).

* an opaque weak ETag (``W/"wrong"``) is compared: 412, as Azure answers (Azurite #1229);
* ``$top=0`` answers 200 with no entities, on a table and on ``/Tables`` (Azurite #1428);
* filters of more than 15 comparisons are served (Orleans sends 201), an ``or`` of point keys too;
* the legacy Python SDK's path-style batches (``POST /<table>`` without the account segment) run;
* a SAS with a second ``sig`` is refused (403), as Azurite refuses it.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import HttpResponseError, ResourceModifiedError
from azure.data.tables import TableClient, TableSasPermissions, UpdateMode, generate_table_sas

from tests.cluster import ClusterFactory
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, batch_body


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


@pytest.fixture
def sdk(cluster, table):
    with TableClient(cluster.http, table, credential=AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY)) as t:
        yield t


def legacy_service(cluster):
    """The legacy ``azure-cosmosdb-table`` SDK with a TableEndpoint connection string (path style)."""
    from azure.cosmosdb.table.tableservice import TableService

    return TableService(connection_string=f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};"
                                          f"AccountKey={DEV_KEY};TableEndpoint={cluster.http};")


# --- 1. an opaque weak ETag is a mismatch, not a malformed header ---------------------------------


def test_opaque_weak_etag_raw(raw, table):
    assert raw.post(f"/{table}", {"PartitionKey": "p", "RowKey": "r", "A": 1}).status == 201
    path = f"/{table}(PartitionKey='p',RowKey='r')"
    for etag in ('W/"wrong"', 'w/"wrong"', 'W/""'):
        for method, body in (("PUT", {"A": 2}), ("MERGE", {"A": 2}), ("DELETE", None)):
            r = raw.request(method, path, body, headers={"If-Match": etag})
            assert (r.status, r.code) == (412, "UpdateConditionNotSatisfied"), (etag, method, r)
    r = raw.request("MERGE", f"/{table}(PartitionKey='p',RowKey='none')", {"A": 2}, headers={"If-Match": 'W/"x"'})
    assert (r.status, r.code) == (404, "ResourceNotFound"), r
    boundary, changeset = "batch_1", "changeset_1"
    body = batch_body(boundary, changeset, [("DELETE", f"/{table}(PartitionKey='p',RowKey='r')",
                                             {"If-Match": 'W/"wrong"'}, None)], raw.prefix)
    r = raw.post("/$batch", body, headers={"Content-Type": f"multipart/mixed; boundary={boundary}"})
    assert r.status == 202 and b"412 Precondition Failed" in r.body and b"UpdateConditionNotSatisfied" in r.body, r
    assert raw.get(path).json()["A"] == 1  # nothing was written


def test_unescaped_datetime_etag_raw(raw, table):
    """The legacy JavaScript SDK derives a ``nometadata`` entity's ETag from its Timestamp without
    escaping the colons: the same instant, so the same version (and a stale one is still 412)."""
    assert raw.post(f"/{table}", {"PartitionKey": "p", "RowKey": "r", "A": 1}).status == 201
    path = f"/{table}(PartitionKey='p',RowKey='r')"
    got = raw.get(path, headers={"Accept": "application/json;odata=nometadata"})
    assert "odata.etag" not in got.json()
    derived = f"W/\"datetime'{got.json()['Timestamp']}'\""
    assert derived != got.headers["etag"] and "%3A" in got.headers["etag"]
    r = raw.request("MERGE", path, {"B": 2}, headers={"If-Match": derived})
    assert r.status == 204, r
    for method, body in (("PUT", {"A": 3}), ("MERGE", {"A": 3}), ("DELETE", None)):
        r = raw.request(method, path, body, headers={"If-Match": derived})  # stale now
        assert (r.status, r.code) == (412, "UpdateConditionNotSatisfied"), (method, r)
    fresh = raw.get(path, headers={"Accept": "application/json;odata=nometadata"}).json()["Timestamp"]
    assert raw.request("DELETE", path, headers={"If-Match": f"W/\"datetime'{fresh}'\""}).status == 204


def test_opaque_weak_etag_sdk(sdk):
    sdk.create_entity({"PartitionKey": "p", "RowKey": "r", "A": 1})
    with pytest.raises(ResourceModifiedError) as info:
        sdk.update_entity({"PartitionKey": "p", "RowKey": "r", "A": 2}, mode=UpdateMode.REPLACE,
                          etag='W/"wrong"', match_condition=MatchConditions.IfNotModified)
    assert info.value.status_code == 412
    with pytest.raises(ResourceModifiedError):
        sdk.delete_entity("p", "r", etag='W/"wrong"', match_condition=MatchConditions.IfNotModified)
    assert sdk.get_entity("p", "r")["A"] == 1


# --- 2. $top=0 ---------------------------------------------------------------------------------------


def test_top_zero_raw(raw, table):
    assert raw.post(f"/{table}", {"PartitionKey": "p", "RowKey": "r"}).status == 201
    r = raw.get(f"/{table}()?$top=0")
    assert r.status == 200 and r.json()["value"] == [], r
    assert not any(h.startswith("x-ms-continuation") for h in r.headers), r.headers
    flt = quote("PartitionKey eq 'p'")
    r = raw.get(f"/{table}()?$top=0&$filter={flt}")
    assert r.status == 200 and r.json()["value"] == [], r
    r = raw.get("/Tables?$top=0")
    assert r.status == 200 and r.json()["value"] == [], r
    assert "x-ms-continuation-nexttablename" not in r.headers
    r = raw.get("/nosuchtable0()?$top=0")
    assert (r.status, r.code) == (404, "TableNotFound"), r
    for bad in ("-1", "1001"):
        assert raw.get(f"/{table}()?$top={bad}").status == 400


def test_top_zero_legacy_sdk(cluster, table):
    svc = legacy_service(cluster)
    svc.insert_entity(table, {"PartitionKey": "p", "RowKey": "r"})
    # the SDK's own request path with max_results=0 sends $top=0, as Storage Explorer does
    page = svc._query_entities(table, max_results=0)
    assert list(page) == [] and not page.next_marker
    tables = svc._list_tables(max_results=0)
    assert list(tables) == [] and not tables.next_marker


# --- 3. long filters -----------------------------------------------------------------------------


def _point_or(keys: list[tuple[str, str]]) -> str:
    return " or ".join(f"(PartitionKey eq '{pk}' and RowKey eq '{rk}')" for pk, rk in keys)


def test_long_filter_raw(raw, table):
    keys = [(f"silo{i % 5}", f"grain{i:03d}") for i in range(120)]
    for pk, rk in keys:
        assert raw.post(f"/{table}", {"PartitionKey": pk, "RowKey": rk, "n": int(rk[5:])}).status == 201
    wanted = keys[::2] + [("silo9", "absent")]  # 61 point keys: 122 comparisons, one key that is not there
    r = raw.get(f"/{table}()?$filter={quote(_point_or(wanted))}")
    assert r.status == 200, r
    assert sorted((e["PartitionKey"], e["RowKey"]) for e in r.json()["value"]) == sorted(keys[::2])
    many = " or ".join(f"n eq {i}" for i in range(201))  # 201 comparisons, none on a key: a full scan
    r = raw.get(f"/{table}()?$filter={quote(many)}")
    assert r.status == 200 and len(r.json()["value"]) == 120, r
    r = raw.get(f"/{table}()?$filter={quote(many)}&$top=7")  # pages through it
    assert r.status == 200 and len(r.json()["value"]) == 7 and "x-ms-continuation-nextpartitionkey" in r.headers


def test_long_filter_sdk(sdk):
    # Orleans' grain directory: 100 addresses per call, 201 comparisons
    keys = [(f"silo{i % 3}", f"grain{i:03d}") for i in range(150)]
    for start in range(0, len(keys), 50):
        for pk in {k[0] for k in keys[start:start + 50]}:
            sdk.submit_transaction([("upsert", {"PartitionKey": p, "RowKey": r}) for p, r in keys[start:start + 50]
                                    if p == pk])
    wanted = keys[:100]
    text = _point_or(wanted) + " or RowKey eq 'x'"
    got = sorted((e["PartitionKey"], e["RowKey"]) for e in sdk.query_entities(text))
    assert got == sorted(wanted)
    got = [(e["PartitionKey"], e["RowKey"]) for e in sdk.query_entities(text, results_per_page=30)]
    assert sorted(got) == sorted(wanted) and len(got) == 100


# --- 4. path-style batches from the legacy Python SDK ----------------------------------------------


def test_path_style_batch_raw(raw, table):
    boundary, changeset = "batch_2", "changeset_2"
    parts = [("POST", f"/{table}", {}, f'{{"PartitionKey": "p", "RowKey": "{i}"}}') for i in range(3)]
    body = batch_body(boundary, changeset, parts, "")  # "POST /<table>": no account segment
    r = raw.post("/$batch", body, headers={"Content-Type": f"multipart/mixed; boundary={boundary}"})
    assert r.status == 202 and r.body.count(b"201 Created") == 3, r
    parts = [("DELETE", f"/{table}(PartitionKey='p',RowKey='{i}')", {"If-Match": "*"}, None) for i in range(3)]
    r = raw.post("/$batch", batch_body(boundary, changeset, parts, ""),
                 headers={"Content-Type": f"multipart/mixed; boundary={boundary}"})
    assert r.status == 202 and r.body.count(b"204 No Content") == 3, r
    assert raw.get(f"/{table}()").json()["value"] == []


def test_path_style_batch_legacy_sdk(cluster, table):
    from azure.cosmosdb.table.tablebatch import TableBatch

    svc = legacy_service(cluster)
    batch = TableBatch()
    for i in range(5):
        batch.insert_entity({"PartitionKey": "p", "RowKey": str(i), "n": i})
    batch.insert_or_merge_entity({"PartitionKey": "p", "RowKey": "m", "n": 9})
    etags = svc.commit_batch(table, batch)
    assert len(etags) == 6 and all(e.startswith('W/"') for e in etags)
    with svc.batch(table) as b:
        b.merge_entity({"PartitionKey": "p", "RowKey": "0", "x": "y"}, if_match=etags[0])
        b.delete_entity("p", "1")
    assert svc.get_entity(table, "p", "0")["x"] == "y"
    assert sorted(e["RowKey"] for e in svc.query_entities(table)) == ["0", "2", "3", "4", "m"]


# --- 5. a SAS with a repeated sig ----------------------------------------------------------------


def _sas(table: str) -> str:
    from datetime import UTC, datetime, timedelta

    return generate_table_sas(AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY), table,
                              permission=TableSasPermissions(read=True, add=True),
                              expiry=datetime.now(UTC) + timedelta(hours=1))


def test_repeated_sig_raw(raw, table):
    token = _sas(table)
    r = raw.get(f"/{table}()?{token}", sign_as=None)
    assert r.status == 200, r
    forged = "sig=" + quote("A" * 43 + "=", safe="")
    for query in (f"{token}&{forged}", f"{forged}&{token}", f"{token}&{token.split('sig=')[0]}sig=x"):
        r = raw.get(f"/{table}()?{query}", sign_as=None)
        assert (r.status, r.code) == (403, "AuthenticationFailed"), (query, r)
        assert b"more than one sig" in r.body


def test_repeated_sig_sdk(cluster, table):
    token = _sas(table)
    with TableClient(cluster.http, table, credential=AzureSasCredential(token)) as t:
        t.create_entity({"PartitionKey": "p", "RowKey": "r"})
    with TableClient(cluster.http, table, credential=AzureSasCredential(token + "&sig=" + "B" * 43 + "%3D")) as t:
        with pytest.raises(HttpResponseError) as info:
            t.get_entity("p", "r")
    assert info.value.status_code == 403
