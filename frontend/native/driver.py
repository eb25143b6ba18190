"""What both frontend drivers share: sub-request bookkeeping, retries, answers, map updates.

:class:`~frontend.native.handler.Handler` holds the request logic and talks to a driver through
``send_ps``, ``send_coordinator``, ``reply``, ``reply_ok``, ``fail``, ``retry_later`` and
``refresh_map``. :class:`DriverCore` implements everything of that which does not depend on how
sockets are waited on; the blocking native loop (:mod:`frontend.native.server`) and the asyncio driver of
the HTTP frontend (:mod:`frontend.native.asyncio_driver`) add only their sockets, timers and the way they answer.
"""

from __future__ import annotations

import itertools
import logging
import socket
import time
import uuid
from typing import Any

import zmq

from frontend.native.handler import Handler, Pending
from frontend.routing import MapCache
from rangetable import curve, protocol
from rangetable.config import FrontendConfig
from rangetable.errors import TableError
from rangetable.kernel.coordinators import LeaderTracker

log = logging.getLogger("rangetable.frontend")
MAP_REFRESH_S = 0.05  # at most one snapshot request per this long
COORD_SILENCE_S = 1.0  # a map request unanswered this long moves us to the next coordinator
HUGZ_SILENCE_S = 2.5  # no hugz for this long: ask the map (a new leader publishes elsewhere)
SLOW_REQUEST_S = 3.0  # a request answered after this long is logged with its retries (where it waited)
MAX_WAITS_KEPT = 256  # retry reasons a request keeps for that log line


