"""Heartbeats and leases: what the coordinator knows of each partition server, and when one is dead.

A partition server heartbeats every 0.5 s with its open ranges and its changed load reports; the
answer is its lease (the ZeroMQ guide's *Paranoid Pirate* pattern: the heartbeat is the request,
the lease the reply). A server is declared dead when nothing was heard from it for
``lease_s + lease_grace_s``: its lease (counted from when it *sent* its last answered heartbeat) has
surely lapsed by then, so its ranges can be reassigned without two servers ever serving one range.

Functions here run in the coordinator's loop thread; they take the cluster's state
(:class:`~coordinator.state.cluster.Cluster`), the controller that runs what a heartbeat calls for, and
the balancer loop fed with every load report.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from coordinator.control import operations as ops
from coordinator.control import replica_ops
from coordinator.map.server_info import ServerInfo

if TYPE_CHECKING:
    from coordinator.control.balancer_loop import BalancerLoop
    from coordinator.control.controller import Controller
    from coordinator.state.cluster import Cluster
    from rangetable.messages import Heartbeat, LeaseAnswer

log = logging.getLogger("rangetable.coordinator")


def heartbeat(cl: Cluster, ctl: Controller, balancer: BalancerLoop, term: int, req: Heartbeat) -> LeaseAnswer:
    """Take one heartbeat (register the server when it is new or restarted, keep its ranges and
    load reports, ask the controller to reconcile it when its ranges differ from the map) and
    return the lease of ``term``. While another thread holds the map's lock (a commit whose meta-store round
    trip hangs: etcd losing its leader), a known server's heartbeat is answered by :func:`renewal` alone, so
    leases do not lapse behind a slow commit."""
    with cl.map.briefly() as held:
        if held:
            return _heartbeat(cl, ctl, balancer, term, req)
    quick = renewal(cl, term, req)
    return quick if quick is not None else _heartbeat(cl, ctl, balancer, term, req)


def renewal(cl: Cluster, term: int, req: Heartbeat) -> LeaseAnswer | None:
    """The lease of a server known, alive and of the same incarnation, renewed without the map's lock and
    without taking its report (the next heartbeat's is taken); None for any other (it registers, under the
    lock). Only the loop thread changes what it reads and writes of the server."""
    info = cl.registry.servers.get(req["server"])
    if info is None or info.incarnation != req["incarnation"] or not info.alive:
        return None
    _heard(info, req, time.monotonic())
    return _lease(cl, term)


def _heard(info: ServerInfo, req: Heartbeat, now: float) -> None:
    """A heartbeat of ``info``'s server arrived at ``now``, saying which geo role's epoch it enforces
    (coordinator/map/geo_role.py)."""
    info.last_seen = now
    geo = req.get("geo")
    if type(geo) is int:
        info.geo_epoch = geo


def _lease(cl: Cluster, term: int) -> LeaseAnswer:
    """The lease of ``term``, with the map's version and the geo role the server is to enforce."""
    return {"lease_s": cl.cfg.lease_s, "version": cl.map.pmap.version, "term": term, "geo": cl.map.geo.lease()}


