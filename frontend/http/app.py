"""The ASGI app of the HTTP frontend: Azure Table REST on top of the frontend's Handler.

Framework-free: one callable reads the request (body capped at 4 MiB), parses the URL
(:mod:`frontend.http.urls`), authenticates (:mod:`frontend.http.security`), runs the operation
(:mod:`frontend.http.ops`) through :class:`frontend.aio.AioFrontend`, and writes the response with
the standard headers (``x-ms-request-id``, ``x-ms-version``, ``Date``, the client request id echo,
CORS). Errors become Azure's error bodies — ``odata.error`` JSON for OData operations, XML for the
others — with ``x-ms-error-code``; nothing a client sends produces a 5xx or a stack trace.

Two entry points share that code: :meth:`RestApp.respond` (a coroutine, for ASGI servers) and
:meth:`RestApp.serve` (the built-in listener), which runs the point operations — get, insert, update,
merge, delete one entity — and entity queries, the SDK's bulk of requests, without a coroutine or a
Task: each is a synchronous *plan* (checks, native request) and *finisher* (response) around
``AioFrontend.submit``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from frontend.http import odata, ops
from frontend.http.common import Response, http_date, iso_now
from frontend.http.security import Security
from frontend.http.urls import SECONDARY_SUFFIX, Resource, parse_query, parse_resource
from frontend.http.versions import DEFAULT_VERSION, VERSION_HEADERS, check_version
from frontend.metrics import Answers
from rangetable.errors import TableError

log = logging.getLogger("rangetable.http")

MAX_BODY = 4 * 1024 * 1024  # larger bodies get 413 RequestBodyTooLarge
DRAIN_LIMIT = 64 * 1024 * 1024  # beyond this we stop reading and answer at once
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "MERGE", "PATCH", "DELETE", "OPTIONS"})
XMETHODS = frozenset({"GET", "MERGE", "PATCH", "DELETE"})
PROPS_TTL_S = 5.0
MULTIPLE = "\x00multiple"  # the value standing for a repeated X-HTTP-Method header

_RID_PREFIX = str(uuid.uuid4())[:24]
_rid_counter = itertools.count(1)
_DEFAULT_VERSION_HEADER = DEFAULT_VERSION.encode()
READS = frozenset({"GET", "HEAD"})  # the verbs a read-only secondary serves


def next_request_id() -> str:
    """A UUID-shaped request id, unique per process run (a random prefix and a counter)."""
    return f"{_RID_PREFIX}{next(_rid_counter) & 0xFFFFFFFFFFFF:012x}"


class Request:
    """One HTTP request as the operations see it."""

    __slots__ = ("method", "raw_path", "query_string", "query", "headers", "host", "scheme", "body",
                 "request_id", "version", "res", "auth", "xml_errors", "level", "cors_rule", "client_ip", "ctx",
                 "_base")

    def __init__(self, method: str, raw_path: str, query_string: str, headers: dict[str, str],
                 client_ip: str | None = None, scheme: str = "http") -> None:
        self.method: str = method.upper()
        self.raw_path: str = raw_path
        self.query_string: str = query_string
        self.headers: dict[str, str] = headers  # lower-case names; a repeated X-HTTP-Method is "\x00multiple"
        self.host: str = headers.get("host") or "127.0.0.1"
        self.scheme: str = scheme
        self.client_ip: str | None = client_ip
        self.body = b""
        self.request_id = next_request_id()
        self.version = headers.get("x-ms-version") or DEFAULT_VERSION
        self.query: dict[str, list[str]] = {}
        self.res: Resource | None = None
        self.auth: Any = None
        self.xml_errors = False
        self.level = odata.MINIMAL
        self.cors_rule: dict | None = None
        self.ctx: Any = None  # what an operation keeps between its native request and its answer
        self._base: str | None = None

    @classmethod
    def from_scope(cls, scope: dict) -> Request:
        """The request an ASGI ``http`` scope describes (the body is read separately)."""
        raw = scope.get("raw_path")
        raw_path = raw.decode("latin-1").split("?", 1)[0] if raw else scope["path"]
        headers: dict[str, str] = {}
        xm = 0
        for k, v in scope["headers"]:
            name = k.decode("latin-1").lower()
            if name == "x-http-method":
                xm += 1
            headers[name] = v.decode("latin-1")
        if xm > 1:
            headers["x-http-method"] = MULTIPLE
        client = scope.get("client")
        return cls(scope["method"], raw_path, (scope.get("query_string") or b"").decode("latin-1"), headers,
                   client[0] if client else None, scope.get("scheme") or "http")

    def param(self, name: str) -> str | None:
        """The first value of a query parameter."""
        v = self.query.get(name)
        return v[0] if v else None

    @property
    def base(self) -> str:
        """The account's base URL as the client addressed it (for odata.metadata links)."""
        base = self._base
        if base is None:
            assert self.res is not None
            first = self.raw_path.lstrip("/").split("/", 1)[0]
            if first == self.res.account or not self.res.account:
                base = f"{self.scheme}://{self.host}/{self.res.account}"
            elif self.res.secondary and first == self.res.account + SECONDARY_SUFFIX:
                base = f"{self.scheme}://{self.host}/{first}"  # links of a secondary read stay on the secondary
            else:
                base = f"{self.scheme}://{self.host}"
            self._base = base
        return base


