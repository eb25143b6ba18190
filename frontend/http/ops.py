"""The REST operations (reference §1.2): each turns an HTTP request into native requests.

Every handler is ``async (app, rq) -> Response``; :func:`route` picks one from the resource kind,
the (tunnelled) verb and ``comp``. Entity writes follow the If-Match table of reference §7, inserts
and Create Table the Prefer rules of §1.4, queries the continuation scheme of §5.2. ``$batch`` lives
in :mod:`frontend.http.batch_ops`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from frontend.http import odata, xmldocs
from frontend.http.common import Response, http_date
from frontend.http.security import check
from frontend.http.urls import Resource
from rangetable.errors import TableError
from rangetable.rest_json import json_to_typed

if TYPE_CHECKING:
    from frontend.http.app import Request, RestApp

Handler = Callable[["RestApp", "Request"], Awaitable["Response"]]
# Point operations and entity queries are split in two synchronous halves around their one native
# request (a query's may read several ranges inside the driver), so the listener can run them without
# a coroutine (see RestApp.serve): a Plan checks the request and returns the native request and the
# Finisher that turns its result into the response.
Finisher = Callable[["RestApp", "Request", Any], Response]
Plan = Callable[["RestApp", "Request"], tuple[dict, Finisher]]

ODATA_HEADERS = [(b"cache-control", b"no-cache"), (b"x-content-type-options", b"nosniff"),
                 (b"dataserviceversion", b"3.0;")]
XML_TYPE = (b"content-type", b"application/xml")
MAX_TOP = 1000


def _resp(status: int, headers: list | None = None, body: bytes = b"") -> Response:
    return Response(status, headers if headers is not None else [], body)


def _odata_headers(rq: Request, with_body: bool) -> list[tuple[bytes, bytes]]:
    h = list(ODATA_HEADERS)
    if with_body:
        h.append((b"content-type", odata.CONTENT_TYPES[rq.level]))
    return h


# --- request details ------------------------------------------------------------------------------


def prefer(headers: dict[str, str]) -> str | None:
    """``return-content`` / ``return-no-content`` from the Prefer header (None when absent)."""
    p = headers.get("prefer")
    if p is None:
        return None
    p = p.strip().lower()
    if p == "return-no-content":
        return p
    if p == "return-content":
        return p
    raise TableError("InvalidHeaderValue", "Prefer must be return-content or return-no-content.")


def if_match(headers: dict[str, str], required: bool = False) -> str | None:
    """The If-Match value (None when absent); If-None-Match is not allowed on writes.

    The weak prefix is case-insensitive (RFC 9110 spells it ``W/``, some clients send ``w/``): both
    compare with the entity's ETag, so a stale one is 412. A strong or bare ETag stays 400.
    """
    if "if-none-match" in headers:
        raise TableError("InvalidInput", "If-None-Match is not supported on this operation.")
    v = headers.get("if-match")
    if v is None:
        if required:
            raise TableError("MissingRequiredHeader", "The If-Match header is required for this operation.")
        return None
    v = v.strip()
    return "W/" + v[2:] if v.startswith("w/") else v


def parse_select(text: str | None) -> list[str] | None:
    """``$select=A,B`` as a list (None for none or ``*``)."""
    if text is None or not text.strip():
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names or "*" in names:
        return None
    return names


def parse_top(text: str | None) -> int | None:
    """``$top`` as an int in 1..1000; 400 InvalidInput otherwise."""
    if text is None or text == "":
        return None
    try:
        n = int(text)
    except ValueError:
        raise TableError("InvalidInput", "$top must be an integer.") from None
    if not 1 <= n <= MAX_TOP:
        raise TableError("InvalidInput", "$top must be between 1 and 1000.")
    return n


def entity_body(body: bytes, pk: str | None = None, rk: str | None = None) -> tuple[str, str, dict]:
    """Decode an entity body; with URL keys ``pk``/``rk`` the keys in the body are ignored."""
    doc = odata.parse_json_object(body) if body.strip() else {}
    if pk is not None:
        for k in ("PartitionKey", "RowKey", "PartitionKey@odata.type", "RowKey@odata.type"):
            doc.pop(k, None)
    return json_to_typed(doc, pk=pk, rk=rk)


def write_op(method: str, headers: dict[str, str], res: Resource, body: bytes) -> dict:
    """The native write operation of an entity request (also used for $batch parts)."""
    if method == "POST" and res.kind == "entities":
        if "if-match" in headers or "if-none-match" in headers:
            raise TableError("InvalidInput", "If-Match is not allowed on an insert.")
        pk, rk, props = entity_body(body)
        return {"op": "insert", "pk": pk, "rk": rk, "props": props, "if_match": None}
    if res.kind != "entity":
        raise TableError("MethodNotAllowed")
    if method == "DELETE":
        etag = if_match(headers, required=True)
        return {"op": "delete", "pk": res.pk, "rk": res.rk, "props": None, "if_match": etag}
    etag = if_match(headers)
    _, _, props = entity_body(body, res.pk, res.rk)
    if method == "PUT":
        kind = "insert_or_replace" if etag is None else "replace"
    elif method in ("MERGE", "PATCH"):
        kind = "insert_or_merge" if etag is None else "merge"
    else:
        raise TableError("MethodNotAllowed")
    return {"op": kind, "pk": res.pk, "rk": res.rk, "props": props, "if_match": etag}


# --- entities -------------------------------------------------------------------------------------


def query_entities(app: RestApp, rq: Request) -> tuple[dict, Finisher]:
    """GET /t() — Query Entities (a Plan: one native query, however many ranges it reads)."""
    res = rq.res
    check(rq.auth, "query", res.table)
    select = rq.ctx = parse_select(rq.param("$select"))
    req: dict[str, Any] = {"op": "query", "table": res.table, "filter": rq.param("$filter") or None,
                           "select": select, "top": parse_top(rq.param("$top"))}
    npk = rq.param("NextPartitionKey")
    if npk is not None:
        nrk = rq.param("NextRowKey")  # absent = the start of the partition; present but empty = 400
        req["next"] = [odata.decode_token(npk), "" if nrk is None else odata.decode_token(nrk)]
    return req, _queried


def _queried(app: RestApp, rq: Request, out: dict) -> Response:
    res = rq.res
    ents = out["entities"]
    sas = getattr(rq.auth, "sas", None)
    if sas is not None and getattr(sas, "has_key_range", False):
        ents = [e for e in ents if sas.in_range(e[0], e[1])]
    body = odata.entity_feed(ents, rq.level, rq.base, res.account, res.table, rq.ctx)
    h = _odata_headers(rq, True)
    nxt = out.get("next")
    if nxt:
        h.append((b"x-ms-continuation-nextpartitionkey", odata.encode_token(nxt[0]).encode()))
        h.append((b"x-ms-continuation-nextrowkey", odata.encode_token(nxt[1]).encode()))
    return _resp(200, h, body)


def get_entity(app: RestApp, rq: Request) -> tuple[dict, Finisher]:
    """GET /t(PartitionKey='p',RowKey='r') (a Plan)."""
    res = rq.res
    check(rq.auth, "get", res.table, res.pk, res.rk)
    select = rq.ctx = parse_select(rq.param("$select")) if rq.query else None
    return {"op": "get", "table": res.table, "pk": res.pk, "rk": res.rk, "select": select}, _got_entity


def _got_entity(app: RestApp, rq: Request, ent: list) -> Response:
    res = rq.res
    base = rq.base
    prefix = odata.element_prefix(rq.level, base, res.table)
    body = odata.entity_bytes(ent, rq.level, select=rq.ctx, prefix=prefix, base=base, account=res.account,
                              table=res.table)
    h = _odata_headers(rq, True)
    h.append((b"etag", odata.etag_of(ent[2]).encode()))
    return Response(200, h, body)


def insert_entity(app: RestApp, rq: Request) -> tuple[dict, Finisher]:
    """POST /t — Insert Entity (a Plan: 201 echo, or 204 with ``Prefer: return-no-content``)."""
    res = rq.res
    rq.ctx = prefer(rq.headers)
    op = write_op("POST", rq.headers, res, rq.body)
    check(rq.auth, "insert", res.table, op["pk"], op["rk"])
    return {"op": "write", "table": res.table, "write": op}, _inserted


def _inserted(app: RestApp, rq: Request, ent: list) -> Response:
    res = rq.res
    pref = rq.ctx
    base = rq.base
    link = f"{base}/{odata.edit_link(res.table, ent[0], ent[1])}".encode()
    no_content = pref == "return-no-content"
    h = _odata_headers(rq, not no_content)
    h += [(b"etag", odata.etag_of(ent[2]).encode()), (b"location", link), (b"dataserviceid", link)]
    if pref is not None:
        h.append((b"preference-applied", pref.encode()))
    if no_content:
        return Response(204, h)
    prefix = odata.element_prefix(rq.level, base, res.table)
    body = odata.entity_bytes(ent, rq.level, prefix=prefix, base=base, account=res.account, table=res.table)
    return Response(201, h, body)


def _writer(method: str) -> Plan:
    def write_entity(app: RestApp, rq: Request) -> tuple[dict, Finisher]:
        res = rq.res
        op = write_op(method, rq.headers, res, rq.body)
        check(rq.auth, op["op"], res.table, res.pk, res.rk)
        return {"op": "write", "table": res.table, "write": op}, _written

    write_entity.__doc__ = f"{method} on one entity (a Plan; If-Match semantics of reference §7)."
    return write_entity


def _written(app: RestApp, rq: Request, ent: list | None) -> Response:
    h = list(ODATA_HEADERS)
    if ent is not None:
        h.append((b"etag", odata.etag_of(ent[2]).encode()))
    return Response(204, h)


# --- tables ---------------------------------------------------------------------------------------


async def query_tables(app: RestApp, rq: Request) -> Response:
    """GET /Tables — Query Tables."""
    check(rq.auth, "list_tables", None)
    req: dict[str, Any] = {"op": "list_tables", "filter": rq.param("$filter") or None,
                           "top": parse_top(rq.param("$top"))}
    nxt = rq.param("NextTableName")
    if nxt is not None:
        req["next"] = odata.decode_token(nxt)
    out = await app.fe.request(req)
    h = _odata_headers(rq, True)
    if out.get("next"):
        h.append((b"x-ms-continuation-nexttablename", odata.encode_token(out["next"]).encode()))
    return _resp(200, h, odata.table_feed(out["tables"], rq.level, rq.base, rq.res.account))


async def create_table(app: RestApp, rq: Request) -> Response:
    """POST /Tables — Create Table."""
    pref = prefer(rq.headers)
    doc = odata.parse_json_object(rq.body)
    name = doc.get("TableName")
    if not isinstance(name, str):
        raise TableError("InvalidInput", "The request body must carry a string TableName.")
    check(rq.auth, "create_table", name)
    out = await app.fe.request({"op": "create_table", "table": name})
    name = (out or {}).get("table", name)
    link = f"{rq.base}/Tables('{name}')".encode()
    no_content = pref == "return-no-content"
    h = _odata_headers(rq, not no_content) + [(b"location", link), (b"dataserviceid", link)]
    if pref is not None:
        h.append((b"preference-applied", pref.encode()))
    if no_content:
        return _resp(204, h)
    return _resp(201, h, odata.table_single(name, rq.level, rq.base, rq.res.account))


async def delete_table(app: RestApp, rq: Request) -> Response:
    """DELETE /Tables('t')."""
    check(rq.auth, "delete_table", rq.res.table)
    await app.fe.request({"op": "delete_table", "table": rq.res.table})
    return _resp(204, list(ODATA_HEADERS))


async def get_table(app: RestApp, rq: Request) -> Response:
    """GET /Tables('t') — one table's entry."""
    check(rq.auth, "get_table", rq.res.table)
    out = await app.fe.request({"op": "get_table", "table": rq.res.table})
    name = (out or {}).get("table") or rq.res.table
    return _resp(200, _odata_headers(rq, True), odata.table_single(name, rq.level, rq.base, rq.res.account))


