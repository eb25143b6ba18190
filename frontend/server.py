"""The frontend process: routes native client requests to partition servers.

Sockets (one thread, one poll loop that only moves messages):

* ROUTER at ``native`` — clients (see ``docs/protocol.md``), many requests in flight at once;
* one DEALER per partition server — sub-requests, matched to client requests by id;
* a DEALER to the coordinator — map snapshots and table/admin requests, relayed;
* a SUB to the coordinator's PUB — map updates and hugz (the ZeroMQ guide's *Clone* pattern).

A sub-request answered ``NotOwner`` or ``RangeBusy``, or not answered within ``attempt_timeout_s``,
is retried after a short back-off with a refreshed map until the request's deadline; only then does
the client see ``ServerBusy``. Writes carry a request id (the client's, or one made here) so a retry
is never applied twice.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import zmq

from frontend.requests import Handler
from frontend.routing import MapCache
from rangetable import protocol
from rangetable.config import FrontendConfig
from rangetable.errors import TableError

log = logging.getLogger("rangetable.frontend")


@dataclass
class Pending:
    """One client request in flight."""

    ident: bytes
    rid: bytes
    req: dict
    deadline: float
    attempts: int = 0
    state: Any = None
    done: bool = False
    extra: dict = field(default_factory=dict)


class Frontend:
    """State and loop of one frontend."""

    def __init__(self, cfg: FrontendConfig, ctx: zmq.Context | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx or zmq.Context.instance()
        self.id = cfg.frontend_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.cache = MapCache()
        self.handler = Handler(self)
        self.stopping = False
        self._ids = itertools.count(1)
        self._sub: dict[bytes, tuple[Pending, Any, float, str]] = {}  # sub rid -> (pending, step, sent, target)
        self._timers: list[tuple[float, int, Pending]] = []
        self._ps: dict[str, zmq.Socket] = {}
        self._map_asked = 0.0
        self.endpoint = ""

    # --- sending ------------------------------------------------------------------------------

    def _ps_socket(self, endpoint: str) -> zmq.Socket:
        s = self._ps.get(endpoint)
        if s is None:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 100_000)
            s.connect(endpoint)
            self.poller.register(s, zmq.POLLIN)
            self._ps[endpoint] = s
        return s

    def send_ps(self, p: Pending, endpoint: str, body: dict, step: Any) -> None:
        """Send a sub-request to a partition server; ``step`` comes back with the answer."""
        srid = b"%d" % next(self._ids)
        self._sub[srid] = (p, step, time.monotonic(), endpoint)
        protocol.send_frames(self._ps_socket(endpoint), [srid, protocol.pack(body)])

    def send_coordinator(self, p: Pending, body: dict, step: Any) -> None:
        """Send a request to the coordinator; ``step`` comes back with the answer."""
        srid = b"%d" % next(self._ids)
        self._sub[srid] = (p, step, time.monotonic(), "coordinator")
        self.coord.send_multipart([srid, protocol.pack(body)])

    def reply(self, p: Pending, body: bytes) -> None:
        """Answer the client (once)."""
        if not p.done:
            p.done = True
            protocol.send_frames(self.router, [p.ident, p.rid, body])

    def reply_ok(self, p: Pending, result: Any) -> None:
        """Answer the client with a success result."""
        self.reply(p, protocol.ok(result))

    def fail(self, p: Pending, exc: TableError) -> None:
        """Answer the client with an error."""
        self.reply(p, protocol.error(exc))

    def retry_later(self, p: Pending, why: str) -> None:
        """Back off and run the request again with a fresh map, or give up at the deadline."""
        p.attempts += 1
        now = time.monotonic()
        if now >= p.deadline:
            self.fail(p, TableError("ServerBusy", f"gave up after {p.attempts} attempts: {why}"))
            return
        self.refresh_map()
        delay = min(0.002 * (2 ** min(p.attempts, 6)), 0.1)
        heapq.heappush(self._timers, (now + delay, next(self._ids), p))

    def refresh_map(self, force: bool = False) -> None:
        """Ask the coordinator for a snapshot (at most one request per 50 ms)."""
        now = time.monotonic()
        if force or now - self._map_asked > 0.05:
            self._map_asked = now
            self.coord.send_multipart([b"map", protocol.pack({"op": "map"})])

    # --- receiving ----------------------------------------------------------------------------

    def _on_client(self, frames: list[bytes]) -> None:
        ident = frames[0]
        rid = frames[1] if len(frames) > 1 else b""
        try:
            rid, req = protocol.parse_request(frames[1:])
        except TableError as exc:
            self.router.send_multipart([ident, rid[: protocol.MAX_REQUEST_ID], protocol.error(exc)])
            return
        p = Pending(ident, rid, req, time.monotonic() + self.cfg.deadline_s)
        self.start(p)

    def start(self, p: Pending) -> None:
        """(Re)run a request from the beginning of its current step."""
        if p.done:
            return
        try:
            self.handler.run(p)
        except TableError as exc:
            self.fail(p, exc)
        except Exception as exc:
            log.exception("request failed")
            self.fail(p, TableError("InternalError", f"{type(exc).__name__}: {exc}"))

    def _on_answer(self, frames: list[bytes], from_coordinator: bool) -> None:
        if len(frames) != 2:
            return
        srid, body = frames
        if from_coordinator and srid == b"map":
            try:
                self.cache.apply(protocol.result(body))
            except TableError as exc:
                log.warning("map snapshot failed: %s", exc)
            return
        ent = self._sub.pop(srid, None)
        if ent is None:
            return  # an answer to an attempt we already gave up on
        p, step, _, _ = ent
        if p.done:
            return
        try:
            reply = protocol.unpack(body)
            self.handler.answer(p, step, reply, body)
        except TableError as exc:
            self.fail(p, exc)
        except Exception as exc:
            log.exception("answer handling failed")
            self.fail(p, TableError("InternalError", f"{type(exc).__name__}: {exc}"))

    def _on_sub(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            return
        try:
            msg = protocol.unpack(frames[1])
        except TableError:
            return
        if frames[0] == b"map":
            self.cache.apply(msg)
        elif frames[0] == b"hugz" and msg.get("version", -1) > self.cache.version:
            self.refresh_map()  # we missed an update: fetch a snapshot

    def _sweep(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, p = heapq.heappop(self._timers)
            self.start(p)
        limit = self.cfg.attempt_timeout_s
        stale = [k for k, (p, _, sent, _) in self._sub.items() if p.done or now - sent > limit]
        for k in stale:
            p, _, _, target = self._sub.pop(k)
            if not p.done:
                self.retry_later(p, f"no answer from {target}")

    # --- loop ---------------------------------------------------------------------------------

    def serve(self) -> None:
        """Run until SIGTERM/SIGINT."""
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
        self.router.setsockopt(zmq.SNDHWM, 100_000)
        self.router.setsockopt(zmq.RCVHWM, 100_000)
        self.router.bind(self.cfg.native)
        self.endpoint = self.router.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.coord = self.ctx.socket(zmq.DEALER)
        self.coord.setsockopt(zmq.LINGER, 0)
        self.coord.connect(self.cfg.coordinator)
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.poller = zmq.Poller()
        for s in (self.router, self.coord, self.sub):
            self.poller.register(s, zmq.POLLIN)
        log.info("frontend %s serving native clients on %s", self.id, self.endpoint)
        self.refresh_map(force=True)
        sub_connected = ""
        next_sweep = 0.0
        while not self.stopping:
            timeout = 20
            if self._timers:
                timeout = max(0, min(timeout, int((self._timers[0][0] - time.monotonic()) * 1000) + 1))
            events = dict(self.poller.poll(timeout))
            for sock in events:
                for _ in range(1024):
                    try:
                        frames = protocol.recv_frames(sock, protocol.NOBLOCK)
                    except zmq.Again:
                        break
                    if sock is self.router:
                        self._on_client(frames)
                    elif sock is self.sub:
                        self._on_sub(frames)
                    else:
                        self._on_answer(frames, sock is self.coord)
            if self.cache.pub and self.cache.pub != sub_connected:
                if sub_connected:
                    self.sub.disconnect(sub_connected)
                self.sub.connect(self.cache.pub)
                sub_connected = self.cache.pub
            now = time.monotonic()
            if now >= next_sweep or self._timers:
                next_sweep = now + 0.02
                self._sweep()
            if self.cache.version < 0 and now - self._map_asked > 0.5:
                self.refresh_map(force=True)
        for s in [self.router, self.coord, self.sub, *self._ps.values()]:
            s.close(0)


def run(cfg: FrontendConfig) -> None:
    """Entry point for ``rangetable frontend``."""
    fe = Frontend(cfg)

    def stop(signum: int, frame: Any) -> None:
        fe.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    fe.serve()