class DriverCore:
    """The driver-independent half of a frontend. Subclasses provide ``coord`` (a DEALER to the
    coordinator), ``sub`` (a SUB for map updates), ``_ps_socket``, ``_schedule``, ``reply``,
    ``reply_ok`` and ``fail``."""

    coord: zmq.Socket
    sub: zmq.Socket

    def __init__(self, cfg: FrontendConfig, ctx: zmq.Context | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx or zmq.Context.instance()
        self.keys = curve.KeyRing.load(cfg.keys_dir, own="frontend")
        self.id = cfg.frontend_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.cache = MapCache()
        self.handler = Handler(self, secondary=bool(cfg.source))
        self._ids = itertools.count(1)
        self._sub: dict[bytes, tuple[Pending, Any, float, str]] = {}  # sub rid -> (pending, step, sent, target)
        self._map_asked = 0.0
        self._sub_connected = ""
        self._last: tuple[Any, Any] = (None, None)  # (raw body, decoded) of the answer being handled
        self.closed = False
        self.leaders = LeaderTracker(cfg.coordinator)
        self._coord_at = self.leaders.current  # the coordinator the DEALER is connected to
        self._map_waiting = 0.0  # when an unanswered map request was sent (0: none)
        self._heard = time.monotonic()  # last message on the SUB socket (hugz come every second)
        self._map_due = False

    def quiet(self) -> bool:
        """Nothing for the sweep to look after: no sub-request in flight, no map asked for or due, and a map in
        hand (a loop may then sleep until a message or a timer comes rather than wake every sweep)."""
        return not self._sub and not self._map_due and not self._map_waiting and self.cache.version >= 0

    def _secure(self, sock: zmq.Socket, server_role: str) -> zmq.Socket:
        """Make ``sock`` a CURVE client with the frontend key, talking to a server of ``server_role``."""
        return curve.secure_client(sock, self.keys.pair("frontend"), self.keys.public(server_role))

    # --- hooks -------------------------------------------------------------------------------

    def _ps_socket(self, endpoint: str) -> zmq.Socket:
        raise NotImplementedError

    def _schedule(self, delay: float, p: Pending) -> None:
        raise NotImplementedError

    def _sent(self, sock: zmq.Socket) -> None:
        """Called after every send on ``sock`` (the asyncio driver re-checks it: its FD is edge-triggered)."""

    def _map_installed(self) -> None:
        """Called after a snapshot or update was installed."""

    def _keys_changed(self, version: int) -> None:
        """Called when a hugz says the registry of client keys is at ``version`` (the native
        frontend fetches it; the HTTP frontend has no native endpoint to guard)."""

    def _on_client_keys(self, result: dict) -> None:
        """The answer to a ``keys_list`` sent as ``[b"keys", …]``."""

    def reply(self, p: Pending, body: bytes) -> None:
        raise NotImplementedError

    def reply_ok(self, p: Pending, result: Any) -> None:
        raise NotImplementedError

    def fail(self, p: Pending, exc: TableError) -> None:
        raise NotImplementedError

    # --- the Handler's interface --------------------------------------------------------------

    def _send(self, sock: zmq.Socket, p: Pending, body: dict, step: Any, target: str) -> None:
        """Track a sub-request under a fresh id and send it as ``[id, msgpack body]``."""
        srid = b"%d" % next(self._ids)
        data = protocol.pack(body)
        self._sub[srid] = (p, step, time.monotonic(), target)
        protocol.send_frames(sock, [srid, data])
        self._sent(sock)

    def send_ps(self, p: Pending, endpoint: str, body: dict, step: Any) -> None:
        """Send a sub-request to a partition server; ``step`` comes back with the answer."""
        self._send(self._ps_socket(endpoint), p, body, step, endpoint)

    def send_coordinator(self, p: Pending, body: dict, step: Any) -> None:
        """Send a request to the coordinator; ``step`` comes back with the answer."""
        self._send(self.coord, p, body, step, "coordinator")

    def retry_later(self, p: Pending, why: str) -> None:
        """Back off and run the request again with a fresh map, or give up at the deadline."""
        p.attempts += 1
        now = time.monotonic()
        if len(p.waits) < MAX_WAITS_KEPT:
            p.waits.append((now - p.born, why))
        if now >= p.deadline:
            self.fail(p, TableError("ServerBusy", f"gave up after {p.attempts} attempts: {why}"))
            return
        self.refresh_map()
        self._schedule(min(0.002 * (2 ** min(p.attempts, 6)), 0.1), p)

    @staticmethod
    def note_if_slow(p: Pending) -> None:
        """Log a request that took longer than SLOW_REQUEST_S, with where it waited (its retries)."""
        took = time.monotonic() - p.born
        if took < SLOW_REQUEST_S:
            return
        req = p.req
        waits = p.waits
        reasons: dict[str, int] = {}
        for _t, why in waits:
            reasons[why] = reasons.get(why, 0) + 1
        shown = "; ".join(f"{n}x {why}" for why, n in list(reasons.items())[:6])
        first = f", first retry at {waits[0][0]:.2f} s, last at {waits[-1][0]:.2f} s" if waits else ""
        entity = req.get("entity")
        pk = req.get("pk", entity.get("PartitionKey") if isinstance(entity, dict) else None)
        log.warning("slow request %s table=%s pk=%r: %.2f s, %d retries%s: %s", req.get("op"), req.get("table"), pk,
                    took, p.attempts, first, shown or "no retries (waited on one answer)")

    def refresh_map(self, force: bool = False) -> None:
        """Ask the coordinator for what changed since our version (a delta), or for a snapshot when
        we have no map yet (at most one request per 50 ms)."""
        now = time.monotonic()
        if force or now - self._map_asked > MAP_REFRESH_S:
            self._map_asked = now
            req: dict = {"op": "map"}
            if self.cache.version >= 0:
                req["since"] = self.cache.version
            protocol.send_frames(self.coord, [b"map", protocol.pack(req)])
            self._sent(self.coord)
            self._map_waiting = self._map_waiting or now
            self._map_due = False

    def _switch_coordinator(self, endpoint: str) -> None:
        """Talk to another coordinator from now on (a standby named it, or ours went silent)."""
        if endpoint != self._coord_at:
            self.coord.disconnect(self._coord_at)
            self.coord.connect(endpoint)
            self._coord_at = endpoint
            log.info("talking to coordinator %s", endpoint)
        self._map_waiting = 0.0
        self._map_due = True  # sent now, or by the sweep once MAP_REFRESH_S has passed
        self.refresh_map()

    # --- running requests ---------------------------------------------------------------------

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

    # --- receiving ----------------------------------------------------------------------------

    def _on_answer(self, frames: list[bytes], from_coordinator: bool = False) -> None:
        """An answer from a partition server or the coordinator (or a map snapshot)."""
        if len(frames) != 2:
            return
        srid, body = frames
        if from_coordinator and srid == b"map":
            self._map_waiting = 0.0
            try:
                self._apply_map(protocol.result(body))
            except TableError as exc:
                if exc.error_code == "NotLeader" and self.leaders.several:
                    self._switch_coordinator(self.leaders.on_not_leader(exc))
                else:
                    log.warning("map snapshot failed: %s", exc)
            return
        if from_coordinator and srid == b"keys":
            try:
                self._on_client_keys(protocol.result(body))
            except TableError as exc:
                log.warning("client key list failed: %s", exc)
            return
        ent = self._sub.pop(srid, None)
        if ent is None:
            return  # an answer to an attempt we already gave up on
        p, step, _, target = ent
        if p.done:
            return
        try:
            # entities and pages are only read (written as JSON or packed again): arrays as tuples
            reply = protocol.unpack(body, use_list=step == "relay")
            if target == "coordinator" and self.leaders.several and isinstance(reply, dict) \
                    and isinstance(reply.get("error"), dict) and reply["error"].get("code") == "NotLeader":
                self._switch_coordinator(self.leaders.on_not_leader(TableError.from_wire(reply["error"])))
                self.retry_later(p, "the coordinator asked was not the leader")
                return
            self._last = (body, reply)
            self.handler.answer(p, step, reply, body)
        except TableError as exc:
            self.fail(p, exc)
        except Exception as exc:
            log.exception("answer handling failed")
            self.fail(p, TableError("InternalError", f"{type(exc).__name__}: {exc}"))

    def _on_update(self, frames: list[bytes]) -> None:
        """A message on the SUB socket: a map update, or hugz with the current version (Clone)."""
        if len(frames) != 2:
            return
        self._heard = time.monotonic()
        try:
            msg = protocol.unpack(frames[1])
        except TableError:
            return
        if frames[0] in (b"delta", b"map") and isinstance(msg, dict):
            self._apply_map(msg)
        elif frames[0] == b"cuts" and isinstance(msg, dict):  # the geo role and a secondary's cuts (docs/geo.md)
            self.cache.set_geo(msg.get("geo"))
            self.cache.set_cuts(msg.get("cuts"))
        elif frames[0] == b"hugz" and isinstance(msg, dict):
            if msg.get("version", -1) > self.cache.version:
                self.refresh_map()  # we missed an update: ask for what changed since our version
            if isinstance(msg.get("keys"), int):
                self._keys_changed(msg["keys"])

    def _apply_map(self, snap: dict) -> None:
        """Install a snapshot or a delta; a delta that starts past our version (missed updates)
        makes us ask for what changed since our version instead."""
        if not self.cache.apply(snap) and "prev" in snap and self.cache.is_gap(snap):
            self.refresh_map()
            return
        if self.cache.pub and self.cache.pub != self._sub_connected:
            if self._sub_connected:
                self.sub.disconnect(self._sub_connected)
            self.sub.connect(self.cache.pub)
            self._sub_connected = self.cache.pub
        self._resend_from_departed()
        self._map_installed()

    def _resend_from_departed(self) -> None:
        """Re-run at once the requests waiting on a partition server the map no longer lists (the
        coordinator declared it dead and failed its ranges over), instead of waiting out their attempt
        timeout: a failed-over range answers as soon as its new primary is in the map. Safe to repeat:
        writes carry their request id (exactly once), reads have no effect."""
        live = set(self.cache.servers.values())
        gone = [k for k, (_p, _s, _t, target) in self._sub.items() if target != "coordinator" and target not in live]
        for k in gone:
            p, step, _, _ = self._sub.pop(k)
            if not p.done:
                self.handler.abandon(p, step)
                self.retry_later(p, "its server left the map")

    def _sweep(self) -> None:
        """Retry sub-requests that got no answer within ``attempt_timeout_s``; ask for a map if none."""
        now = time.monotonic()
        limit = self.cfg.attempt_timeout_s
        stale = [k for k, (p, _, sent, _) in self._sub.items() if p.done or now - sent > limit]
        for k in stale:
            p, step, _, target = self._sub.pop(k)
            if target == "coordinator" and self.leaders.several:
                self._switch_coordinator(self.leaders.on_silence())
            if not p.done:
                self.handler.abandon(p, step)
                self.retry_later(p, f"no answer from {target}")
        if self._map_due:
            self.refresh_map()
        if self.leaders.several:
            if self._map_waiting and now - self._map_waiting > COORD_SILENCE_S:
                self._switch_coordinator(self.leaders.on_silence())  # the leader paused or died
            elif now - self._heard > HUGZ_SILENCE_S and not self._map_waiting:
                self._heard = now
                self.refresh_map(force=True)  # no hugz: has another coordinator taken over?
        if self.cache.version < 0 and now - self._map_asked > 0.5:
            self.refresh_map(force=True)
