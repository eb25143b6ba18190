"""The frontend process: routes native client requests to partition servers.

Sockets (one thread, one poll loop that only moves messages):

* ROUTER at ``native`` — clients (see ``docs/protocol.md``), many requests in flight at once;
* one DEALER per partition server — sub-requests, matched to client requests by id;
* a DEALER to the coordinator — map snapshots and table/admin requests, relayed;
* a SUB to the coordinator's PUB — map updates and hugz (the ZeroMQ guide's *Clone* pattern).

A sub-request answered ``NotPrimary`` or ``RangeBusy``, or not answered within ``attempt_timeout_s``,
is retried after a short back-off with a refreshed map until the request's deadline; only then does
the client see ``ServerBusy``. Writes carry a request id (the client's, or one made here) so a retry
is never applied twice. A client that sends a request again with its request id on the same connection
has given up on the earlier attempt: that one stops, unanswered (:meth:`Frontend._supersede`).
"""

from __future__ import annotations

import heapq
import logging
import time
from typing import Any

import zmq

from frontend.metrics import Answers
from frontend.native.driver import DriverCore
from frontend.native.handler import Pending
from rangetable import curve, protocol
from rangetable.config import FrontendConfig
from rangetable.errors import TableError
from rangetable.kernel.process import serve_until_signalled

log = logging.getLogger("rangetable.frontend")
SWEEP_S = 0.02
QUIET_POLL_MS = 250  # the loop's longest sleep with nothing in flight (hugz still wake it every second)

__all__ = ["Frontend", "run"]