def _heartbeat(cl: Cluster, ctl: Controller, balancer: BalancerLoop, term: int, req: Heartbeat) -> LeaseAnswer:
    sid = req["server"]
    now = time.monotonic()
    maps, registry = cl.map, cl.registry
    with maps.lock:
        info = registry.servers.get(sid)
        known_repl = info.repl_endpoint if info is not None else None  # "": a takeover's placeholder
        fresh = info is None or info.incarnation != req["incarnation"] or not info.alive
        if info is None or fresh:
            info = ServerInfo(sid, req["endpoint"], req["incarnation"], now, int(req.get("pid", 0)))
            registry.register(info)  # persisted with this batch's registrations, before any answer leaves
        _heard(info, req, now)
        peers_moved = False
        if "repl_endpoint" in req:  # a replicated cluster: where its replicas reach it, and their progress
            peers_moved = known_repl is not None and known_repl != req["repl_endpoint"]
            info.repl_endpoint = req["repl_endpoint"]
            info.repl = req.get("repl") or {}
            info.zone = req.get("zone", "")
            adjust = replica_ops.actionable(cl, sid, info.repl)
        else:
            adjust = False
        ranges = req.get("ranges", [])
        same = ranges == info.ranges
        if not same:
            # An unchanged list is not kept: the one decoded now dies at once. Kept, 1,000 servers'
            # lists (100,000 small lists, each living one heartbeat interval) were always in the
            # collector's youngest generation, and every young collection walked them.
            info.ranges = ranges
        load = req.get("load", {})
        if load:  # only changed reports come (plus all every few seconds): keep the latest of each
            info.load.update(load)
        if len(info.load) > len(ranges):
            open_ids = {r[0] for r in ranges}
            info.load = {rid: ld for rid, ld in info.load.items() if rid in open_ids}
        info.pending = int(req.get("pending", 0))
        balancer.on_heartbeat(sid, load, now)
        pmap, settings = maps.pmap, maps.table_settings
        settings.refresh(pmap, registry.servers, now)
        extra = settings.lease_fields(sid, req.get("settings_v"), pmap)
        stamp = (pmap.primary_stamp(sid), pmap.primary_count(sid))
        if same and info.in_step == stamp:
            differs = False  # the same report as last time, and nothing of this server changed
        else:
            differs, exact = mismatch(cl, ctl, info)
            info.in_step = stamp if exact else None
    if fresh:
        ctl.submit(ops.assign_orphans, cl, ctl, key="orphans")
    if differs:
        ctl.submit(ops.reconcile, cl, ctl, sid, key=f"reconcile:{sid}")
    if adjust:
        ctl.submit(replica_ops.adjust_insync, cl, ctl, sid, key=f"insync:{sid}")
    if peers_moved:  # its primaries were configured without its endpoint (a takeover) or an old one
        ctl.submit(replica_ops.refresh_peers, cl, ctl, sid, key=f"peers:{sid}")
    answer = _lease(cl, term)
    answer.update(extra)  # type: ignore[typeddict-item]  # settings, settings_v, shares (see LeaseAnswer)
    return answer


def mismatch(cl: Cluster, ctl: Controller, info: ServerInfo) -> tuple[bool, bool]:
    """(the server's open ranges differ from the map, they are exactly the map's)."""
    pmap = cl.map.pmap
    reported = {(rid, epoch) for rid, epoch, state in info.ranges if state == "serving"}
    pending = {rid for rid, _, state in info.ranges if state not in ("serving", "following")}
    desired = {(r["id"], r["epoch"]) for r in pmap.primary_ranges(info.id) if r["state"] == "serving"}
    following = {(rid, epoch) for rid, epoch, state in info.ranges if state == "following"}
    to_follow = {(r["id"], r["epoch"]) for r in pmap.followed_by(info.id) if r["state"] == "serving"}
    busy = pmap.busy_ids()
    extra = {rid for rid, _ in (reported - desired) | (following - to_follow) if rid not in busy}
    if to_follow - following:
        return True, False
    stale_pending = {rid for rid in pending if rid in pmap.ranges or rid < f"r{pmap.next_id:06d}"}
    stale_pending -= busy
    differs = bool(desired - reported or extra or (stale_pending and not ctl.jobs.qsize()))
    return differs, not pending and reported == desired


def overdue(cl: Cluster, now: float) -> bool:
    """True when some live server has been silent past lease + grace."""
    return cl.registry.overdue(now, cl.cfg.lease_s + cl.cfg.lease_grace_s)


def check_servers(cl: Cluster, ctl: Controller, balancer: BalancerLoop) -> None:
    """Declare every server silent past lease + grace dead and have the controller record them and reassign
    their ranges (:func:`coordinator.control.operations.record_dead`). The loop takes the map's lock only briefly
    (:meth:`MapService.briefly`) and writes nothing to the meta store here: while a commit holds the lock (its
    write hung on a cut etcd leader) it asks again on its next tick and goes on answering heartbeats meanwhile
    (waiting here, every other server's lease lapsed: the netsplit drill's primary-and-etcd fault)."""
    with cl.map.briefly() as held:
        if not held:
            return
        now = time.monotonic()
        dead = cl.registry.declare_dead(now, cl.cfg.lease_s + cl.cfg.lease_grace_s)
    if not dead:
        return
    for s in dead:
        log.warning("partition server %s silent for %.1f s: declared dead", s.id, now - s.last_seen)
        balancer.on_server_dead(s.id)
    ctl.submit(ops.record_dead, cl, ctl, [{"server": s.id, "silent_s": round(now - s.last_seen, 2)} for s in dead])
