"""The entity operations of the HTTP frontend (plan stage): point operations and entity queries.

Each is a *Plan* — a synchronous check of the request returning its one native request and the
*Finisher* that renders that request's result — so the built-in listener runs them without a
coroutine (:meth:`frontend.http.app.RestApp.serve`) and the ASGI path awaits the same native request
in between. Entity writes follow the If-Match table of reference §7, inserts the Prefer rules of §1.4,
queries the continuation scheme of §5.2; the request-detail parsers here serve ``$batch`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from frontend.http import odata
from frontend.http.parse import Request, Resource
from frontend.http.render import ODATA_HEADERS, Response, odata_headers
from frontend.http.security import check
from frontend.http.write_extension import COUNTERS_HEADER, add_extension, counter_values, retry_id
from rangetable.errors import TableError
from rangetable.rest_json import json_to_typed

# Point operations and entity queries are split in two synchronous halves around their one native
# request (a query's may read several ranges inside the driver), so the listener can run them without
# a coroutine (see RestApp.serve): a Plan checks the request and returns the native request and the
# Finisher that turns its result into the response.
Finisher = Callable[[Request, Any], Response]
Plan = Callable[[Request], tuple[dict, Finisher]]
MAX_TOP = 1000


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
    """``$top`` as an int in 0..1000 (0: an empty page, as Azure answers); 400 InvalidInput otherwise."""
    if text is None or text == "":
        return None
    try:
        n = int(text)
    except ValueError:
        raise TableError("InvalidInput", "$top must be an integer.") from None
    if not 0 <= n <= MAX_TOP:
        raise TableError("InvalidInput", "$top must be between 0 and 1000.")
    return n


def entity_body(body: bytes, pk: str | None = None, rk: str | None = None) -> tuple[str, str, dict]:
    """Decode an entity body; with URL keys ``pk``/``rk`` the keys in the body are ignored."""
    doc = odata.parse_json_object(body) if body.strip() else {}
    if pk is not None:
        for k in ("PartitionKey", "RowKey", "PartitionKey@odata.type", "RowKey@odata.type"):
            doc.pop(k, None)
    return json_to_typed(doc, pk=pk, rk=rk)


def write_op(method: str, headers: dict[str, str], res: Resource, body: bytes) -> dict:
    """The native write operation of an entity request (also used for $batch parts), with
    rangetable's extension headers (conditions and counters, :mod:`frontend.http.write_extension`)."""
    return add_extension(azure_write_op(method, headers, res, body), headers)


def azure_write_op(method: str, headers: dict[str, str], res: Resource, body: bytes) -> dict:
    """The native write operation of an entity request, as Azure defines it."""
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


# --- entity plans -----------------------------------------------------------------------------------


def query_entities(rq: Request) -> tuple[dict, Finisher]:
    """GET /t() — Query Entities (a Plan: one native query, however many ranges it reads)."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: an entity URL names its table
    check(rq.auth, "query", res.table)
    select = rq.ctx = parse_select(rq.param("$select"))
    req: dict[str, Any] = {"op": "query", "table": res.table, "filter": rq.param("$filter") or None,
                           "select": select, "top": parse_top(rq.param("$top"))}
    if res.secondary:
        req["secondary"] = True  # read from an in-sync follower (eventually consistent)
    stale = rq.headers.get("x-ms-rangetable-index-staleness")
    if stale is not None:  # rangetable's own: how far an answer through an index may lag (docs/indexes.md)
        try:
            req["staleness"] = float(stale)
        except ValueError:
            raise TableError("InvalidHeaderValue", "x-ms-rangetable-index-staleness must be seconds") from None
    npk = rq.param("NextPartitionKey")
    if npk is not None:
        nrk = rq.param("NextRowKey")  # absent = the start of the partition; present but empty = 400
        req["next"] = [odata.decode_token(npk), "" if nrk is None else odata.decode_token(nrk)]
    return req, _queried


def _queried(rq: Request, out: dict) -> Response:
    res = rq.res
    assert res is not None and res.table is not None  # parsed: an entity URL names its table
    ents = out["entities"]
    sas = getattr(rq.auth, "sas", None)
    if sas is not None and getattr(sas, "has_key_range", False):
        ents = [e for e in ents if sas.in_range(e[0], e[1])]
    body = odata.entity_feed(ents, rq.level, rq.base, res.account, res.table, rq.ctx)
    h = odata_headers(rq, True)
    through = out.get("plan")
    if through is not None:  # answered through an index, or scanned because it was behind (docs/indexes.md)
        how = f"scan; {through['fallback']}" if through.get("fallback") else f"index {through['index']}; " \
              f"fresh-wait-ms={through['fresh_wait_ms']:g}"
        h.append((b"x-ms-rangetable-plan", how.encode()))
    nxt = out.get("next")
    if nxt:
        h.append((b"x-ms-continuation-nextpartitionkey", odata.encode_token(nxt[0]).encode()))
        h.append((b"x-ms-continuation-nextrowkey", odata.encode_token(nxt[1]).encode()))
    return Response(200, h, body)


def get_entity(rq: Request) -> tuple[dict, Finisher]:
    """GET /t(PartitionKey='p',RowKey='r') (a Plan)."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: an entity URL names its table
    check(rq.auth, "get", res.table, res.pk, res.rk)
    select = rq.ctx = parse_select(rq.param("$select")) if rq.query else None
    req: dict[str, Any] = {"op": "get", "table": res.table, "pk": res.pk, "rk": res.rk, "select": select}
    if res.secondary:
        req["secondary"] = True
    return req, _got_entity


