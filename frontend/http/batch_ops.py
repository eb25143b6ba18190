"""``POST /$batch`` — entity group transactions (reference §6).

The changeset's operations become one native ``batch`` request (one RocksDB WriteBatch on the
partition server: all or nothing). The answer is always 202 with a multipart body unless the whole
request is unusable (malformed multipart, no operation, authentication, > 4 MiB, server busy): an
operation that fails is reported as the changeset's only part, with its status, its Content-ID and
an ``odata.error`` whose message starts with the operation's 0-based index — what the SDK turns
into ``TableTransactionError(index=…)``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from frontend.http import fastpath, odata
from frontend.http.batch import (
    SubRequest,
    SubResponse,
    format_parts,
    header_text,
    http_part,
    parse_batch,
    response_part,
)
from frontend.http.entity_ops import prefer, write_op
from frontend.http.parse import XMETHODS, Request, Resource, Services, parse_query, parse_resource
from frontend.http.render import ODATA_HEADERS, Response, iso_now
from frontend.http.security import check
from frontend.http.write_extension import COUNTERS, counter_values, retry_id
from rangetable.errors import TableError

_HDRS = [(k.decode(), v.decode()) for k, v in ODATA_HEADERS]
_CONTENT_TYPES = {level: ctype.decode() for level, ctype in odata.CONTENT_TYPES.items()}
_HDRS_TEXT = header_text(_HDRS)


def split_url_plain(url: str) -> tuple[str, str, str]:
    """``(netloc, path, query)`` of an absolute URL (where :func:`frontend.http.fastpath.split_url` declines)."""
    parts = urlsplit(url)
    return parts.netloc, parts.path, parts.query


def sub_resource(rq: Request, sub: SubRequest) -> Resource:
    """The resource a batch operation's URL (absolute or relative) addresses.

    A path without the batch URL's account segment (``POST /mytable`` in a batch sent to
    ``/devstoreaccount1/$batch``, what the legacy ``azure-cosmosdb-table`` SDK writes: right for
    Azure's host-style URLs) is resolved against the batch URL's base, as a relative one is."""
    url = sub.url
    if "://" in url:
        split = fastpath.split_url(url)
        host, path, qs = split if split is not None else split_url_plain(url)
    else:
        path, _, qs = url.partition("?")
        host = rq.host
        if not path.startswith("/"):
            assert rq.res is not None  # parse() set it: this is the batch URL's
            path = f"/{rq.res.account}/{path}"
        else:
            base = rq.raw_path[: rq.raw_path.rfind("/")]  # "/devstoreaccount1" path style, "" host style
            if base and not path.startswith(base + "/"):
                path = base + path
    return parse_resource(path, parse_query(qs) if qs else {}, host)


def _effective_method(sub: SubRequest) -> str:
    xm = sub.headers.get("x-http-method")
    if xm is None:
        return sub.method
    if sub.method != "POST":
        raise TableError("XMethodNotUsingPost")
    if xm.upper() not in XMETHODS:
        raise TableError("XMethodIncorrectValue")
    return xm.upper()


def _error_part(rq: Request, exc: TableError, index: int, content_id: str | None) -> SubResponse:
    body = odata.error_json(exc, rq.request_id, iso_now(), index)
    headers = _HDRS + [("Content-Type", _CONTENT_TYPES[odata.MINIMAL])]
    return SubResponse(exc.status_code, headers, body, content_id)


def _reply(rq: Request, parts: list[SubResponse], changeset: bool = True) -> Response:
    return _reply_parts([response_part(r) for r in parts], changeset)


def _reply_parts(parts: list[bytes], changeset: bool = True) -> Response:
    ctype, body = format_parts(parts, changeset)
    return Response(202, [(b"content-type", ctype.encode()), *ODATA_HEADERS], body)


async def _single_get(app: Services, rq: Request, sub: SubRequest) -> Response:
    """A lone GET of one entity outside a changeset."""
    try:
        if _effective_method(sub) != "GET":
            raise TableError("InvalidInput", "Only a GET may appear outside a changeset.")
        res = sub_resource(rq, sub)
        if res.kind != "entity":
            raise TableError("InvalidInput", "A batch query must address one entity.")
        assert res.table is not None  # an entity URL names its table
        check(rq.auth, "get", res.table, res.pk, res.rk)
        level = odata.metadata_level(sub.headers.get("accept"))
        ent = await app.fe.request({"op": "get", "table": res.table, "pk": res.pk, "rk": res.rk})
    except TableError as exc:
        if exc.retriable:
            raise
        return _reply(rq, [_error_part(rq, exc, 0, sub.content_id)], changeset=False)
    prefix = odata.element_prefix(level, rq.base, res.table)
    body = odata.entity_text(ent, level, prefix=prefix, base=rq.base, account=res.account, table=res.table)
    headers = _HDRS + [("Content-Type", _CONTENT_TYPES[level]), ("ETag", odata.etag_of(ent[2]))]
    return _reply(rq, [SubResponse(200, headers, body.encode(), sub.content_id)], changeset=False)


async def run_batch(app: Services, rq: Request) -> Response:
    """POST /$batch."""
    batch = parse_batch(rq.headers.get("content-type"), rq.body)
    if batch.changeset is None:
        return await _single_get(app, rq, batch.singles[0])
    subs = batch.changeset
    if not subs:
        raise TableError("InvalidInput", "The changeset contains no operation.")
    ops: list[dict] = []
    meta: list[tuple[str | None, str, Resource]] = []  # (prefer, level, resource) per op
    table: str | None = None
    lower_table = ""
    assert rq.res is not None  # parse() set it
    account = rq.res.account
    auth = rq.auth
    resources: dict[str, Resource] = {}  # by URL: the inserts of a batch share theirs (read-only)
    levels: dict[str | None, str] = {}  # by Accept header (the same for every operation of the SDK)
    for i, sub in enumerate(subs):
        try:
            headers = sub.headers
            method = sub.method if "x-http-method" not in headers else _effective_method(sub)
            if method == "GET":
                raise TableError("InvalidInput", "A GET may not appear inside a changeset.")
            res = resources.get(sub.url)
            if res is None:
                res = resources[sub.url] = sub_resource(rq, sub)
            if res.kind != "entity" and res.kind != "entities":
                raise TableError("InvalidInput", "A batch operation must address an entity or an entity set.")
            assert res.table is not None  # an entity or entity-set URL names its table
            if res.account != account:
                raise TableError("InvalidInput", "All batch operations must address the batch's account.")
            if table is None:
                table = res.table
                lower_table = table.lower()
            elif res.table != table and res.table.lower() != lower_table:
                raise TableError("InvalidInput", "All operations of a batch must address the same table.")
            op = write_op(method, headers, res, sub.body)
            kind = op["op"]
            check(auth, kind, res.table, op["pk"], op["rk"])
            pref = prefer(headers) if kind == "insert" else None
            accept = headers.get("accept")
            level = levels.get(accept)
            if level is None:
                level = levels[accept] = odata.metadata_level(accept)
        except TableError as exc:
            if exc.error_code.startswith(("Authentication", "Authorization")):
                raise
            return _reply(rq, [_error_part(rq, exc, i, sub.content_id)])
        ops.append(op)
        meta.append((pref, level, res))
    try:
        req: dict[str, Any] = {"op": "batch", "table": table, "ops": ops}
        rid = retry_id(rq.headers, account, ops)
        if rid is not None:
            req["rid"] = rid
        results = await app.fe.request(req)
    except TableError as exc:
        if exc.retriable or exc.error_code == "RequestBodyTooLarge":
            raise
        i = exc.index if exc.index is not None and 0 <= exc.index < len(subs) else 0
        return _reply(rq, [_error_part(rq, exc, i, subs[i].content_id)])
    base = rq.base
    etag_of = odata.etag_of
    parts = []
    for sub, op, (pref, level, res), ent in zip(subs, ops, meta, results, strict=True):
        cid = sub.content_id
        if ent is None:
            parts.append(http_part(204, cid, _HDRS_TEXT))
        elif op["op"] != "insert":
            counted = counter_values(op, ent)
            extra = "" if counted is None else f"\r\n{COUNTERS}: {counted}"
            parts.append(http_part(204, cid, f"{_HDRS_TEXT}\r\nETag: {etag_of(ent[2])}{extra}"))
        else:
            parts.append(_insert_part(base, sub, pref, level, res, ent))
    return _reply_parts(parts)


def _insert_part(base: str, sub: SubRequest, pref: str | None, level: str, res: Resource, ent: Any) -> bytes:
    """The response part of an insert that succeeded."""
    assert res.table is not None  # run_batch took only entity and entity-set URLs, which name their table
    link = f"{base}/{odata.edit_link(res.table, ent[0], ent[1])}"
    headers = f"{_HDRS_TEXT}\r\nETag: {odata.etag_of(ent[2])}\r\nLocation: {link}\r\nDataServiceId: {link}"
    if pref is not None:
        headers += f"\r\nPreference-Applied: {pref}"
    if pref == "return-no-content":
        return http_part(204, sub.content_id, headers)
    headers += f"\r\nContent-Type: {_CONTENT_TYPES[level]}"
    prefix = odata.element_prefix(level, base, res.table)
    body = odata.entity_bytes(ent, level, prefix=prefix, base=base, account=res.account, table=res.table)
    return http_part(201, sub.content_id, headers, body)