# --- ACL, service properties, stats ------------------------------------------------------------------


async def get_acl(app: RestApp, rq: Request) -> Response:
    """GET/HEAD /t?comp=acl — Get Table ACL."""
    check(rq.auth, "acl", rq.res.table)
    acl = await app._fetch_acl(rq.res.table)
    return _resp(200, [XML_TYPE], xmldocs.format_acl(acl))


async def set_acl(app: RestApp, rq: Request) -> Response:
    """PUT /t?comp=acl — Set Table ACL."""
    check(rq.auth, "acl", rq.res.table)
    acl = xmldocs.parse_acl(rq.body)
    await app.fe.request({"op": "set_acl", "table": rq.res.table, "policies": acl})
    app.security.forget_acl(rq.res.table)
    return _resp(204)


async def get_properties(app: RestApp, rq: Request) -> Response:
    """GET /?restype=service&comp=properties."""
    check(rq.auth, "service_read", None)
    props = await app.service_properties(fresh=True)
    return _resp(200, [XML_TYPE], xmldocs.format_properties(props))


async def set_properties(app: RestApp, rq: Request) -> Response:
    """PUT /?restype=service&comp=properties (202)."""
    check(rq.auth, "service_write", None)
    update = xmldocs.parse_properties(rq.body)
    await app.fe.request({"op": "set_service_properties", "properties": update})
    app.forget_properties()
    return _resp(202)