def _got_entity(rq: Request, ent: list) -> Response:
    res = rq.res
    assert res is not None and res.table is not None  # parsed: an entity URL names its table
    base = rq.base
    prefix = odata.element_prefix(rq.level, base, res.table)
    body = odata.entity_bytes(ent, rq.level, select=rq.ctx, prefix=prefix, base=base, account=res.account,
                              table=res.table)
    h = odata_headers(rq, True)
    h.append((b"etag", odata.etag_of(ent[2]).encode()))
    return Response(200, h, body)


def insert_entity(rq: Request) -> tuple[dict, Finisher]:
    """POST /t — Insert Entity (a Plan: 201 echo, or 204 with ``Prefer: return-no-content``)."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: an entity URL names its table
    rq.ctx = prefer(rq.headers)
    op = write_op("POST", rq.headers, res, rq.body)
    check(rq.auth, "insert", res.table, op["pk"], op["rk"])
    return {"op": "write", "table": res.table, "write": op}, _inserted


def _inserted(rq: Request, ent: list) -> Response:
    res = rq.res
    assert res is not None and res.table is not None  # parsed: an entity URL names its table
    pref = rq.ctx
    base = rq.base
    link = f"{base}/{odata.edit_link(res.table, ent[0], ent[1])}".encode()
    no_content = pref == "return-no-content"
    h = odata_headers(rq, not no_content)
    h += [(b"etag", odata.etag_of(ent[2]).encode()), (b"location", link), (b"dataserviceid", link)]
    if pref is not None:
        h.append((b"preference-applied", pref.encode()))
    if no_content:
        return Response(204, h)
    prefix = odata.element_prefix(rq.level, base, res.table)
    body = odata.entity_bytes(ent, rq.level, prefix=prefix, base=base, account=res.account, table=res.table)
    return Response(201, h, body)


def _writer(method: str) -> Plan:
    def write_entity(rq: Request) -> tuple[dict, Finisher]:
        res = rq.res
        assert res is not None and res.table is not None  # parsed: an entity URL names its table
        op = write_op(method, rq.headers, res, rq.body)
        check(rq.auth, op["op"], res.table, res.pk, res.rk)
        rq.ctx = op
        req = {"op": "write", "table": res.table, "write": op}
        rid = retry_id(rq.headers, res.account, [op])
        if rid is not None:
            req["rid"] = rid
        return req, _written

    write_entity.__doc__ = f"{method} on one entity (a Plan; If-Match semantics of reference §7)."
    return write_entity


def _written(rq: Request, ent: list | None) -> Response:
    h = list(ODATA_HEADERS)
    if ent is not None:
        h.append((b"etag", odata.etag_of(ent[2]).encode()))
        counted = counter_values(rq.ctx, ent)
        if counted is not None:
            h.append((COUNTERS_HEADER, counted.encode()))
    return Response(204, h)


PLANS: dict[tuple[str, str], Plan] = {
    ("entity", "GET"): get_entity, ("entities", "POST"): insert_entity, ("entity", "PUT"): _writer("PUT"),
    ("entity", "MERGE"): _writer("MERGE"), ("entity", "PATCH"): _writer("PATCH"),
    ("entity", "DELETE"): _writer("DELETE"), ("entities", "GET"): query_entities,
}