class Frontend(DriverCore):
    """The blocking poll loop of a frontend for native clients."""

    def __init__(self, cfg: FrontendConfig, ctx: zmq.Context | None = None) -> None:
        super().__init__(cfg, ctx)
        self.stopping = False
        self._timers: list[tuple[float, int, Pending]] = []
        self._ps: dict[str, zmq.Socket] = {}
        self.endpoint = ""
        self.answers = Answers()  # answers by (op, status), for the Prometheus metrics
        self._admin_user = self.keys.pairs["admin"].user_id if "admin" in self.keys.pairs else ""
        self.clients: dict[str, str] = {}  # registered client keys (User-Id) -> account
        self.keys_version = -1
        self._keys_asked = 0.0
        self._attempts: dict[tuple[bytes, str], Pending] = {}  # (connection, client's request id) -> its latest attempt

    # --- the driver hooks ---------------------------------------------------------------------

    def _ps_socket(self, endpoint: str) -> zmq.Socket:
        s = self._ps.get(endpoint)
        if s is None:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 100_000)
            self._secure(s, "partition-server")
            s.connect(endpoint)
            self.poller.register(s, zmq.POLLIN)
            self._ps[endpoint] = s
        return s

    def _schedule(self, delay: float, p: Pending) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._ids), p))

    def reply(self, p: Pending, body: bytes) -> None:
        """Answer the client (once)."""
        if not p.done:
            p.done = True
            protocol.send_frames(self.router, [p.ident, p.rid, body])
            self.note_if_slow(p)
            self.answers.note_body(p.req.get("op"), body)
            rid = p.req.get("rid")
            if isinstance(rid, str) and self._attempts.get((p.ident, rid)) is p:
                del self._attempts[(p.ident, rid)]

    def reply_ok(self, p: Pending, result: Any) -> None:
        """Answer the client with a success result."""
        self.reply(p, protocol.ok(result))

    def fail(self, p: Pending, exc: TableError) -> None:
        """Answer the client with an error."""
        self.reply(p, protocol.error(exc))

    # --- client keys --------------------------------------------------------------------------

    def _keys_changed(self, version: int) -> None:
        now = time.monotonic()
        if version > self.keys_version and now - self._keys_asked > 0.2:
            self._keys_asked = now
            protocol.send_frames(self.coord, [b"keys", protocol.pack({"op": "keys_list"})])

    def _on_client_keys(self, result: dict) -> None:
        self.clients = {r["public"]: r["account"] for r in result["keys"]}
        self.keys_version = result["version"]
        log.info("%d client keys registered (version %d)", len(self.clients), self.keys_version)

    def _client_users(self) -> frozenset[str]:
        return frozenset(self.clients)

    # --- receiving ----------------------------------------------------------------------------

    def _on_client(self, frames: list[bytes], peer: zmq.Frame | None = None) -> None:
        user = protocol.peer_key(peer)
        # the admin key, or a client key still registered: a revoked key is refused also on a
        # connection opened before the revocation
        if not (user == self._admin_user or user in self.clients):
            self.guard.refusals.refused("revoked", f"a request signed by {user or 'no key'}: not a registered "
                                                   "client key (revoked?)")
            return
        ident = frames[0]
        rid = frames[1] if len(frames) > 1 else b""
        try:
            rid, req = protocol.parse_request(frames[1:])
        except TableError as exc:
            protocol.send_frames(self.router, [ident, rid[: protocol.MAX_REQUEST_ID], protocol.error(exc)])
            return
        p = Pending(ident, rid, req, self.cfg.deadline_s)
        self._supersede(p)
        self.start_request(p)

    def _supersede(self, p: Pending) -> None:
        """Stop the earlier attempt of ``p``'s request, if its client sent it before on this connection (the same
        request id): the client gave up on it (its timeout passed) and reads only the new one's answer. Left
        running, it would be retried to the deadline beside the new one — in the netsplit drill a client with a
        3 s timeout left three attempts of each write retrying every 0.1 s through a 10 s outage
        (docs/drills.md)."""
        rid = p.req.get("rid")
        if not isinstance(rid, str):
            return
        key = (p.ident, rid)
        old = self._attempts.get(key)
        if old is not None:
            old.done = True  # its retries and answers are dropped (start_request and the answer path check it)
        self._attempts[key] = p

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, p = heapq.heappop(self._timers)
            self.start_request(p)

    # --- loop ---------------------------------------------------------------------------------

    def serve(self) -> None:
        """Run until SIGTERM/SIGINT."""
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
        self.router.setsockopt(zmq.SNDHWM, 100_000)
        self.router.setsockopt(zmq.RCVHWM, 100_000)
        curve.serve_secured(self.router, self.keys, "frontend", "native endpoint", extra=self._client_users)
        self.guard = curve.guard(self.ctx)
        self.router.bind(self.cfg.native)
        self.endpoint = self.router.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.coord = self._secure(self.ctx.socket(zmq.DEALER), "coordinator")
        self.coord.setsockopt(zmq.LINGER, 0)
        self.coord.connect(self._coord_at)
        self.sub = self._secure(self.ctx.socket(zmq.SUB), "coordinator")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.poller = zmq.Poller()
        for s in (self.router, self.coord, self.sub):
            self.poller.register(s, zmq.POLLIN)
        log.info("frontend %s serving native clients on %s", self.id, self.endpoint)
        if self.cfg.metrics:
            from frontend.metrics import collect_native
            from rangetable.kernel.metrics import serve_metrics

            log.info("metrics on %s", serve_metrics(self.cfg.metrics, lambda: collect_native(self.id, self.answers)))
        self.refresh_map(force=True)
        self._keys_changed(0)
        next_sweep = 0.0
        while not self.stopping:
            timeout = QUIET_POLL_MS if self.quiet() else int(SWEEP_S * 1000)
            if self._timers:
                timeout = max(0, min(timeout, int((self._timers[0][0] - time.monotonic()) * 1000) + 1))
            events = dict(self.poller.poll(timeout))
            for sock in events:
                for _ in range(1024):
                    try:
                        if sock is self.router:
                            self._on_client(*protocol.recv_frames_peer(sock, protocol.NOBLOCK))
                            continue
                        frames = protocol.recv_frames(sock, protocol.NOBLOCK)
                    except zmq.Again:
                        break
                    if sock is self.sub:
                        self._on_update(frames)
                    else:
                        self._on_answer(frames, sock is self.coord)
            self._run_timers()
            now = time.monotonic()
            if now >= next_sweep:
                next_sweep = now + SWEEP_S
                self._sweep()
        for s in [self.router, self.coord, self.sub, *self._ps.values()]:
            s.close(0)


def run(cfg: FrontendConfig) -> None:
    """Entry point for ``rangetable frontend``."""
    serve_until_signalled(Frontend(cfg))
