"""An asyncio driver of the frontend's :class:`~frontend.requests.Handler` (used by the HTTP frontend).

It does what :mod:`frontend.server` does for native clients — one DEALER per partition server, a
DEALER to the coordinator, a SUB for map updates and hugz, back-off timers for ``retry_later`` and
attempt timeouts — but inside an asyncio event loop, so an ASGI app can ``await`` a native request:

    fe = AioFrontend(cfg)
    await fe.start()
    result = await fe.request({"op": "get", "table": "t", "pk": "p", "rk": "r"})

The request logic (routing, retries on NotOwner/RangeBusy, query stitching, relaying table ops) is
the Handler's; this module only moves messages. Sockets are plain ``zmq`` sockets watched with
``loop.add_reader`` on their ``ZMQ_FD`` and drained with ``NOBLOCK`` — the same mechanism
``zmq.asyncio`` uses internally, minus one Future per message (the stack notes measured
``zmq.asyncio`` at a third of a blocking loop's throughput). ZeroMQ's FD is edge-triggered, so after
every send the sockets are re-checked (``ZMQ_EVENTS``) in a callback scheduled once per loop turn.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from typing import Any

import zmq

from frontend.requests import Handler
from frontend.routing import MapCache
from frontend.server import Pending
from rangetable import protocol
from rangetable.config import FrontendConfig
from rangetable.errors import TableError

log = logging.getLogger("rangetable.frontend.aio")

DRAIN_BATCH = 256  # messages taken from one socket before yielding to the loop
SWEEP_S = 0.05  # how often attempt timeouts are checked
# Plain ints: pyzmq's flag enums cost microseconds per operation on the hot path.
_SNDMORE, _NOBLOCK, _EVENTS, _POLLIN = int(zmq.SNDMORE), int(zmq.NOBLOCK), int(zmq.EVENTS), int(zmq.POLLIN)
_COPY_LIMIT = 64 * 1024  # larger bodies are sent zero-copy


def _send(s: zmq.Socket, srid: bytes, body: bytes) -> None:
    """Send ``[srid, body]`` (two plain sends: cheaper than send_multipart's enum arithmetic)."""
    s.send(srid, _SNDMORE)
    s.send(body, 0, copy=len(body) < _COPY_LIMIT)


class AioPending(Pending):
    """A request in flight whose answer resolves an asyncio Future."""

    def __init__(self, req: dict, deadline: float, fut: asyncio.Future) -> None:
        super().__init__(b"", b"", req, deadline)
        self.fut = fut


class AioFrontend:
    """The Handler's ``fe``: sockets, timers and futures on an asyncio loop."""

    def __init__(self, cfg: FrontendConfig, ctx: zmq.Context | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx or zmq.Context.instance()
        self.id = cfg.frontend_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.cache = MapCache()
        self.handler = Handler(self)
        self._n = 0
        self._sub: dict[bytes, tuple[Pending, Any, float, str]] = {}
        self._ps: dict[str, zmq.Socket] = {}
        self._socks: list[zmq.Socket] = []
        self._handlers: dict[zmq.Socket, Any] = {}
        self._map_asked = 0.0
        self._kicked = False
        self._last: tuple[Any, Any] = (None, None)  # (raw body, decoded) of the answer being handled
        self._sub_connected = ""
        self._sweeper: asyncio.Task | None = None
        self._map_event: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, wait_map_s: float = 5.0) -> None:
        """Open the sockets and wait (up to ``wait_map_s``) for the first partition-map snapshot."""
        self.loop = asyncio.get_running_loop()
        self._map_event = asyncio.Event()
        self.coord = self._socket(zmq.DEALER)
        self.coord.connect(self.cfg.coordinator)
        self.sub = self._socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._watch(self.coord, self._on_coord)
        self._watch(self.sub, self._on_sub)
        self.refresh_map(force=True)
        self._sweeper = asyncio.ensure_future(self._sweep_loop())
        try:
            await asyncio.wait_for(self._map_event.wait(), wait_map_s)
        except TimeoutError:
            log.warning("no partition map from %s after %.1f s; continuing", self.cfg.coordinator, wait_map_s)

    async def close(self) -> None:
        """Fail requests in flight, stop the timers and close every socket."""
        if self.closed:
            return
        self.closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for p, _, _, _ in list(self._sub.values()):
            self.fail(p, TableError("ServerBusy", "the frontend is shutting down"))
        self._sub.clear()
        for s in self._socks:
            try:
                self.loop.remove_reader(s.getsockopt(zmq.FD))
            except (OSError, ValueError, zmq.ZMQError):
                pass
            s.close(0)
        self._socks.clear()

    def _socket(self, kind: int) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 100_000)
        s.setsockopt(zmq.RCVHWM, 100_000)
        s.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
        self._socks.append(s)
        return s

    def _watch(self, s: zmq.Socket, handler: Any) -> None:
        self._handlers[s] = handler
        self.loop.add_reader(s.getsockopt(zmq.FD), self._drain, s)

    # --- the API for the HTTP app ---------------------------------------------------------------

    async def request(self, req: dict, timeout: float | None = None) -> Any:
        """Run one native request (see docs/protocol.md) and return its result; raises TableError."""
        if self.closed:
            raise TableError("ServerBusy", "the frontend is shutting down")
        fut = self.loop.create_future()
        p = AioPending(req, time.monotonic() + (timeout or self.cfg.deadline_s), fut)
        self.start_request(p)
        body, decoded = await fut
        if decoded is None:
            decoded = protocol.unpack(body)
        if not isinstance(decoded, dict):
            raise TableError("InternalError", "malformed reply")
        if "error" in decoded:
            raise TableError.from_wire(decoded["error"])
        return decoded.get("ok")

    # --- the Handler's interface ----------------------------------------------------------------

    def _srid(self) -> bytes:
        self._n += 1
        return b"%d" % self._n

    def send_ps(self, p: Pending, endpoint: str, body: dict, step: Any) -> None:
        """Send a sub-request to a partition server; ``step`` comes back with the answer."""
        s = self._ps.get(endpoint)
        if s is None:
            s = self._socket(zmq.DEALER)
            s.connect(endpoint)
            self._watch(s, self._on_answer)
            self._ps[endpoint] = s
        srid = self._srid()
        self._sub[srid] = (p, step, time.monotonic(), endpoint)
        _send(s, srid, protocol.pack(body))
        self._kick()

    def send_coordinator(self, p: Pending, body: dict, step: Any) -> None:
        """Send a request to the coordinator; ``step`` comes back with the answer."""
        srid = self._srid()
        self._sub[srid] = (p, step, time.monotonic(), "coordinator")
        _send(self.coord, srid, protocol.pack(body))
        self._kick()

    def reply(self, p: Pending, body: bytes) -> None:
        """Resolve the request's future with a reply body (once)."""
        if not p.done:
            p.done = True
            fut = p.fut  # type: ignore[attr-defined]
            if not fut.done():
                raw, decoded = self._last
                fut.set_result((body, decoded if raw is body else None))

    def reply_ok(self, p: Pending, result: Any) -> None:
        """Resolve the request's future with a success result (no encoding round trip)."""
        if not p.done:
            p.done = True
            fut = p.fut  # type: ignore[attr-defined]
            if not fut.done():
                fut.set_result((None, {"ok": result}))

    def fail(self, p: Pending, exc: TableError) -> None:
        """Resolve the request's future with an error."""
        if not p.done:
            p.done = True
            fut = p.fut  # type: ignore[attr-defined]
            if not fut.done():
                fut.set_exception(exc)

    def retry_later(self, p: Pending, why: str) -> None:
        """Back off and run the request again with a fresh map, or give up at the deadline."""
        p.attempts += 1
        now = time.monotonic()
        if now >= p.deadline:
            self.fail(p, TableError("ServerBusy", f"gave up after {p.attempts} attempts: {why}"))
            return
        self.refresh_map()
        delay = min(0.002 * (2 ** min(p.attempts, 6)), 0.1)
        self.loop.call_later(delay, self.start_request, p)

    def refresh_map(self, force: bool = False) -> None:
        """Ask the coordinator for a snapshot (at most one request per 50 ms)."""
        now = time.monotonic()
        if force or now - self._map_asked > 0.05:
            self._map_asked = now
            self.coord.send_multipart([b"map", protocol.pack({"op": "map"})])
            self._kick()

    # --- running requests -----------------------------------------------------------------------

    def start_request(self, p: Pending) -> None:
        """(Re)run a request from the beginning of its current step."""
        if p.done:
            return
        if self.closed:  # a retry timer that fired after close()
            self.fail(p, TableError("ServerBusy", "the frontend is shutting down"))
            return
        try:
            self.handler.run(p)
        except TableError as exc:
            self.fail(p, exc)
        except Exception as exc:
            log.exception("request failed")
            self.fail(p, TableError("InternalError", f"{type(exc).__name__}: {exc}"))

    # --- receiving ------------------------------------------------------------------------------

    def _kick(self) -> None:
        """Re-check the sockets once this loop turn ends (ZMQ_FD is edge-triggered)."""
        if not self._kicked:
            self._kicked = True
            self.loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._kicked = False
        for s in list(self._socks):
            if not s.closed and s.getsockopt(_EVENTS) & _POLLIN:
                self._drain(s)

    def _drain(self, s: zmq.Socket) -> None:
        if s.closed:
            return
        handler = self._handlers[s]
        for _ in range(DRAIN_BATCH):
            try:
                if not s.getsockopt(_EVENTS) & _POLLIN:  # cheaper than provoking zmq.Again
                    return
                frames = s.recv_multipart(_NOBLOCK)
            except zmq.ZMQError:
                return
            handler(frames, s)
        self._kick()  # more may be waiting: come back after other callbacks ran

    def _on_coord(self, frames: list[bytes], s: zmq.Socket) -> None:
        if len(frames) == 2 and frames[0] == b"map":
            try:
                self._apply_map(protocol.result(frames[1]))
            except TableError as exc:
                log.warning("map snapshot failed: %s", exc)
            return
        self._on_answer(frames, s)

    def _apply_map(self, snap: dict) -> None:
        self.cache.apply(snap)
        if self.cache.pub and self.cache.pub != self._sub_connected:
            if self._sub_connected:
                self.sub.disconnect(self._sub_connected)
            self.sub.connect(self.cache.pub)
            self._sub_connected = self.cache.pub
        if self._map_event is not None and self.cache.version >= 0:
            self._map_event.set()

    def _on_answer(self, frames: list[bytes], s: zmq.Socket) -> None:
        if len(frames) != 2:
            return
        srid, body = frames
        ent = self._sub.pop(srid, None)
        if ent is None:
            return  # an answer to an attempt we already gave up on
        p, step, _, _ = ent
        if p.done:
            return
        try:
            reply = protocol.unpack(body)
            self._last = (body, reply)
            self.handler.answer(p, step, reply, body)
        except TableError as exc:
            self.fail(p, exc)
        except Exception as exc:
            log.exception("answer handling failed")
            self.fail(p, TableError("InternalError", f"{type(exc).__name__}: {exc}"))

    def _on_sub(self, frames: list[bytes], s: zmq.Socket) -> None:
        if len(frames) != 2:
            return
        try:
            msg = protocol.unpack(frames[1])
        except TableError:
            return
        if frames[0] == b"map":
            self._apply_map(msg)
        elif frames[0] == b"hugz" and isinstance(msg, dict) and msg.get("version", -1) > self.cache.version:
            self.refresh_map()  # we missed an update: fetch a snapshot

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                self._sweep()
            except Exception:  # never let the sweeper die
                log.exception("sweep failed")

    def _sweep(self) -> None:
        now = time.monotonic()
        limit = self.cfg.attempt_timeout_s
        stale = [k for k, (p, _, sent, _) in self._sub.items() if p.done or now - sent > limit]
        for k in stale:
            p, _, _, target = self._sub.pop(k)
            if not p.done:
                self.retry_later(p, f"no answer from {target}")
        if self.cache.version < 0 and now - self._map_asked > 0.5:
            self.refresh_map(force=True)
