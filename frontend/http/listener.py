"""The built-in HTTP/1.1 listener: one asyncio Protocol per connection, on the frontend's own loop.

SDK clients keep one request in flight per connection, so a REST frontend spends most of its CPU on
what each request costs *alone*: wake-ups, thread hand-offs and syscalls. With granian (the first
choice, see ``docs/http.md``) every request crossed threads twice — its Rust workers parse and then
wake the Python loop, which wakes them again to write. This listener keeps the whole request on one
thread: uvloop reads the socket, ``httptools`` (llhttp, the parser of Node.js and uvicorn) parses it,
:meth:`RestApp.serve` runs it — sending the native request to a partition server and taking the
reply on the same loop (:mod:`frontend.native.asyncio_driver`), for point operations straight from the socket callback,
without a Task — and the response is written straight back.

What it implements:

* HTTP/1.1 and 1.0, keep-alive (``Connection`` and the version decide), pipelined requests answered
  in order, request bodies by ``Content-Length`` or chunked, ``Expect: 100-continue``;
* limits: a request head over :data:`MAX_HEAD` bytes gets 400 ``InvalidHeaderValue``; a body over
  ``MAX_BODY`` is read and dropped and answered 413 ``RequestBodyTooLarge``, and one declared or
  growing past ``DRAIN_LIMIT`` is answered at once and the connection closed;
* a request llhttp rejects gets 400 ``InvalidInput`` (Azure's XML error body) and the connection
  closes; idle keep-alive connections close after :data:`IDLE_S`.

Non-goals: TLS (terminate it in front, as ``deploy/README.md`` says), HTTP/2, WebSocket upgrades
(a request asking for one is answered as plain HTTP/1.1, then the connection closes).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from http import HTTPStatus

import httptools

from frontend.http import odata
from frontend.http.app import RestApp
from frontend.http.parse import DEFAULT_VERSION, DRAIN_LIMIT, MAX_BODY, MULTIPLE, Request, next_request_id
from frontend.http.render import Response, http_date, iso_now
from rangetable.errors import TableError

log = logging.getLogger("rangetable.http")

MAX_HEAD = 64 * 1024  # bytes of request line + headers
MAX_PIPELINE = 32  # parsed requests waiting behind the one running before reading pauses
IDLE_S = 120.0  # an idle keep-alive connection is closed after this long
_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_names: dict[bytes, str] = {}  # header names as sent -> lower-case text (clients send the same few)


def _header_name(name: bytes) -> str:
    """A header name as the app sees it (lower-case text), remembered in :data:`_names`."""
    key = name.decode("latin-1").lower()
    if len(_names) < 1024:
        _names[name] = key
    return key


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing with an answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.error = TableError(code, message)


class Connection(asyncio.Protocol):
    """One client connection: parses requests, runs them one at a time, writes answers in order."""

    def __init__(self, app: RestApp, live: set[Connection], scheme: str = "http") -> None:
        self.app = app
        self.live = live
        self.scheme = scheme  # "https" behind TLS: SAS spr, bearer tokens and odata links depend on it
        self.loop = asyncio.get_event_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.client_ip: str | None = None
        self.queue: deque[tuple[Request, bool, bool] | TableError] = deque()
        self.busy = False
        self._keep = True  # of the request being answered
        self._head_only = False  # the request being answered is a HEAD
        self._draining = False  # _next is running (further up the stack)
        self.closed = False
        self.paused = False
        self.ended = False  # no more requests are read on this connection
        self.last = time.monotonic()
        self._url = b""
        self._headers: dict[str, str] = {}
        self._xm = 0
        self._head = 0
        self._body: list[bytes] = []
        self._size = 0

    # --- the transport ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client_ip = peer[0] if peer else None
        self.live.add(self)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self.closed = True
        self.queue.clear()
        self.live.discard(self)

    def data_received(self, data: bytes) -> None:  # noqa: D102
        self.last = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._close_after_queue()  # the upgraded protocol is not spoken: answer, then close
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            err = cause.error if isinstance(cause, _Refused) else TableError("InvalidInput", "Malformed request.")
            self._refuse(err)
        except httptools.HttpParserInvalidMethodError:
            self._refuse(TableError("MethodNotAllowed", "The HTTP verb is not supported."))
        except httptools.HttpParserError as exc:
            self._refuse(TableError("InvalidInput", f"The HTTP request is malformed: {exc}."))

    # --- parser callbacks (httptools) -----------------------------------------------------------

    def on_message_begin(self) -> None:  # noqa: D102
        self._url = b""
        self._headers = {}
        self._xm = 0
        self._head = 0
        self._body = []
        self._size = 0

    def on_url(self, url: bytes) -> None:  # noqa: D102
        self._url += url
        self._head += len(url)
        if self._head > MAX_HEAD:
            raise _Refused("InvalidHeaderValue", "The request line is too long.")

    def on_header(self, name: bytes, value: bytes) -> None:  # noqa: D102
        self._head += len(name) + len(value) + 4
        if self._head > MAX_HEAD:
            raise _Refused("InvalidHeaderValue", "The request headers are too large.")
        key = _names.get(name) or _header_name(name)
        if key == "x-http-method":
            self._xm += 1
        self._headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:  # noqa: D102
        declared = self._headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > DRAIN_LIMIT:
            raise _Refused("RequestBodyTooLarge", "The request body is too large.")
        expect = self._headers.get("expect")
        if expect is not None and expect.lower() == "100-continue" and self.transport is not None:
            self.transport.write(_CONTINUE)

    def on_body(self, chunk: bytes) -> None:  # noqa: D102
        self._size += len(chunk)
        if self._size > DRAIN_LIMIT:
            raise _Refused("RequestBodyTooLarge", "The request body is too large.")
        if self._size <= MAX_BODY:
            self._body.append(chunk)

    def on_message_complete(self) -> None:  # noqa: D102
        url = self._url
        if url[:1] != b"/" and url[:4].lower() == b"http":  # absolute-form target
            parsed = httptools.parse_url(url)
            url = (parsed.path or b"/") + (b"?" + parsed.query if parsed.query else b"")
        path, _, query = url.partition(b"?")
        headers = self._headers
        if self._xm > 1:
            headers["x-http-method"] = MULTIPLE
        parser = self.parser
        rq = Request(parser.get_method().decode("latin-1"), path.decode("latin-1"), query.decode("latin-1"),
                     headers, self.client_ip, self.scheme)
        too_big = self._size > MAX_BODY
        if self._body and not too_big:
            rq.body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        keep = parser.should_keep_alive() and not parser.should_upgrade()  # an upgrade ends the connection
        if not self.busy and not self.queue and not self.closed:
            self._start(rq, too_big, keep)
            return
        self.queue.append((rq, too_big, keep))
        if not self.busy:
            self._next()
        elif len(self.queue) > MAX_PIPELINE:
            self._stop_reading()

    # --- running requests -----------------------------------------------------------------------

    def _next(self) -> None:
        """Run queued requests until one is in flight (a loop: answers may come synchronously)."""
        if self._draining:
            return  # the loop below, further up the stack, goes on
        self._draining = True
        try:
            while not self.busy and not self.closed and self.queue:
                item = self.queue.popleft()
                if isinstance(item, TableError):
                    self._write_refusal(item)
                    return
                self._start(*item)
        finally:
            self._draining = False

    def _start(self, rq: Request, too_big: bool, keep: bool) -> None:
        self.busy = True
        self._keep = keep
        self._head_only = rq.method == "HEAD"
        self.app.serve(rq, too_big, self._answered)  # may answer before it returns

    def _answered(self, resp: Response) -> None:
        """Write the answer of the request being run, then start the next one."""
        self.busy = False
        if self.closed:
            return
        keep = self._keep and not (self.ended and not self.queue)
        self._write(resp.status, resp.headers, b"" if self._head_only else resp.body, keep)
        if not keep:
            self.close()
            return
        if self.paused and not self.ended and len(self.queue) <= MAX_PIPELINE // 2:
            self.paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        self.last = time.monotonic()
        self._next()

    def _write(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, keep: bool) -> None:
        values = b"".join([v for _, v in headers])
        # never let a value end the head early (find, not "in": bytes.__contains__ first tries an int)
        if values.find(b"\n") >= 0 or values.find(b"\r") >= 0:
            headers = [(k, v.replace(b"\r", b" ").replace(b"\n", b" ")) for k, v in headers]
        parts = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d Unknown\r\n" % status]
        for k, v in headers:  # one join of them all: no intermediate concatenations
            parts += (k, b": ", v, b"\r\n")
        if not keep:
            parts.append(b"connection: close\r\n\r\n")
        elif self.parser.get_http_version() == "1.0":
            parts.append(b"connection: keep-alive\r\n\r\n")
        else:
            parts.append(b"\r\n")
        parts.append(body)
        self.transport.write(b"".join(parts))  # type: ignore[union-attr]

    def _refuse(self, err: TableError) -> None:
        """Answer a request that cannot be parsed or accepted, after those before it; then close."""
        self.ended = True
        self._stop_reading()
        self.queue.append(err)
        if not self.busy:
            self._next()

    def _write_refusal(self, err: TableError) -> None:
        rid = next_request_id()
        body = odata.error_xml(err, rid, iso_now())
        headers = [(b"x-ms-error-code", err.error_code.encode()), (b"content-type", b"application/xml"),
                   (b"x-ms-request-id", rid.encode()), (b"x-ms-version", DEFAULT_VERSION.encode()),
                   (b"date", http_date()), (b"content-length", str(len(body)).encode())]
        self._write(err.status_code, headers, body, keep=False)
        self.close()

    def _close_after_queue(self) -> None:
        """Answer what was parsed, then close (the parser cannot go on)."""
        self.ended = True
        self._stop_reading()
        if not self.busy and not self.queue:
            self.close()

    def _stop_reading(self) -> None:
        if not self.paused and not self.closed and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def close(self) -> None:
        """Close the connection now (answers not yet written are dropped)."""
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def idle_for(self, now: float) -> float:
        """Seconds since this connection last received or answered anything (0 while busy)."""
        return 0.0 if self.busy or self.queue else now - self.last


class Listener:
    """A listening socket and its live connections (see :func:`open_listener`)."""

    def __init__(self, server: asyncio.base_events.Server, live: set[Connection]) -> None:
        self.server = server
        self.live = live
        self.port: int = server.sockets[0].getsockname()[1]

    def close_idle(self, now: float | None = None) -> int:
        """Close connections idle for longer than :data:`IDLE_S`; returns how many."""
        now = time.monotonic() if now is None else now
        idle = [c for c in self.live if c.idle_for(now) > IDLE_S]
        for conn in idle:
            conn.close()
        return len(idle)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        self.server.close()
        for conn in list(self.live):
            conn.close()
        await self.server.wait_closed()


async def open_listener(app: RestApp, host: str, port: int, reuse_port: bool = False,
                        tls: ssl.SSLContext | None = None) -> Listener:
    """Listen on ``host:port`` (0 = any free port, see ``Listener.port``) and serve ``app``; with
    ``reuse_port`` other processes may listen on the same port (SO_REUSEPORT: the kernel spreads new
    connections across them); with ``tls`` connections speak HTTPS."""
    loop = asyncio.get_running_loop()
    live: set[Connection] = set()
    scheme = "https" if tls else "http"
    server = await loop.create_server(lambda: Connection(app, live, scheme), host, port, backlog=1024,
                                      reuse_address=True, reuse_port=reuse_port or None, ssl=tls,
                                      ssl_handshake_timeout=10.0 if tls else None)
    return Listener(server, live)


async def serve(app: RestApp, host: str, port: int, stop: asyncio.Event, reuse_port: bool = False,
                tls: ssl.SSLContext | None = None) -> None:
    """Serve ``app`` on ``host:port`` (HTTPS with ``tls``) until ``stop`` is set, closing idle
    connections on the way."""
    listener = await open_listener(app, host, port, reuse_port, tls)
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=min(IDLE_S / 4, 15.0))
            except TimeoutError:
                listener.close_idle()
    finally:
        await listener.close()