class RestApp:
    """The ASGI callable. ``fe`` is an :class:`frontend.aio.AioFrontend` (started on lifespan startup)."""

    def __init__(self, fe: Any, accounts: list[str] | None = None, own_frontend: bool = True,
                 oauth: str = "") -> None:
        self.fe = fe
        self.own_frontend = own_frontend
        self.security = Security(accounts or [], self._fetch_acl, oauth)
        self._props: tuple[float, dict] | None = None
        self._submit = getattr(fe, "submit", None)  # AioFrontend.submit: the callback path of serve()
        self.answers = Answers()  # responses by (method, status code), for the Prometheus metrics

    # --- shared state ---------------------------------------------------------------------------

    async def _fetch_acl(self, table: str) -> dict:
        res = await self.fe.request({"op": "get_acl", "table": table})
        return (res or {}).get("policies") or {}

    async def service_properties(self, fresh: bool = False) -> dict:
        """The service properties (cached for a few seconds)."""
        now = time.monotonic()
        if not fresh and self._props is not None and now - self._props[0] < PROPS_TTL_S:
            return self._props[1]
        try:
            res = await self.fe.request({"op": "get_service_properties"})
        except TableError as exc:
            if self._props is not None and exc.retriable:
                return self._props[1]
            raise
        props = (res or {}).get("properties") if isinstance(res, dict) else {}
        self._props = (now, props or {})
        return self._props[1]

    def forget_properties(self) -> None:
        """Drop the cached service properties (after a Set through this frontend)."""
        self._props = None

    # --- ASGI -----------------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                try:
                    if self.own_frontend:
                        await self.fe.start()
                except Exception as exc:  # pragma: no cover - reported to the server
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if self.own_frontend:
                    await self.fe.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _read_body(self, rq: Request, receive: Any) -> bool:
        """Read the body; False when it is over the limit (the error is then already decided)."""
        declared = rq.headers.get("content-length")
        if declared is not None:
            try:
                n = int(declared)
            except ValueError:
                raise TableError("InvalidHeaderValue", "The Content-Length header is not valid.") from None
            if n > DRAIN_LIMIT:
                return False
            if n == 0:
                return True  # nothing to read: skip a round trip through the server
        elif "transfer-encoding" not in rq.headers:
            return True
        chunks = []
        size = 0
        too_big = False
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                too_big = True
                if size > DRAIN_LIMIT:
                    return False
            elif chunk:
                chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        if too_big:
            return False
        rq.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return True

    async def _http(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            rq = Request.from_scope(scope)
        except Exception:  # undecodable scope: answer something sane
            await send({"type": "http.response.start", "status": 400, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        try:
            too_big = not await self._read_body(rq, receive)
        except TableError as exc:
            resp = self.finish(rq, self.error_response(rq, exc))
        else:
            resp = await self.respond(rq, too_big)
        await send({"type": "http.response.start", "status": resp.status, "headers": resp.headers})
        await send({"type": "http.response.body", "body": b"" if rq.method == "HEAD" else resp.body})

    async def respond(self, rq: Request, too_big: bool = False) -> Response:
        """Answer one request whose body has been read (``too_big``: it was over :data:`MAX_BODY`).

        The server-neutral core of the app (the ASGI callable calls it; the built-in listener calls
        :meth:`serve`, which does the same). Never raises; the response carries the standard headers
        (see :meth:`finish`).
        """
        try:
            method, comp = self._prepare(rq, too_big)
        except Exception as exc:
            return self.finish(rq, self._failure(rq, exc))
        return await self._complete(rq, method, comp)

    def serve(self, rq: Request, too_big: bool, done: Callable[[Response], None]) -> None:
        """:meth:`respond`, handing the response to ``done`` (once) instead of returning it.

        A point operation or entity query (:data:`ops.PLANS`) under Shared Key, without ``Origin``, runs without a
        coroutine: its native request goes to ``fe.submit`` and its answer is turned into the response
        in the callback — possibly before this returns. Everything else runs :meth:`respond` in a Task.
        """
        try:
            method, comp = self._prepare(rq, too_big)
            plan = None
            if (self._submit is not None and method != "OPTIONS" and "origin" not in rq.headers
                    and self.security.acl_table(rq.query, rq.res.table) is None):  # type: ignore[union-attr]
                plan = ops.plan_for(rq.res, method, comp)  # type: ignore[arg-type]
            if plan is None:
                asyncio.get_running_loop().create_task(self._complete(rq, method, comp, done))
                return
            rq.auth = self.security.authenticate_now(rq.method, rq.raw_path, rq.query, rq.headers, rq.scheme,
                                                     rq.client_ip)
            refuse_secondary_write(rq.res, method)  # type: ignore[arg-type]
            req, finisher = plan(self, rq)
        except Exception as exc:
            done(self.finish(rq, self._failure(rq, exc)))
            return

        def answered(result: Any, error: TableError | None) -> None:
            try:
                resp = finisher(self, rq, result) if error is None else self.error_response(rq, error)
            except Exception as exc:
                resp = self._failure(rq, exc)
            done(self.finish(rq, resp))

        self._submit(req, answered)

    async def _complete(self, rq: Request, method: str, comp: str | None,
                        done: Callable[[Response], None] | None = None) -> Response:
        """The rest of :meth:`respond` after :meth:`_prepare` (and the response to ``done``, if given)."""
        try:
            resp = await self._dispatch(rq, method, comp)
        except Exception as exc:
            resp = self._failure(rq, exc)
        resp = self.finish(rq, resp)
        if done is not None:
            done(resp)
        return resp

    def _failure(self, rq: Request, exc: Exception) -> Response:
        """The error response for an exception an operation raised (500 for anything but a TableError)."""
        if isinstance(exc, TableError):
            return self.error_response(rq, exc)
        log.error("request %s %s failed", rq.method, rq.raw_path, exc_info=exc)
        return self.error_response(rq, TableError("InternalError", f"{type(exc).__name__}"))

    def finish(self, rq: Request, resp: Response) -> Response:
        """Add the standard headers (request id, version, Date, client request id echo, CORS, length)."""
        h = resp.headers
        version = VERSION_HEADERS.get(rq.version, _DEFAULT_VERSION_HEADER)  # an unknown version is never echoed
        h += ((b"x-ms-request-id", rq.request_id.encode()), (b"x-ms-version", version), (b"date", http_date()))
        crid = rq.headers.get("x-ms-client-request-id")
        if crid is not None:
            h.append((b"x-ms-client-request-id", crid[:1024].encode("latin-1", "replace")))
        if rq.cors_rule is not None:
            h.extend(ops.cors_headers(rq.cors_rule, rq.headers.get("origin", "")))
        h.append((b"content-length", b"%d" % len(resp.body)))
        self.answers.note(rq.method, str(resp.status))
        return resp

    def error_response(self, rq: Request, exc: TableError, detail: str | None = None) -> Response:
        """An Azure error response (JSON ``odata.error`` or XML ``<Error>``)."""
        status = exc.status_code
        if exc.error_code in ("NotOwner", "RangeBusy"):
            exc, status = TableError("ServerBusy", exc.message), 503
        headers = [(b"x-ms-error-code", exc.error_code.encode())]
        if rq.xml_errors or exc.error_code.startswith(("Authentication", "Authorization")) \
                or exc.error_code in ("InvalidXmlDocument", "CorsPreflightFailure"):
            body = odata.error_xml(exc, rq.request_id, iso_now(), detail or getattr(exc, "detail", None))
            headers.append((b"content-type", b"application/xml"))
        else:
            body = odata.error_json(exc, rq.request_id, iso_now())
            headers.append((b"content-type", odata.CONTENT_TYPES[odata.MINIMAL]))
            headers.append((b"dataserviceversion", b"3.0;"))
        if exc.retriable:
            headers.append((b"retry-after", b"1"))
        return Response(status, headers, body)

    # --- dispatch -------------------------------------------------------------------------------

    def _prepare(self, rq: Request, too_big: bool) -> tuple[str, str | None]:
        """The synchronous start of every request: the effective verb, the URL, the error flavour and
        metadata level; returns ``(verb, comp)``."""
        if too_big:
            raise TableError("RequestBodyTooLarge")
        method = rq.method
        if method not in KNOWN_METHODS:
            raise TableError("MethodNotAllowed", f"The HTTP verb {method!r} is not supported.")
        xm = rq.headers.get("x-http-method")
        if xm is not None:
            if xm == MULTIPLE:
                raise TableError("XMethodIncorrectCount")
            if method != "POST":
                raise TableError("XMethodNotUsingPost")
            if xm.upper() not in XMETHODS:
                raise TableError("XMethodIncorrectValue")
            method = xm.upper()
        if rq.query_string:
            rq.query = parse_query(rq.query_string)
        res = rq.res = parse_resource(rq.raw_path, rq.query, rq.host)
        comp = rq.param("comp") if rq.query else None
        kind = res.kind
        rq.xml_errors = kind == "service" or comp is not None or method == "OPTIONS"
        if method != "OPTIONS" and not rq.xml_errors and kind != "batch":
            rq.level = odata.metadata_level(rq.headers.get("accept"), rq.param("$format") if rq.query else None)
        if method != "OPTIONS":
            version = rq.headers.get("x-ms-version")
            if version:
                rq.version = check_version(version)
        return method, comp

    async def _dispatch(self, rq: Request, method: str, comp: str | None) -> Response:
        if method == "OPTIONS":
            return await ops.preflight(self, rq)
        res = rq.res
        assert res is not None
        rq.auth = await self.security.authenticate(rq.method, rq.raw_path, rq.query, rq.headers, res.table,
                                                   rq.scheme, rq.client_ip)
        if "origin" in rq.headers:
            rq.cors_rule = await ops.cors_rule_for(self, rq, method)
        refuse_secondary_write(res, method)  # after the CORS lookup: the refusal carries CORS headers too
        plan = ops.plan_for(res, method, comp)
        if plan is not None:
            req, finisher = plan(self, rq)
            return finisher(self, rq, await self.fe.request(req))
        handler = ops.route(res, method, comp)
        return await handler(self, rq)


def refuse_secondary_write(res: Resource, method: str) -> None:
    """403 InsufficientAccountPermissions for anything but a read on the ``-secondary`` account: like
    Azure's read-access geo-redundant secondary, it serves reads (queries, gets, ACL, service
    properties and stats) and refuses writes."""
    if res.secondary and method not in READS:
        raise TableError("InsufficientAccountPermissions", "Write operations are not allowed.")