async def get_stats(app: RestApp, rq: Request) -> Response:
    """GET /?restype=service&comp=stats — served on the ``-secondary`` account only, as Azure does (400
    InvalidQueryParameterValue on the primary)."""
    if not rq.res.secondary:
        raise TableError("InvalidQueryParameterValue", "Get Service Stats is served on the secondary endpoint "
                         f"({rq.res.account}-secondary) only.")
    check(rq.auth, "service_read", None)
    return _resp(200, [XML_TYPE], xmldocs.format_stats(http_date().decode()))


# --- CORS -------------------------------------------------------------------------------------------


async def preflight(app: RestApp, rq: Request) -> Response:
    """OPTIONS — a CORS preflight, answered from the service properties' CORS rules."""
    origin = rq.headers.get("origin")
    method = rq.headers.get("access-control-request-method")
    if not origin or not method:
        raise TableError("InvalidHeaderValue", "A required CORS header is not present.")
    requested = [h.strip() for h in rq.headers.get("access-control-request-headers", "").split(",") if h.strip()]
    rule = xmldocs.cors_match(await app.service_properties(), origin, method, requested)
    if rule is None:
        raise TableError("CorsPreflightFailure",
                         "CORS not enabled or no matching rule found for this request.")
    h = [(b"access-control-allow-origin", b"*" if _any_origin(rule) else origin.encode("latin-1")),
         (b"access-control-allow-methods", method.upper().encode("latin-1")),
         (b"access-control-max-age", str(int(rule.get("MaxAgeInSeconds") or 0)).encode())]
    if requested:
        h.append((b"access-control-allow-headers", ",".join(requested).encode("latin-1")))
    if not _any_origin(rule):
        h += [(b"access-control-allow-credentials", b"true"), (b"vary", b"Origin")]
    return _resp(200, h)


