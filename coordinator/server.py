"""The coordinator process: the partition manager.

The loop only moves messages:

* ROUTER at ``bind`` — heartbeats from partition servers (answered at once with a lease: the
  ZeroMQ guide's *Paranoid Pirate* pattern), map snapshots for frontends, admin requests;
* PUB at ``pub_bind`` — every map change as a numbered delta holding only what changed
  (:mod:`coordinator.map.deltas`), plus ``hugz`` carrying the current version every second (the
  guide's *Clone* pattern: a subscriber that sees a gap, or a hugz newer than its map, asks for
  ``map {since}`` and gets the missed deltas folded into one, or a snapshot when they are too old);
* an inproc PULL — answers and publish requests from the controller thread, which runs every
  multi-step change (see :mod:`coordinator.control.operations`).

The state is in objects that own it (:mod:`coordinator.state`): the map and its commits
(:class:`~coordinator.state.maps.MapService`), the registered servers
(:class:`~coordinator.state.registry.ServerRegistry`) and the event log
(:class:`~coordinator.state.events.EventLog`), bundled with the configuration and keys as a
:class:`~coordinator.state.cluster.Cluster`. The controller, the balancer loop, the map snapshots and
the operations take those objects; the :class:`Coordinator` is the process around them: its sockets
and loop, its leadership and term, the takeover. Heartbeats, leases and dead servers are
:mod:`coordinator.leases`; what each request gets is :mod:`coordinator.admin_dispatch` (which, like
:mod:`coordinator.takeover`, sees this class through a ``Protocol`` of :mod:`coordinator.interfaces`).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

import zmq

from coordinator import admin_dispatch, geo_follow, geo_roles, leases, takeover
from coordinator.answerer import Answerer
from coordinator.backup import BackupSessions
from coordinator.control import operations as ops
from coordinator.control import replica_move, replica_ops
from coordinator.control.balancer_loop import BalancerLoop
from coordinator.control.controller import Controller
from coordinator.leadership.etcd_election import EtcdLeadership, leadership_for
from coordinator.leadership.lock_election import Leadership
from coordinator.map_snapshots import MapSnapshots
from coordinator.standby.etcd_follower import EtcdFollower
from coordinator.standby.warm import WarmFollower
from coordinator.state.cluster import Cluster
from coordinator.state.events import EventLog
from coordinator.state.maps import MapService
from coordinator.state.registry import ServerRegistry
from rangetable import curve, protocol
from rangetable.config import CoordinatorConfig
from rangetable.errors import TableError
from rangetable.kernel.addresses import advertised
from rangetable.kernel.coordinators import not_leader
from rangetable.kernel.gc_tuning import GcPauses
from rangetable.kernel.process import serve_until_signalled

if TYPE_CHECKING:
    from rangetable.messages import Hugz

log = logging.getLogger("rangetable.coordinator")
BATCH = 64  # requests handled per loop turn before their answers go out (registrations commit once)
DRAIN_MAX_S = 2.0  # time spent handling queued requests before declaring a silent server dead


class Coordinator:
    """The coordinator process: its sockets and loop, leadership and term, the takeover; it composes the
    state objects (:attr:`cluster`) and the threads that work on them."""

    def __init__(self, cfg: CoordinatorConfig, ctx: zmq.Context | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx or zmq.Context.instance()
        self.keys = curve.KeyRing.load(curve.keys_dir(cfg.data_dir, cfg.keys_dir), own="coordinator")
        maps = MapService(self.notify)
        self.cluster = Cluster(cfg, self.keys, maps, ServerRegistry(maps), EventLog(maps))
        self.keys_version = 0  # client keys (client_keys.py): loaded with the meta store at takeover
        self._cuts_sent, self._cuts_due = (-1, -1), 0.0  # the cuts and geo role last sent, when due again
        self.stopping = False
        self.leadership: Leadership | EtcdLeadership | None = None
        self.term = 0  # the term this coordinator leads (0: standby)
        self.takeover: dict = {}  # how the last takeover went (for status and the logs)
        self.follower: WarmFollower | EtcdFollower | None = None  # a standby's warm copy of the leader's store (takeover.follow)
        self._publish_due = False  # a delta to publish once the map's lock is free (publish)
        self.controller = Controller(self.cluster, self, self.ctx)
        # backups under way and their chunk relay, a controller thread of its own (coordinator/backup.py)
        self.backups = BackupSessions(cfg.data_dir,
                                      make_relay=lambda: Controller(self.cluster, self, self.ctx, name="backup-relay"))
        self.balancer_loop = BalancerLoop(self.cluster, self.controller)
        self.map_snapshots = MapSnapshots(maps, self.cluster.registry, self.notify)  # packed off the loop thread
        self.answerer = Answerer(self.notify)  # requests that need the map's lock, answered off the loop thread
        self.pub_endpoint = ""
        self.endpoint = ""
        self._tls = threading.local()
        self._inproc = f"inproc://coordinator-{id(self)}"
        self.gc = GcPauses()  # installed when this coordinator leads (its loop freezes survivors)

    # --- leadership ---------------------------------------------------------------------------

    def election(self) -> Leadership | EtcdLeadership:
        """The election this coordinator takes part in (lock files or etcd, chosen in :meth:`serve`
        once its endpoints are bound); raises RuntimeError before."""
        election = self.leadership
        if election is None:
            raise RuntimeError("the coordinator takes part in no election before it serves")
        return election

    def fence(self) -> None:
        """Step down at once when a later term exists (called before every command sent and on
        both sides of every meta-store write; a deposed leader never acts)."""
        if self.leadership is not None and self.leadership.deposed():
            self.step_down()

    def step_down(self) -> None:
        """Stop leading without acting: re-run this process as a standby (same pid, fresh state)."""
        log.warning("term %d is over (a later term exists): stepping down", self.term)
        for h in logging.getLogger().handlers:
            h.flush()
        if self.cfg.restart_on_deposed:
            os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # the same command line, -m included
        self.stopping = True
        raise TableError("NotLeader", f"coordinator {self.endpoint} was deposed")

    # --- shared helpers (called from any thread) ---------------------------------------------

    def notify(self, frames: list[bytes]) -> None:
        """Hand frames to the loop thread through its inproc socket (from any thread)."""
        sock = getattr(self._tls, "push", None)
        if sock is None:
            sock = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.connect(self._inproc)
            self._tls.push = sock
        sock.send_multipart(frames)

    def keys_changed(self, version: int) -> None:
        """The client keys changed (``client_keys.handle``): their version goes out on a ``hugz`` now."""
        self.keys_version = version
        self.notify([b"hugz"])

    def lead(self, quiet_until: float) -> None:
        """Start the balancer loop (with the settings of the loaded meta store; no round before
        ``quiet_until``) and the controller: the map is loaded (``takeover.finish``)."""
        self.balancer_loop = BalancerLoop(self.cluster, self.controller)
        self.balancer_loop.start(quiet_until)
        self.controller.start()

    # --- loop ---------------------------------------------------------------------------------

    def publish(self) -> None:
        """Send what changed since the last delta as the next delta (nothing when nothing did). The loop thread
        calls this: it waits for the map's lock no longer than a heartbeat does (the commit that asked for it
        usually still holds it for a moment); held longer, the next tick tries again."""
        maps = self.cluster.map
        with maps.briefly() as held:
            self._publish_due = not held
            packed = maps.next_delta(self.cluster.registry.servers) if held else None
        if packed is not None:
            self.pub.send_multipart([b"delta", packed])

    def serve(self) -> None:
        """Run until SIGTERM/SIGINT: a standby until this coordinator wins a term, then the leader."""
        pull = self.ctx.socket(zmq.PULL)
        pull.bind(self._inproc)
        router = self.ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
        curve.serve_secured(router, self.keys, "coordinator", "coordinator endpoint")
        router.bind(self.cfg.bind)
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        curve.serve_secured(self.pub, self.keys, "coordinator", "coordinator map updates")
        self.pub.bind(self.cfg.pub_bind)
        self.pub_endpoint = advertised(self.pub.getsockopt(zmq.LAST_ENDPOINT).decode(), self.cfg.pub_advertise)
        self.endpoint = advertised(router.getsockopt(zmq.LAST_ENDPOINT).decode(), self.cfg.advertise)
        self.map_snapshots.pub_endpoint = self.pub_endpoint
        self.leadership = leadership_for(self.cfg, self.endpoint, self.pub_endpoint)  # lock files or etcd
        # The balancer and controller threads compute for a while at a time; a short GIL switch
        # interval lets the loop thread answer a heartbeat within ~0.5 ms of its arrival, instead
        # of waiting 5 ms (the default) for the GIL every time it wakes (the "convoy effect").
        sys.setswitchinterval(0.0005)
        if self.cfg.metrics:
            from coordinator.metrics import collect
            from rangetable.kernel.metrics import serve_metrics

            log.info("metrics on %s", serve_metrics(self.cfg.metrics, lambda: collect(self.cluster, self.term)))
        log.info("coordinator on %s, map updates on %s: standby until it wins a term", self.endpoint,
                 self.pub_endpoint)
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(pull, zmq.POLLIN)
        self._stand_by(router, poller)
        if not self.stopping:
            self._serve_as_leader(router, pull, poller)
        self.stopping = True
        self.balancer_loop.stop()
        self.map_snapshots.stop()
        self.answerer.stop()
        self.controller.stopping = True
        if self.controller.is_alive():
            self.controller.join(timeout=5)
        self.backups.stop()
        self.balancer_loop.join(timeout=5)
        for s in (router, pull, self.pub):
            s.close(0)
        push = getattr(self._tls, "push", None)
        if push is not None:
            push.close(0)
        if self.cluster.map.meta is not None:
            self.cluster.map.meta.close()
        if self.follower is not None:
            self.follower.close()

    def _stand_by(self, router: zmq.Socket, poller: zmq.Poller) -> None:
        """Answer ``NotLeader`` (naming the leader) until this coordinator wins a term, then lead."""
        election = self.election()
        next_poll = 0.0
        leader = None
        while not self.stopping:
            events = dict(poller.poll(50))
            if router in events:
                hint = not_leader(self.endpoint, leader.endpoint if leader else None)
                for _ in range(512):
                    try:
                        frames = router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    router.send_multipart([frames[0], frames[1] if len(frames) > 2 else b"", protocol.error(hint)])
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + 0.05
                # Follow before the first campaign: a coordinator restarted after a kill can win at its first
                # poll, and then takes the follower's copy too (CI found such a winner loading cold).
                try:
                    leader = election.read_latest()
                except TableError:
                    continue  # etcd without a majority: stay a standby, naming the last leader known
                takeover.follow(self, leader)
                won = election.poll()
                if won is not None:
                    takeover.begin(self, won)
                    return

    def _serve_as_leader(self, router: zmq.Socket, pull: zmq.Socket, poller: zmq.Poller) -> None:
        log.info("coordinator leads term %d on %s, map updates on %s; loading the map", self.term, self.endpoint,
                 self.pub_endpoint)
        next_tick = 0.0
        next_hugz = next_index = 0.0
        next_gc = time.monotonic() + 2 * (self.cfg.lease_s + self.cfg.lease_grace_s)
        next_fence, fencer = 0.0, None  # a forced failover's old source: asked to stop until it answers
        next_rerepl = next_gc if self.cfg.replicas > 1 else float("inf")
        held: list[tuple[list[bytes], str | None]] | None = []  # (request, sender role) held while the map loads
        self.gc.install()
        while not self.stopping:
            events = dict(poller.poll(50))
            try:
                self.fence()  # a leader paused past its term wakes up here and steps down before acting
            except TableError:
                break  # deposed, and not re-run as a standby (restart_on_deposed off): stop
            if router in events:
                self._drain(router, BATCH, held=held)
            if pull in events:
                published = False
                while True:
                    try:
                        msg = pull.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if msg[0] == b"reply":
                        router.send_multipart(msg[1:])
                    elif msg[0] == b"hugz":  # the client keys changed: tell frontends now
                        next_hugz = 0.0
                    elif msg[0] == b"led":
                        takeover.finish(self)
                        self._answer(router, [self._on_request(frames, role) for frames, role in held or []])
                        held = None
                        self._freeze_map()
                    elif not published:
                        self.publish()
                        published = True
            if held is not None:
                continue
            self.gc.freeze_survivors()  # after a collection of generation >= 1 (rangetable/kernel/gc_tuning.py)
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + 0.1
                if self._publish_due:
                    self.publish()
                self._send_cuts(now)
                if leases.overdue(self.cluster, now):
                    # Never declare a server dead while its heartbeats may still wait in our own
                    # queue: a coordinator that fell behind (a burst of registrations, a busy host)
                    # would fail over servers that are fine. So what is queued is handled first
                    # (for up to DRAIN_MAX_S: the bound keeps a flooded loop turning).
                    self._drain(router, None, time.monotonic() + DRAIN_MAX_S)
                    leases.check_servers(self.cluster, self.controller, self.balancer_loop)
            if now >= next_rerepl:  # lost replicas rebuilt elsewhere (replica_ops.rereplicate)
                next_rerepl = now + 1.0
                self.controller.submit(replica_ops.rereplicate, self.cluster, self.controller, key="rereplicate")
                if self.cluster.map.pmap.moving_ids():  # pending replica moves go one step on
                    self.controller.submit(replica_move.advance, self.cluster, self.controller, key="replica_moves")
            if now >= next_index:  # back-pressure for indexes nobody applies (operations.judge_lapsed_indexes)
                next_index = now + 1.0
                if self.cluster.map.claims.reported_at:
                    self.controller.submit(ops.judge_lapsed_indexes, self.cluster, self.controller, key="lapsed")
            if now >= next_fence and self.cluster.map.geo.fencing is not None:  # a forced failover's old source
                next_fence = now + geo_roles.FENCE_EVERY_S  # asked from a thread: it may not answer for long
                if fencer is None or not fencer.is_alive():
                    fencer = threading.Thread(target=geo_roles.fence_old, args=(self.cluster,), name="geo-fence",
                                              daemon=True)
                    fencer.start()
            if now >= next_gc:
                next_gc = now + 30.0
                self.controller.submit(ops.collect_garbage, self.cluster, self.controller, key="gc")
            if now >= next_hugz:
                next_hugz = now + 1.0
                hugz: Hugz = {"version": self.cluster.map.pmap.version, "term": self.term, "keys": self.keys_version}
                self.pub.send_multipart([b"hugz", protocol.pack(hugz)])

    def _send_cuts(self, now: float) -> None:
        """Send the geo role and, on a secondary, every table's cut to the frontends when one changed, and every
        second anyway (a frontend that joined or missed one has them within a second; the whole set each time,
        so none is missed for long)."""
        maps = self.cluster.map
        if (maps.cuts.version, maps.geo.epoch) == self._cuts_sent and now < self._cuts_due:
            return
        if not maps.lock.acquire(blocking=False):  # a commit holds the map: the next tick sends them
            return
        try:
            self._cuts_sent, wire, geo = (maps.cuts.version, maps.geo.epoch), maps.cuts.wire(), maps.geo.wire()
            alarms = geo_follow.judge(maps, self.cfg.geo_lag_alarm_s, now) \
                if now >= self._cuts_due and maps.geo.follows else []  # once a second: the lag alarm
        finally:
            maps.lock.release()
        if alarms:
            self.cluster.events.record_many(alarms)
        self._cuts_due = now + 1.0
        self.pub.send_multipart([b"cuts", protocol.pack({"cuts": wire, "geo": geo, "term": self.term})])

    def _freeze_map(self) -> None:
        """Keep the loaded map out of the collector's walks from now on.

        The process froze its start-up heap before it won a term (``tune_gc``), so the map loaded
        since (100,000 range records, then the load history growing with every report) was walked
        whole by every full collection: 0.3 s on an idle core, 0.4-1.7 s on the shared test host,
        during which no heartbeat was answered (that was the heartbeat p99). Frozen at takeover,
        and again after every collection of generation >= 1 (``GcPauses.freeze_survivors``),
        full collections walk only what survived since; generation 1 is collected every 10 young
        collections instead of 50, so each of those walks at most ~200,000 objects.
        """
        self.gc.freeze_survivors(now=True)
        gen0, _, gen2 = gc.get_threshold()
        gc.set_threshold(gen0, 10, gen2)

    def _early_heartbeat(self, router: zmq.Socket, frames: list[bytes], role: str | None) -> bool:
        """While the map loads, answer a partition server's heartbeat with a lease at once (True);
        others wait."""
        try:
            rid, req = protocol.parse_request(frames[1:])
        except TableError:
            return False
        if req.get("op") != "heartbeat" or not curve.may("coordinator", "heartbeat", role):
            return False
        router.send_multipart([frames[0], rid, protocol.ok(takeover.early_lease(self))])
        return True

    def _drain(self, router: zmq.Socket, limit: int | None, until: float = float("inf"),
               held: list | None = None) -> None:
        """Handle up to ``limit`` queued requests (None: until the queue is empty or ``until``),
        persist the registrations among them in one write per batch, then send their answers.
        While the map loads (``held`` is a list), heartbeats get a lease at once and the rest wait there."""
        replies = []
        n = 0
        while (limit is None or n < limit) and (n % BATCH or time.monotonic() < until):
            try:
                frames, peer = protocol.recv_frames_peer(router, protocol.NOBLOCK)
            except zmq.Again:
                break
            n += 1
            role = self.keys.role_of(protocol.peer_key(peer))
            if held is not None:
                if not self._early_heartbeat(router, frames, role):
                    held.append((frames, role))
                continue
            replies.append(self._on_request(frames, role))
            if len(replies) >= BATCH:  # answer in batches, also when draining everything
                self._answer(router, replies)
                replies = []
        self._answer(router, replies)

    def _answer(self, router: zmq.Socket, replies: list) -> None:
        self.cluster.registry.persist_registrations()  # before any answer leaves
        for reply in replies:
            if reply is not None:
                router.send_multipart(reply)

    def _on_request(self, frames: list[bytes], role: str | None) -> list[bytes] | None:
        """The reply frames to a request (None when the controller will answer it later)."""
        ident = frames[0]
        rid = frames[1] if len(frames) > 1 else b""
        try:
            rid, req = protocol.parse_request(frames[1:])
            body = admin_dispatch.handle(self, ident, rid, req, role)
        except TableError as exc:
            body = protocol.error(exc)
        except Exception as exc:
            log.exception("request failed")
            body = protocol.error(TableError("InternalError", f"{type(exc).__name__}: {exc}"))
        return [ident, rid, body] if body is not None else None


def run(cfg: CoordinatorConfig) -> None:
    """Entry point for ``rangetable coordinator``."""
    # GC tuned like the other servers: the loaded map is frozen out of the collector's walks, and
    # young collections are rarer (with 100,000 ranges, full collections triggered by decoding
    # heartbeats took a quarter of the coordinator's CPU).
    serve_until_signalled(Coordinator(cfg))
