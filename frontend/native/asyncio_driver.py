"""An asyncio driver of the frontend's :class:`~frontend.native.handler.Handler` (used by the HTTP frontend).

It does what :mod:`frontend.native.server` does for native clients — one DEALER per partition server, a
DEALER to the coordinator, a SUB for map updates and hugz, back-off timers for ``retry_later`` and
attempt timeouts — but inside an asyncio event loop, so an ASGI app can ``await`` a native request:

    fe = AioFrontend(cfg)
    await fe.start()
    result = await fe.request({"op": "get", "table": "t", "pk": "p", "rk": "r"})

or, without a Future or a coroutine (the built-in HTTP listener's point operations),
``fe.submit(req, cb)``, which calls ``cb(result, None)`` or ``cb(None, error)`` as soon as the answer is
read.

The request logic (routing, retries on NotPrimary/RangeBusy, query stitching, relaying table ops) is
the Handler's; this module only moves messages. Sockets are plain ``zmq`` sockets watched with
``loop.add_reader`` on their ``ZMQ_FD`` and drained with ``NOBLOCK`` — the same mechanism
``zmq.asyncio`` uses internally, minus one Future per message (the stack notes measured
``zmq.asyncio`` at a third of a blocking loop's throughput). ZeroMQ's FD is edge-triggered, so after
every send the sockets are re-checked (``protocol.readable``) in a callback scheduled once per
loop turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import zmq

from frontend.native.driver import DriverCore
from frontend.native.handler import Pending
from rangetable import protocol
from rangetable.config import FrontendConfig
from rangetable.errors import TableError

log = logging.getLogger("rangetable.frontend.aio")

DRAIN_BATCH = 256  # messages taken from one socket before yielding to the loop
SWEEP_S = 0.05  # how often attempt timeouts are checked
Answer = Callable[[Any, "TableError | None"], None]  # (result, None) or (None, error)


class AioPending(Pending):
    """A request in flight whose answer is handed to a callback (see :meth:`AioFrontend.submit`)."""

    __slots__ = ("cb",)

    def __init__(self, req: dict, timeout_s: float, cb: Answer) -> None:
        super().__init__(b"", b"", req, timeout_s)
        self.cb = cb


class AioFrontend(DriverCore):
    """The Handler's driver on an asyncio loop: sockets watched by the loop, timers, futures."""

    def __init__(self, cfg: FrontendConfig, ctx: zmq.Context | None = None) -> None:
        super().__init__(cfg, ctx)
        self._ps: dict[str, zmq.Socket] = {}
        self._socks: list[zmq.Socket] = []
        self._handlers: dict[zmq.Socket, Any] = {}
        self._kicked = False
        self._touched: set[zmq.Socket] = set()  # sent on since the last pump
        self._sweeper: asyncio.Task | None = None
        self._map_event: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, wait_map_s: float = 5.0) -> None:
        """Open the sockets and wait (up to ``wait_map_s``) for the first partition-map snapshot."""
        self.loop = asyncio.get_running_loop()
        self._map_event = asyncio.Event()
        self.coord = self._secure(self._socket(zmq.DEALER), "coordinator")
        self.coord.connect(self._coord_at)
        self.sub = self._secure(self._socket(zmq.SUB), "coordinator")
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._watch(self.coord, self._on_coord)
        self._watch(self.sub, self._on_update)
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
            assert self.loop is not None  # start() set it: it made the sockets
            try:
                self.loop.remove_reader(s.fileno())
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
        assert self.loop is not None  # start() set it
        self.loop.add_reader(s.fileno(), self._drain, s)

    # --- the API for the HTTP app ---------------------------------------------------------------

    def submit(self, req: dict, cb: Answer, timeout: float | None = None) -> None:
        """Start one native request (see docs/protocol.md); ``cb(result, None)`` or ``cb(None, TableError)``
        is called once with its outcome — from the loop, or at once when it fails before being sent.

        The HTTP listener's path: no Future, no Task, the answer is handled as soon as it is read.
        """
        if self.closed:
            cb(None, TableError("ServerBusy", "the frontend is shutting down"))
            return
        self.start_request(AioPending(req, timeout or self.cfg.deadline_s, cb))

    async def request(self, req: dict, timeout: float | None = None) -> Any:
        """Run one native request and return its result; raises TableError."""
        assert self.loop is not None  # start() set it
        fut = self.loop.create_future()

        def settle(result: Any, exc: TableError | None) -> None:
            if not fut.done():
                if exc is None:
                    fut.set_result(result)
                else:
                    fut.set_exception(exc)

        self.submit(req, settle, timeout)
        return await fut

    # --- the Handler's interface ----------------------------------------------------------------

    def _ps_socket(self, endpoint: str) -> zmq.Socket:
        s = self._ps.get(endpoint)
        if s is None:
            s = self._secure(self._socket(zmq.DEALER), "partition-server")
            s.connect(endpoint)
            self._watch(s, self._on_answer)
            self._ps[endpoint] = s
        return s

    def _schedule(self, delay: float, p: Pending) -> None:
        assert self.loop is not None  # start() set it
        self.loop.call_later(delay, self.start_request, p)

    def _sent(self, sock: zmq.Socket) -> None:
        self._touched.add(sock)
        if not self._kicked:  # = self._kick()
            self._kicked = True
            assert self.loop is not None  # start() set it
            self.loop.call_soon(self._pump)

    def _map_installed(self) -> None:
        if self._map_event is not None and self.cache.version >= 0:
            self._map_event.set()

    def reply(self, p: Pending, body: bytes) -> None:
        """Hand the request's reply body to its callback (once)."""
        if not p.done:
            p.done = True
            self.note_if_slow(p)
            raw, decoded = self._last
            try:
                if raw is not body:
                    decoded = protocol.unpack(body)
                if not isinstance(decoded, dict):
                    raise TableError("InternalError", "malformed reply")
                if "error" in decoded:
                    raise TableError.from_wire(decoded["error"])
            except TableError as exc:
                p.cb(None, exc)  # type: ignore[attr-defined]
                return
            p.cb(decoded.get("ok"), None)  # type: ignore[attr-defined]

    def reply_ok(self, p: Pending, result: Any) -> None:
        """Hand a success result to the request's callback (no encoding round trip)."""
        if not p.done:
            p.done = True
            self.note_if_slow(p)
            p.cb(result, None)  # type: ignore[attr-defined]

    def fail(self, p: Pending, exc: TableError) -> None:
        """Hand an error to the request's callback."""
        if not p.done:
            p.done = True
            self.note_if_slow(p)
            p.cb(None, exc)  # type: ignore[attr-defined]

    # --- receiving ------------------------------------------------------------------------------

    def _kick(self) -> None:
        """Re-check the touched sockets once this loop turn ends (ZMQ_FD is edge-triggered: a send
        or an unfinished drain may have consumed the edge that announced readable messages)."""
        if not self._kicked:
            self._kicked = True
            assert self.loop is not None  # start() set it
            self.loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._kicked = False
        touched, self._touched = self._touched, set()
        for s in touched:
            try:
                if s.closed or not protocol.readable(s):
                    continue
            except zmq.ZMQError:
                continue
            self._drain(s)

    def _drain(self, s: zmq.Socket) -> None:
        """Take the messages waiting on ``s`` (called when its FD is readable: usually one is)."""
        if s.closed:
            return
        handler = self._handlers[s]
        for _ in range(DRAIN_BATCH):
            try:
                frames = protocol.recv_frames(s, protocol.NOBLOCK)
            except zmq.ZMQError:  # zmq.Again: nothing (left) to read
                return
            handler(frames)
            try:
                if not protocol.readable(s):  # cheaper than provoking zmq.Again
                    return
            except zmq.ZMQError:
                return
        self._touched.add(s)
        self._kick()  # more may be waiting: come back after other callbacks ran

    def _on_coord(self, frames: list[bytes]) -> None:
        self._on_answer(frames, from_coordinator=True)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                self._sweep()
            except Exception:  # never let the sweeper die
                log.exception("sweep failed")