def _any_origin(rule: dict) -> bool:
    return "*" in [o.strip() for o in (rule.get("AllowedOrigins") or "").split(",")]


NO_MATCH: dict = {}  # CORS rules exist, none matched: the answer only says Vary: Origin


async def cors_rule_for(app: RestApp, rq: Request, method: str) -> dict | None:
    """The CORS rule matching an actual (non-preflight) request with an Origin header; :data:`NO_MATCH`
    when the service has CORS rules but none matches, None when it has none."""
    try:
        props = await app.service_properties()
    except TableError:
        return None
    rule = xmldocs.cors_match(props, rq.headers.get("origin", ""), method)
    if rule is None and (props or {}).get("cors"):
        return NO_MATCH
    return rule


def cors_headers(rule: dict, origin: str) -> list[tuple[bytes, bytes]]:
    """Response headers for a request whose Origin matched ``rule`` (:data:`NO_MATCH`: only ``Vary``,
    so that caches keep answers to different origins apart, as Azure does)."""
    if not rule:
        return [(b"vary", b"Origin")]
    h = [(b"access-control-allow-origin", b"*" if _any_origin(rule) else origin.encode("latin-1"))]
    exposed = rule.get("ExposedHeaders")
    if exposed:
        h.append((b"access-control-expose-headers", exposed.encode("latin-1")))
    if not _any_origin(rule):
        h += [(b"access-control-allow-credentials", b"true"), (b"vary", b"Origin")]
    return h


