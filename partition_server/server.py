"""The partition server process: serves the ranges the coordinator assigns to it.

One thread, one loop over two sockets (the loop only moves messages; the work is in
:class:`~partition_server.store.range_store.RangeStore` and :mod:`partition_server.ranges`):

* a ROUTER bound at ``bind`` — data requests from frontends and control commands
  (load / unload / split / merge / destroy) from the coordinator;
* a DEALER connected to the coordinator — heartbeats carrying the load report, whose answers renew
  the lease (the ZeroMQ guide's *Paranoid Pirate* pattern: the server heartbeats, the coordinator
  answers, silence past the lease means the peer is gone).

Several coordinators: the server heartbeats the one it believes leads (:class:`LeaderTracker`); an
unanswered heartbeat moves it to the next endpoint, a ``NotLeader`` answer to the leader it names,
and while no leader answers it heartbeats every ``HB_RETRY_S``. Every lease grant and control command
carries the leader's term; the server keeps the highest term it has seen and refuses a lower one, so
a deposed leader can neither renew a lease nor command a range.

Fencing: every data request checks the lease first. When the lease lapses (the coordinator is
unreachable, or this process was paused), the server closes every range store and answers
``NotPrimary`` until the coordinator assigns ranges again — a paused server that wakes up never serves
or writes a single request with a stale lease.

The loop waits on both sockets only while a heartbeat answer is due (normally for the millisecond
after each heartbeat), so the answer is processed as soon as it arrives; otherwise it blocks on the
ROUTER alone, which costs fewer system calls per request than polling two sockets or draining
until ``zmq.Again``. Each turn handles one request and checks the heartbeat clock.

A split is a *deferred* command: its halves are prepared on a thread while the range serves
(:mod:`partition_server.split_job`), and the loop answers the coordinator once a socketpair wakes
it, after a switch-over of a few milliseconds; meanwhile the loop also polls that socketpair.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import Any

import zmq
from zmq.backend import zmq_poll

from partition_server.data_requests import DATA_OPS
from partition_server.ranges import RangeSet
from partition_server.reclaimer import Reclaimer
from partition_server.replication.replicator import TICK_S, Replicator
from partition_server.served import Deferred
from partition_server.store.fast_path import set_socket_option
from rangetable import curve, protocol
from rangetable.config import PartitionServerConfig
from rangetable.errors import TableError
from rangetable.kernel.addresses import advertised
from rangetable.kernel.coordinators import LeaderTracker, leader_hint
from rangetable.kernel.process import serve_until_signalled
from rangetable.kernel.watchdog import LeaseWatchdog

log = logging.getLogger("rangetable.partition_server")

HB_RETRY_S = 0.2  # heartbeat interval while no coordinator answers (finding a new leader)
REPL_BURST = 16  # with replicas, requests handled back to back before their batches are shipped together
QUEUED_S = 20e-6  # a receive that returns sooner found its request already queued (it did not wait)
_POLLIN = int(zmq.POLLIN)
_RCVTIMEO = int(zmq.RCVTIMEO)


class PartitionServer:
    """The process loop of one partition server."""

    def __init__(self, cfg: PartitionServerConfig, ctx: zmq.Context | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx or zmq.Context.instance()
        self.keys = curve.KeyRing.load(curve.keys_dir(cfg.data_dir, cfg.keys_dir), own="partition-server")
        self.incarnation = uuid.uuid4().hex[:12]
        self.ranges = RangeSet(cfg.data_dir, sync=cfg.sync, scan_budget_ms=cfg.scan_budget_ms,
                               partition_target=cfg.partition_target, request_window=(
                                   cfg.request_window_s, cfg.request_window_max, cfg.request_window_mb << 20),
                               geo_writes="unknown")  # until the first lease carries the geo role
        self.lease_until = 0.0  # monotonic; no lease until the coordinator first answers
        self.reclaimer = Reclaimer(self.ranges.serving_stores,  # table TTL: reclaims expired entities …
                                   writes=lambda: self.ranges.geo_writes == "all")  # … where the cluster takes writes
        self.had_lease = False
        self.stopping = False
        self.endpoint = ""
        self.server_id = cfg.server_id
        self._hb_sent: dict[bytes, float] = {}
        self._hb_seq = 0
        self._hb_due = False  # the answer to the latest heartbeat has not been processed yet
        self._nbytes = 0
        self._range: object = None  # the range the request being handled names (its reply may be held)
        self._geo_marked: tuple[int, dict] = (-1, {})  # the geo epoch last seen and its primaries' batches then
        self._geo_echoed = -1  # the geo epoch the heartbeat says this server enforces (_geo_echo)
        self.pending = 0  # requests handled back to back, each already queued (the backlog)
        self.deferred: list[tuple[bytes, bytes, Deferred]] = []  # commands answered when ready
        self._wake_r, self._wake_w = socket.socketpair()  # a split job's thread wakes the loop
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.ranges.notify = self._wake
        self.repl: Replicator | None = None
        if cfg.replication:  # a cluster with --replicas > 1: this server holds replicas of ranges
            self.repl = self.ranges.repl = Replicator(self.ctx, self.keys, cfg.replica_lag_s, cfg.data_dir,
                                                      cfg.rebuild_mb_s)
            self.repl.on_rebuilt = self.ranges.rebuilt
        self.leaders = LeaderTracker(cfg.coordinator)
        self.term = 0  # the highest coordinator term seen (lease grants and commands of a lower one are refused)
        self._granted_term = 0  # the term of the last lease grant: a new one gets every range's load report
        self._answered = float("-inf")  # when the last lease grant arrived
        self._resend = False  # a NotLeader answer named another coordinator: heartbeat it at once
        self.watchdog = LeaseWatchdog(cfg.alive_file)  # systemd WatchdogSec / an alive file: the fencing rule

    # --- sockets ------------------------------------------------------------------------------

    def _bind(self) -> None:
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
        curve.serve_secured(self.router, self.keys, "partition-server", "partition-server endpoint")
        self.router.bind(self.cfg.bind)
        self.endpoint = advertised(self.router.getsockopt(zmq.LAST_ENDPOINT).decode(), self.cfg.advertise)
        if not self.server_id:
            self.server_id = f"{socket.gethostname()}:{self.endpoint.rsplit(':', 1)[-1]}"
        if self.repl is not None:
            self.repl.me = self.server_id
            log.info("replication endpoint %s", self.repl.bind(self.cfg.replication, self.cfg.advertise_replication))
        self._connect_coordinator()

    def _connect_coordinator(self) -> None:
        self.coord = self.ctx.socket(zmq.DEALER)
        self.coord.setsockopt(zmq.LINGER, 0)
        curve.secure_client(self.coord, self.keys.pair("partition-server"), self.keys.public("coordinator"))
        self.coord.connect(self.leaders.current)
        self._coord_at = self.leaders.current

    def _switch_coordinator(self, endpoint: str) -> None:
        """Heartbeat another coordinator from now on."""
        old = self._coord_at
        if endpoint == old:
            return
        self.coord.disconnect(old)
        self.coord.connect(endpoint)
        self._coord_at = endpoint
        self._hb_due = False
        log.info("heartbeating coordinator %s", endpoint)

    # --- lease --------------------------------------------------------------------------------

    def lease_valid(self) -> bool:
        """True while the lease granted by the coordinator holds; closes every range when it lapses."""
        if time.monotonic() < self.lease_until:
            return True
        if self.had_lease:
            self.had_lease = False
            n = self.ranges.unload_all()
            log.warning("lease lapsed: stopped serving %d ranges", n)
        return False

    def _send_heartbeat(self) -> None:
        if self._hb_due and self.leaders.several and not self._resend:  # the last one went unanswered
            self._switch_coordinator(self.leaders.on_silence())
        self._resend = False
        self._hb_seq += 1
        rid = b"hb%d" % self._hb_seq
        self._hb_sent[rid] = time.monotonic()
        self._hb_due = True
        if len(self._hb_sent) > 64:  # answers that never came
            for k in sorted(self._hb_sent, key=self._hb_sent.__getitem__)[:32]:
                del self._hb_sent[k]
        self.ranges.backups.expire(time.monotonic())
        body = {
            "op": "heartbeat",
            "server": self.server_id,
            "endpoint": self.endpoint,
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "ranges": self.ranges.report(),
            "load": self.ranges.changed_load_report(),
            "pending": self.pending,
            "settings_v": self.ranges.tables.version,
            "geo": self._geo_echo(),  # the geo role it enforces (coordinator/map/geo_role.py)
        }
        if self.repl is not None:
            body["repl_endpoint"] = self.repl.endpoint
            body["zone"] = self.cfg.zone
            body["repl"] = self.repl.report(time.monotonic())
        self.coord.send_multipart([rid, protocol.pack(body)])

    def _geo_echo(self) -> int:
        """The epoch of the geo role this server enforces, as its heartbeat says: a new one once every write it
        accepted under the role before is committed (a write accepted just before a fence is acknowledged only
        after its batch commits: until then it could be missing from the drain point a planned failover reads)."""
        epoch = self.ranges.geo_epoch
        if epoch != self._geo_marked[0]:  # a new role: where each primary range stands now
            self._geo_marked = (epoch, self.repl.marks() if self.repl is not None else {})
        if self._geo_echoed != epoch and (self.repl is None or self.repl.settled(self._geo_marked[1])):
            self._geo_echoed = epoch
        return self._geo_echoed

    def _on_heartbeat_reply(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            return
        sent = self._hb_sent.pop(frames[0], None)
        if sent is None:
            return
        if frames[0] == b"hb%d" % self._hb_seq:
            self._hb_due = False
        try:
            reply = protocol.result(frames[1])
        except TableError as exc:
            if exc.error_code == "NotLeader" and self.leaders.several:
                self._switch_coordinator(self.leaders.on_not_leader(exc))
                # a named leader is asked at once; without a name (an election is under way) the
                # next one is asked at the retry interval, not in a tight loop
                self._resend = leader_hint(exc) is not None
                self._hb_due = False
                return
            log.warning("heartbeat refused: %s", exc)
            return
        term = int(reply.get("term", 0))
        if term < self.term:
            log.warning("lease grant of term %d refused: term %d is current", term, self.term)
            return
        if term > self.term:
            if self.term:
                log.info("coordinator term %d (was %d)", term, self.term)
            self.term = term
        if term != self._granted_term:  # the first grant of a new leader (whose commands may have come first)
            self._granted_term = term
            self.ranges.report_all_next()  # the new leader has no load reports yet
        self._answered = time.monotonic()
        # The lease counts from when the heartbeat was sent, so it lapses here no later than the
        # coordinator believes it does (Paranoid Pirate with a safety margin built in).
        self.lease_until = max(self.lease_until, sent + float(reply["lease_s"]))
        self.had_lease = True
        if self.lease_until > time.monotonic():
            self.watchdog.renewed()
        self.ranges.on_lease(reply)

    # --- requests -----------------------------------------------------------------------------

    def handle(self, req: dict, peer: zmq.Frame | None = None) -> Any:
        """Execute one request (data or control) and return its result; raises TableError.

        ``peer`` is the request's routing-id frame: its CURVE key must be the coordinator's for a
        control command. Data requests need no check: the ZAP allow-list admits only the
        coordinator and frontends, and both may send them (``curve.may``).
        """
        op = req["op"]
        if op in DATA_OPS:
            if not (time.monotonic() < self.lease_until or self.lease_valid()):
                raise TableError("NotPrimary", f"{self.server_id} holds no lease")
            return self.ranges.data(op, req, self._nbytes)
        if op in RangeSet.CONTROL_OPS:
            self._authorize(peer, "control", op)
            term = int(req.get("term", 0))
            if term < self.term:
                raise TableError("NotLeader", f"a command of term {term} refused: term {self.term} is current")
            self.term = term
            return self.ranges.control(op, req)
        if op == "ping":
            self._authorize(peer, "ping", op)
            return {"server": self.server_id, "lease": self.lease_valid()}
        raise TableError("InvalidInput", f"unknown op {op!r}")

    def _authorize(self, peer: zmq.Frame | None, kind: str, op: str) -> None:
        role = self.keys.role_of(protocol.peer_key(peer))
        if not curve.may("partition-server", kind, role):
            raise TableError("AuthorizationPermissionMismatch",
                             f"{op!r} is not accepted from a {role or 'client'} key")

    def _on_request(self, frames: list[bytes], peer: zmq.Frame | None = None) -> None:
        ident = frames[0]
        rid = frames[1] if len(frames) > 1 else b""
        repl = self.repl
        self._range = None
        try:
            rid, req = protocol.parse_request(frames[1:])
            self._nbytes = len(frames[-1])
            if repl is not None and (req["op"] in DATA_OPS or req["op"] == "backup_chunk"):  # without replicas
                held = req.get("range")  # no reply is held; a backup's files leave once their batch commits
                self._range = held if isinstance(held, str) else None  # a malformed id holds nothing back
            result = self.handle(req, peer)
            if isinstance(result, Deferred):
                self.deferred.append((ident, rid, result))
                return
            body = protocol.ok(result)
        except TableError as exc:
            body = protocol.error(exc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # A field missing or of the wrong type (only the coordinator and frontends get here, so
            # this is a peer's bug or a fuzz): a clear error, no stack trace in the log.
            what = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            body = protocol.error(TableError("InvalidInput", f"malformed request: {what}"))
        except Exception as exc:  # a bug must not take the server down; report it
            log.exception("request failed")
            body = protocol.error(TableError("InternalError", f"{type(exc).__name__}: {exc}"))
        if repl is not None and repl.primaries and repl.hold(self._range, [ident, rid, body]):
            return  # sent once every in-sync replica holds what it depends on (replication.py)
        protocol.send_frames(self.router, [ident, rid, body])

    def _wake(self) -> None:
        """Wake the loop (from any thread): a deferred command may be ready."""
        try:
            self._wake_w.send(b"x")
        except OSError:  # the buffer is full: the loop has wake-ups pending anyway
            pass

    def _answer_deferred(self) -> None:
        """Send the answer of every deferred command that is ready."""
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        waiting = []
        for ident, rid, d in self.deferred:
            if not d.ready():
                waiting.append((ident, rid, d))
                continue
            try:
                body = protocol.ok(d.finish())
            except TableError as exc:
                body = protocol.error(exc)
            except Exception as exc:
                log.exception("deferred command failed")
                body = protocol.error(TableError("InternalError", f"{type(exc).__name__}: {exc}"))
            protocol.send_frames(self.router, [ident, rid, body])
        self.deferred = waiting

    # --- the loop -----------------------------------------------------------------------------

    def serve(self) -> None:
        """Run until SIGTERM/SIGINT; closes every range store on the way out."""
        self._bind()
        log.info("partition server %s serving on %s", self.server_id, self.endpoint)
        self._write_endpoint_file()
        self.reclaimer.start()
        if self.cfg.metrics:
            from partition_server.metrics import collect
            from rangetable.kernel.metrics import serve_metrics

            log.info("metrics on %s", serve_metrics(self.cfg.metrics, lambda: collect(self)))
        router, coord = self.router, self.coord
        both = [(router, _POLLIN), (coord, _POLLIN)]
        repl = self.repl
        if repl is not None and repl.sock is not None:
            both.append((repl.sock, _POLLIN))
        next_hb = 0.0
        hb = self.cfg.heartbeat_s
        burst = 0
        while not self.stopping:
            now = time.monotonic()
            if now >= next_hb or self._resend:
                self._send_heartbeat()
                next_hb = now + (hb if now - self._answered < 1.5 * hb else min(hb, HB_RETRY_S))
            timeout = max(1, int((next_hb - now) * 1000))
            if repl is not None:  # replicas: three sockets, and the replication timers
                self._pump()
                ready = dict(zmq_poll(both if not self.deferred else [*both, (self._wake_r.fileno(), _POLLIN)],
                                      min(timeout, int(TICK_S * 1000))))
                if coord in ready:
                    self._drain_coordinator()
                if self.deferred:
                    self._answer_deferred()
                if repl.sock in ready:
                    repl.drain(flush=False)  # its acknowledgements leave with the next _pump, in one message per peer
                if router in ready:
                    self._take_requests()
                continue
            elif self.deferred:  # a command is being prepared off the loop: wait for its wake-up too
                ready = dict(zmq_poll([*both, (self._wake_r.fileno(), _POLLIN)], timeout))
                if coord in ready:
                    self._drain_coordinator()
                self._answer_deferred()
                if router not in ready:
                    continue
                frames, peer = protocol.recv_frames_peer(router, protocol.NOBLOCK)
                burst = 1
            elif self._hb_due:  # wait on both sockets, so the answer is processed as soon as it comes
                fired = zmq_poll(both, timeout)  # [(socket, events)] in ``both``'s order
                if fired and fired[-1][0] is coord:
                    self._drain_coordinator()
                if not fired or fired[0][0] is not router:
                    continue
                frames, peer = protocol.recv_frames_peer(router, protocol.NOBLOCK)
                burst = 1
            else:  # nothing can come from the coordinator before the next heartbeat: block on the ROUTER
                set_socket_option(router, _RCVTIMEO, timeout)
                t0 = time.perf_counter()
                try:
                    frames, peer = protocol.recv_frames_peer(router)
                except zmq.Again:
                    continue
                burst = burst + 1 if time.perf_counter() - t0 < QUEUED_S else 1
            self.pending = burst
            self._on_request(frames, peer)
        self.close()

    def _take_requests(self) -> None:
        """With replicas: handle the requests queued on the ROUTER (up to :data:`REPL_BURST`) before the loop's
        next turn ships their batches — one ``repl`` per follower for all of them (the ZeroMQ guide's "drain
        what is ready, then send"). Never waits: one queued request is handled and shipped alone."""
        router = self.router
        for n in range(1, REPL_BURST + 1):
            try:
                frames, peer = protocol.recv_frames_peer(router, protocol.NOBLOCK)
            except zmq.Again:
                return
            self.pending = n
            self._on_request(frames, peer)
            if not protocol.readable(router):
                return

    def _pump(self) -> None:
        """Ship replication batches and send the replies whose batches are now committed."""
        assert self.repl is not None
        for frames in self.repl.pump():
            protocol.send_frames(self.router, frames)

    def _drain_coordinator(self) -> None:
        """Process every heartbeat answer that has arrived (checking readiness costs less than
        provoking ``zmq.Again``)."""
        coord = self.coord
        while protocol.readable(coord):
            self._on_heartbeat_reply(protocol.recv_frames(coord, protocol.NOBLOCK))
            if self._resend:
                return

    def _write_endpoint_file(self) -> None:
        run = os.path.join(self.cfg.data_dir, "run")
        os.makedirs(run, exist_ok=True)
        path = os.path.join(run, f"ps-{self.server_id.replace(':', '_').replace('/', '_')}.endpoint")
        with open(path + ".tmp", "w") as f:
            f.write(self.endpoint)
        os.replace(path + ".tmp", path)

    def close(self) -> None:
        """Close every store and socket."""
        self.reclaimer.stop()
        self.ranges.unload_all()
        self.ranges.backups.close_all()
        if self.repl is not None:
            self.repl.close()
        for s in (getattr(self, "router", None), getattr(self, "coord", None)):
            if s is not None:
                s.close(0)
        self._wake_r.close()
        self._wake_w.close()
        self.watchdog.close()


def run(cfg: PartitionServerConfig) -> None:
    """Entry point for ``rangetable partition-server``."""
    from partition_server.store.replica_log import configure_budget
    from rangetable.kernel import malloc_trim, storage

    storage.configure(cfg.block_cache_mb << 20, cfg.memtable_budget_mb << 20)
    configure_budget(cfg.ring_budget_mb << 20)
    malloc_trim.start()  # RSS stays near the block cache's bound (rangetable/kernel/malloc_trim.py)
    serve_until_signalled(PartitionServer(cfg))
