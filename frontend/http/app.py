"""The ASGI app of the HTTP frontend: Azure Table REST on top of the frontend's Handler.

Framework-free. :class:`RestApp` runs each request through the pipeline's stages, each its own module
and none calling back into this one: **parse** (:mod:`frontend.http.parse`, the body capped at
4 MiB) → **authenticate** (:mod:`frontend.http.security`) → **plan** (:mod:`frontend.http.routes` picks the
operation, whose Plan checks it and makes its native request) → **send** (:class:`frontend.native.asyncio_driver.AioFrontend`) →
**render** (:mod:`frontend.http.render`: the standard headers — ``x-ms-request-id``, ``x-ms-version``,
``Date``, the client request id echo, CORS — and Azure's error bodies).

Two entry points run that pipeline: :meth:`RestApp.respond` (a coroutine, for ASGI servers: the plain
path) and :meth:`RestApp.serve` (the built-in listener's fast path), which runs the point operations
— get, insert, update, merge, delete one entity — and entity queries, the SDK's bulk of requests,
without a coroutine or a Task: each is a synchronous *plan* (checks, native request) and *finisher*
(response) around ``AioFrontend.submit``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from frontend.http import cors, routes
from frontend.http.parse import DRAIN_LIMIT, MAX_BODY, Request, parse, refuse_secondary_write
from frontend.http.render import Response, error_response, failure, finish
from frontend.http.security import Security
from frontend.metrics import Answers
from rangetable.errors import TableError

if TYPE_CHECKING:
    from frontend.native.asyncio_driver import Answer

PROPS_TTL_S = 5.0
SYNC_TTL_S = 1.0  # Get Service Stats asks the coordinator for LastSyncTime at most this often


class RestApp:
    """The ASGI callable. ``fe`` is an :class:`frontend.native.asyncio_driver.AioFrontend` (started on lifespan startup)."""

    def __init__(self, fe: Any, accounts: list[str] | None = None, own_frontend: bool = True,
                 oauth: str = "") -> None:
        self.fe = fe
        self.own_frontend = own_frontend
        self.security = Security(accounts or [], self.fetch_acl, oauth)
        self._props: tuple[float, dict] | None = None
        self._sync: tuple[float, float | None] | None = None  # (monotonic time asked, LastSyncTime)
        # AioFrontend.submit: the callback path of serve()
        self._submit: Callable[[dict, Answer], None] | None = getattr(fe, "submit", None)
        self.answers = Answers()  # responses by (method, status code), for the Prometheus metrics

    # --- shared state ---------------------------------------------------------------------------

    async def fetch_acl(self, table: str) -> dict:
        """The stored access policies of ``table`` (the ``get_acl`` native request)."""
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

    @property
    def geo_role(self) -> str:
        """The cluster's geo role as this frontend knows it (``docs/geo.md``): ``primary``, ``fenced`` or
        ``secondary``."""
        return self._geo_role()

    def _geo_role(self) -> str:
        handler = getattr(self.fe, "handler", None)
        return "primary" if handler is None else str(handler.role)

    async def last_sync_time(self) -> float | None:
        """The ``-secondary`` endpoint's LastSyncTime in wall-clock seconds: the coordinator's ``sync_time``
        (:mod:`coordinator.sync_time`; a secondary cluster's, :func:`coordinator.geo_follow.sync_time`), asked at
        most once a second; None while a secondary cluster has not reached a cut of every table (bootstrap)."""
        now = time.monotonic()
        if self._sync is not None and now - self._sync[0] < SYNC_TTL_S:
            return self._sync[1]
        try:
            res = await self.fe.request({"op": "sync_time"})
        except TableError as exc:
            if self._sync is not None and exc.retriable:
                return self._sync[1]  # an older answer is still true: LastSyncTime only moves forward
            raise
        last = res.get("last_sync")
        self._sync = (now, None if last is None else float(last))
        return self._sync[1]

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
            resp = finish(rq, error_response(rq, exc), self.answers)
        else:
            resp = await self.respond(rq, too_big)
        await send({"type": "http.response.start", "status": resp.status, "headers": resp.headers})
        await send({"type": "http.response.body", "body": b"" if rq.method == "HEAD" else resp.body})

    async def respond(self, rq: Request, too_big: bool = False) -> Response:
        """Answer one request whose body has been read (``too_big``: it was over :data:`MAX_BODY`).

        The server-neutral core of the app (the ASGI callable calls it; the built-in listener calls
        :meth:`serve`, which does the same). Never raises; the response carries the standard headers
        (see :func:`frontend.http.render.finish`).
        """
        try:
            method, comp = parse(rq, too_big)
        except Exception as exc:
            return finish(rq, failure(rq, exc), self.answers)
        return await self._complete(rq, method, comp)

    def serve(self, rq: Request, too_big: bool, done: Callable[[Response], None]) -> None:
        """:meth:`respond`, handing the response to ``done`` (once) instead of returning it.

        A point operation or entity query (:data:`frontend.http.entity_ops.PLANS`) under Shared Key,
        without ``Origin``, runs without a coroutine: its native request goes to ``fe.submit`` and its answer is turned into the response
        in the callback — possibly before this returns. Everything else runs :meth:`respond` in a Task.
        """
        try:
            method, comp = parse(rq, too_big)
            res = rq.res
            assert res is not None  # parse() set it
            plan = None
            submit = self._submit
            if (submit is not None and method != "OPTIONS" and "origin" not in rq.headers
                    and self.security.acl_table(rq.query, res.table) is None):
                plan = routes.plan_for(res, method, comp)
            if plan is None or submit is None:  # (plan is None whenever submit is)
                asyncio.get_running_loop().create_task(self._complete(rq, method, comp, done))
                return
            rq.auth = self.security.authenticate_now(rq.method, rq.raw_path, rq.query, rq.headers, rq.scheme,
                                                     rq.client_ip)
            refuse_secondary_write(res, method, self._geo_role)
            req, finisher = plan(rq)
        except Exception as exc:
            done(finish(rq, failure(rq, exc), self.answers))
            return

        def answered(result: Any, error: TableError | None) -> None:
            try:
                resp = finisher(rq, result) if error is None else error_response(rq, error)
            except Exception as exc:
                resp = failure(rq, exc)
            done(finish(rq, resp, self.answers))

        submit(req, answered)

    async def _complete(self, rq: Request, method: str, comp: str | None,
                        done: Callable[[Response], None] | None = None) -> Response:
        """The rest of :meth:`respond` after the parse stage (and the response to ``done``, if given)."""
        try:
            resp = await self._dispatch(rq, method, comp)
        except Exception as exc:
            resp = failure(rq, exc)
        resp = finish(rq, resp, self.answers)
        if done is not None:
            done(resp)
        return resp

    # --- dispatch -------------------------------------------------------------------------------

    async def _dispatch(self, rq: Request, method: str, comp: str | None) -> Response:
        if method == "OPTIONS":
            return await cors.preflight(self, rq)
        res = rq.res
        assert res is not None
        rq.auth = await self.security.authenticate(rq.method, rq.raw_path, rq.query, rq.headers, res.table,
                                                   rq.scheme, rq.client_ip)
        if "origin" in rq.headers:
            rq.cors_rule = await cors.cors_rule_for(self, rq, method)
        refuse_secondary_write(res, method, self._geo_role)  # after the CORS lookup: the refusal carries CORS headers too
        plan = routes.plan_for(res, method, comp)
        if plan is not None:
            req, finisher = plan(rq)
            return finisher(rq, await self.fe.request(req))
        handler = routes.route(res, method, comp)
        return await handler(self, rq)

