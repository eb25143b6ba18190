"""The table and service operations of the HTTP frontend (plan stage): Query/Create/Delete/Get Table,
the table ACL, the service properties and stats. Each is ``async (app, rq) -> Response``."""

from __future__ import annotations

import uuid
from email.utils import formatdate
from typing import Any

from frontend.http import odata, xmldocs
from frontend.http.entity_ops import parse_top, prefer
from frontend.http.parse import Request, Services
from frontend.http.render import ODATA_HEADERS, XML_TYPE, Response, odata_headers
from frontend.http.security import check
from rangetable.errors import TableError
from rangetable.table_settings import parse_ttl

TTL_HEADER = "x-rangetable-ttl"  # Create Table: the table's TTL (30d, 12h, 90m, 45s); Get Table answers it


async def query_tables(app: Services, rq: Request) -> Response:
    """GET /Tables — Query Tables."""
    check(rq.auth, "list_tables", None)
    req: dict[str, Any] = {"op": "list_tables", "filter": rq.param("$filter") or None,
                           "top": parse_top(rq.param("$top"))}
    nxt = rq.param("NextTableName")
    if nxt is not None:
        req["next"] = odata.decode_token(nxt)
    out = await app.fe.request(req)
    h = odata_headers(rq, True)
    if out.get("next"):
        h.append((b"x-ms-continuation-nexttablename", odata.encode_token(out["next"]).encode()))
    assert rq.res is not None  # parse() set it
    return Response(200, h, odata.table_feed(out["tables"], rq.level, rq.base, rq.res.account))


async def create_table(app: Services, rq: Request) -> Response:
    """POST /Tables — Create Table."""
    pref = prefer(rq.headers)
    doc = odata.parse_json_object(rq.body)
    name = doc.get("TableName")
    if not isinstance(name, str):
        raise TableError("InvalidInput", "The request body must carry a string TableName.")
    check(rq.auth, "create_table", name)
    # a request id of its own, so the frontend's re-send after a slow answer is not taken for another creator
    req: dict[str, Any] = {"op": "create_table", "table": name, "rid": uuid.uuid4().hex}
    ttl = rq.headers.get(TTL_HEADER)
    if ttl is not None:  # an extension: no Azure service has a table TTL (docs/http.md)
        req["settings"] = {"ttl_s": parse_ttl(ttl)}
    out = await app.fe.request(req)
    name = (out or {}).get("table", name)
    link = f"{rq.base}/Tables('{name}')".encode()
    no_content = pref == "return-no-content"
    h = odata_headers(rq, not no_content) + [(b"location", link), (b"dataserviceid", link)]
    if pref is not None:
        h.append((b"preference-applied", pref.encode()))
    if no_content:
        return Response(204, h)
    assert rq.res is not None  # parse() set it
    return Response(201, h, odata.table_single(name, rq.level, rq.base, rq.res.account))


async def delete_table(app: Services, rq: Request) -> Response:
    """DELETE /Tables('t')."""
    res = rq.res
    assert res is not None  # parse() set it
    check(rq.auth, "delete_table", res.table)
    await app.fe.request({"op": "delete_table", "table": res.table})
    return Response(204, list(ODATA_HEADERS))


async def get_table(app: Services, rq: Request) -> Response:
    """GET /Tables('t') — one table's entry."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: a /Tables('t') URL names its table
    check(rq.auth, "get_table", res.table)
    out = await app.fe.request({"op": "get_table", "table": res.table})
    name = (out or {}).get("table") or res.table
    h = odata_headers(rq, True) + [(TTL_HEADER.encode(), str((out or {}).get("ttl", "none")).encode())]
    return Response(200, h, odata.table_single(name, rq.level, rq.base, res.account))


# --- ACL, service properties, stats ------------------------------------------------------------------


async def get_acl(app: Services, rq: Request) -> Response:
    """GET/HEAD /t?comp=acl — Get Table ACL."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: a /t URL names its table
    check(rq.auth, "acl", res.table)
    acl = await app.fetch_acl(res.table)
    return Response(200, [XML_TYPE], xmldocs.format_acl(acl))


async def set_acl(app: Services, rq: Request) -> Response:
    """PUT /t?comp=acl — Set Table ACL."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: a /t URL names its table
    check(rq.auth, "acl", res.table)
    acl = xmldocs.parse_acl(rq.body)
    await app.fe.request({"op": "set_acl", "table": res.table, "policies": acl})
    app.security.forget_acl(res.table)
    return Response(204)


async def get_properties(app: Services, rq: Request) -> Response:
    """GET /?restype=service&comp=properties."""
    check(rq.auth, "service_read", None)
    props = await app.service_properties(fresh=True)
    return Response(200, [XML_TYPE], xmldocs.format_properties(props))


async def set_properties(app: Services, rq: Request) -> Response:
    """PUT /?restype=service&comp=properties (202)."""
    check(rq.auth, "service_write", None)
    update = xmldocs.parse_properties(rq.body)
    await app.fe.request({"op": "set_service_properties", "properties": update})
    app.forget_properties()
    return Response(202)


async def get_stats(app: Services, rq: Request) -> Response:
    """GET /?restype=service&comp=stats — served on the ``-secondary`` account only, as Azure does (400
    InvalidQueryParameterValue on the primary)."""
    res = rq.res
    assert res is not None  # parse() set it
    if not (res.secondary or app.geo_role == "secondary"):  # a secondary cluster serves it on every account
        raise TableError("InvalidQueryParameterValue", "Get Service Stats is served on the secondary endpoint "
                         f"({res.account}-secondary) only.")
    check(rq.auth, "service_read", None)
    last_sync = await app.last_sync_time()
    body = xmldocs.format_stats("" if last_sync is None else formatdate(int(last_sync), usegmt=True))
    return Response(200, [XML_TYPE], body)