# --- routing ----------------------------------------------------------------------------------------


async def not_allowed(app: RestApp, rq: Request) -> Response:
    """A verb this resource does not support."""
    raise TableError("MethodNotAllowed")


PLANS: dict[tuple[str, str], Plan] = {
    ("entity", "GET"): get_entity, ("entities", "POST"): insert_entity, ("entity", "PUT"): _writer("PUT"),
    ("entity", "MERGE"): _writer("MERGE"), ("entity", "PATCH"): _writer("PATCH"),
    ("entity", "DELETE"): _writer("DELETE"), ("entities", "GET"): query_entities,
}
_PLAN_KINDS = frozenset(kind for kind, _ in PLANS)


def plan_for(res: Resource, method: str, comp: str | None) -> Plan | None:
    """The Plan of a point operation or entity query (None for every other request: :func:`route` has
    its handler)."""
    if comp is not None or res.kind not in _PLAN_KINDS:
        return None
    return PLANS.get((res.kind, "GET" if method == "HEAD" else method))


def route(res: Resource, method: str, comp: str | None) -> Handler:
    """The handler for a resource, effective verb and ``comp`` parameter (point operations: see
    :func:`plan_for`)."""
    if method == "HEAD":
        method = "GET"
    kind = res.kind
    if kind == "service":
        if (res.param("restype") or "").lower() != "service":
            raise TableError("InvalidQueryParameterValue", "Value for one of the query parameters specified "
                             "in the request URI is invalid.")
        if comp == "properties":
            return {"GET": get_properties, "PUT": set_properties}.get(method, not_allowed)
        if comp == "stats":
            return get_stats if method == "GET" else not_allowed
        raise TableError("InvalidQueryParameterValue", "Value for one of the query parameters specified in "
                         "the request URI is invalid.")
    if comp is not None:
        if comp == "acl" and kind == "entities":
            return {"GET": get_acl, "PUT": set_acl}.get(method, not_allowed)
        raise TableError("InvalidQueryParameterValue", "Value for one of the query parameters specified in "
                         "the request URI is invalid.")
    if not _ROUTES:
        from frontend.http.batch_ops import run_batch

        _ROUTES.update({
            ("tables", "GET"): query_tables, ("tables", "POST"): create_table,
            ("table", "DELETE"): delete_table, ("table", "GET"): get_table,
            ("batch", "POST"): run_batch,
        })
    return _ROUTES.get((kind, method), not_allowed)


_ROUTES: dict[tuple[str, str], Handler] = {}
