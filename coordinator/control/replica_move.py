"""Replica moves: balancing data by moving one replica of a range from server A to server B.

The move is a reconfiguration in the way of Vertical Paxos II (and of Kafka's partition reassignment, which
adds the new replicas, waits for them to join the ISR, then drops the old ones): every step is a new
configuration committed to the meta store before any replica hears of it.

1. :func:`start` (a controller job): if A is the primary, its leadership goes first to another in-sync
   replica (:func:`coordinator.control.replica_ops.transfer`); then B joins ``replicas`` (not ``insync``) with the
   intent ``move = {source, target, deadline}`` in the range's record, and rebuilds its copy from the
   primary's checkpoint exactly like a re-replicated replica (``"rebuild": true``).
2. The primary reports B caught up; :func:`coordinator.control.replica_ops.adjust_insync` adds it to the in-sync set.
3. :func:`advance` (a controller job the coordinator loop queues every second while a move is pending) asks
   :func:`coordinator.replicas.sets.move_step` what to do: once B is in sync, A leaves the configuration
   (committed first; the primary stops waiting for A's acknowledgements) and deletes its copy; if B died or
   did not catch up before the deadline, B leaves instead and A stays. The in-sync set never drops below
   ``--min-insync``: B joined it before A leaves it.

The intent lives in the range's record, so a coordinator that takes over carries a pending move on. The
wait is not a job of its own: the controller runs one job at a time and ``adjust_insync`` must run meanwhile.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from coordinator.control import replica_ops
from coordinator.replicas.sets import abandoned, check_move, finished, move_step, new_leader
from rangetable.errors import TableError

if TYPE_CHECKING:
    from coordinator.control.controller import Controller
    from coordinator.state.cluster import Cluster
    from rangetable.messages import ControlCommand

log = logging.getLogger("rangetable.coordinator")
DEFAULT_TIMEOUT_S = 60.0  # how long the new replica may take to catch up before the move is abandoned


def _live(cl: Cluster) -> set[str]:
    """Live servers with a replication endpoint (those that can hold a replica)."""
    return {sid for sid, info in cl.registry.servers.items() if info.alive and info.repl_endpoint}


def _primaries(cl: Cluster) -> dict[str, int]:
    return {sid: cl.map.pmap.primary_count(sid) for sid in cl.registry.servers}


def _hand_over(cl: Cluster, ctl: Controller, rid: str, leaving: str, reason: str) -> None:
    """Transfer the primary of ``rid`` away from ``leaving`` (raises ServerBusy when no in-sync replica can
    take it, or the transfer did not happen)."""
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        target = new_leader(rec, leaving, _live(cl), _primaries(cl))
    if target is None:
        raise TableError("ServerBusy", f"no other live in-sync replica of {rid} can take over as primary from {leaving}")
    replica_ops.transfer(cl, ctl, rid, target, reason=f"{reason}: {leaving} gives up its replica")


def start(cl: Cluster, ctl: Controller, rid: str, source: str, target: str,
          timeout_s: float | None = None, reason: str = "manual") -> dict:
    """Begin moving range ``rid``'s replica from ``source`` to ``target`` (the ``replica_move`` admin op and the
    balancer): checks, a leadership transfer if ``source`` leads, then ``target`` joins the replica set and
    rebuilds its copy. Returns at once; :func:`advance` finishes or abandons the move."""
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if timeout <= 0:
        raise TableError("InvalidInput", f"the catch-up timeout must be > 0 s, got {timeout}")
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        if source not in cl.registry.servers:
            raise TableError("ResourceNotFound", f"no partition server {source}")
        if target not in cl.registry.servers:
            raise TableError("ResourceNotFound", f"no partition server {target}")
        zones = {sid: info.zone for sid, info in cl.registry.servers.items() if info.zone}
        check_move(rec, source, target, _live(cl), zones)
        leads = rec["primary"] == source
    if leads:
        _hand_over(cl, ctl, rid, source, reason)
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"range {rid} is gone (split, merged or deleted meanwhile)")
        check_move(rec, source, target, _live(cl), zones)  # the map may have changed meanwhile
        if rec["primary"] == source:
            raise TableError("ServerBusy", f"{source} still leads {rid}: its replica stays")
        now = time.time()  # wall clock: the deadline outlives this coordinator (a takeover carries it on)
        intent = {"source": source, "target": target, "started": now, "deadline": now + timeout, "reason": reason}
        cl.map.commit(cl.map.pmap.update(rec, replicas=[*rec["replicas"], target], move=intent))
        rec = dict(cl.map.pmap.ranges[rid])
        cmd = replica_ops.command(cl, rec)
        cmd["rebuild"] = True
        load: ControlCommand = {"op": "load", "range": cmd, "version": cl.map.pmap.version, **cl.map.table_settings.message()}
    replica_ops.open_replicas(cl, ctl, [rec], only={rec["primary"]})  # the primary learns its new peer first
    try:
        ctl.call(target, load)
    except TableError as exc:
        log.warning("replica move of %s: the rebuild on %s failed to start: %s", rid, target, exc)
        _conclude(cl, ctl, rid, "abandon")
        raise TableError("ServerBusy", f"{target} could not start rebuilding {rid}: {exc}") from None
    cl.events.record("replica_move", range=rid, table=rec["table"], source=source, target=target, phase="adding",
             reason=reason, replicas=rec["replicas"], transfer=leads)
    return {"range": rid, "source": source, "target": target, "state": "catching up", "timeout_s": timeout,
            "transfer": leads}


def advance(cl: Cluster, ctl: Controller) -> list[str]:
    """Carry every pending replica move one step on (:func:`~coordinator.replicas.sets.move_step`); returns the
    ranges whose move ended (finished, abandoned or moot)."""
    now = time.time()
    with cl.map.lock:
        alive = _live(cl)
        pending = [dict(r) for rid in cl.map.pmap.moving_ids() if (r := cl.map.pmap.ranges[rid])["state"] == "serving"]
    ended = []
    for rec in pending:
        step = move_step(rec, alive, now, cl.cfg.min_insync)
        if step == "wait":
            continue
        if step == "finish" and rec["primary"] == rec["move"]["source"]:  # it became primary again (a failover)
            try:
                _hand_over(cl, ctl, rec["id"], rec["move"]["source"], rec["move"].get("reason", "replica move"))
            except TableError as exc:
                log.info("replica move of %s waits: %s", rec["id"], exc)
                continue
        if _conclude(cl, ctl, rec["id"], step):
            ended.append(rec["id"])
    return ended


def _conclude(cl: Cluster, ctl: Controller, rid: str, step: str) -> bool:
    """Commit the end of a move (``finish``: the source leaves; ``abandon``: the target leaves; ``done``: only the
    intent goes), configure the replicas that stay, and have the one that left delete its copy."""
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None or not rec.get("move") or rec["state"] != "serving":
            return False
        m = rec["move"]
        change = finished(rec) if step == "finish" else abandoned(rec) if step == "abandon" else {"move": None}
        gone = m["source"] if step == "finish" else m["target"] if step == "abandon" else None
        if gone is not None and gone not in rec["replicas"]:  # dropped meanwhile (a failover, a rebuild)
            change, gone = {"move": None}, None
        if gone is not None and gone == rec["primary"]:
            return False  # never drop the primary: advance hands it over first
        cl.map.commit(cl.map.pmap.update(rec, **change))
        out = dict(cl.map.pmap.ranges[rid])
    replica_ops.open_replicas(cl, ctl, [out], dropped={rid: [gone]} if gone else None)
    if gone is not None and cl.registry.is_alive(gone):
        try:
            ctl.call(gone, {"op": "destroy", "range": {"id": rid, "path": f"ranges/{rid}"}})
        except TableError as exc:
            log.info("replica move: deleting the copy of %s on %s: %s", rid, gone, exc)
    result = {"finish": "moved", "abandon": "abandoned", "done": "ended"}[step]
    cl.events.record_many([{"kind": "replica_move", "range": rid, "table": out["table"], "source": m["source"],
                       "target": m["target"], "phase": result, "reason": m.get("reason", ""),
                       "duration_s": round(time.time() - m.get("started", time.time()), 2),
                       "replicas": out["replicas"], "insync": out["insync"]}])
    log.info("replica move of %s %s -> %s: %s", rid, m["source"], m["target"], result)
    return True
