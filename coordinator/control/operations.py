"""Multi-step changes of the partition map, run by the controller thread one at a time.

Every operation commits its intent (a range state such as ``moving``, or an intent record) before
it acts and its result in one atomic commit (the *commit point*); :func:`recover` rolls an
uncommitted operation back after a coordinator restart. Partition-server commands are idempotent, so
re-running any step is harmless.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from typing import TYPE_CHECKING, Any

from coordinator.control import replica_ops
from coordinator.map.acl_keys import acl_key
from coordinator.map.partition_map import Writes, range_key
from coordinator.replicas.placement import place_orphans
from coordinator.replicas.sets import choose_replicas
from rangetable.errors import TableError
from rangetable.index_def import (
    MAX_INDEXES,
    IndexDef,
    check_def,
    find,
    holding_writes,
    index_table,
    is_index_table,
)
from rangetable.kernel.crash import crash_point, fault_armed
from rangetable.kernel.stats import StepClock
from rangetable.messages import is_replicated
from rangetable.table_settings import check_settings, describe

if TYPE_CHECKING:
    from coordinator.control.controller import Controller
    from coordinator.state.cluster import Cluster
    from rangetable.messages import RangeRecord, TableSettingsCommand

log = logging.getLogger("rangetable.coordinator")


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 2)


def _public(rec: dict) -> RangeRecord:
    """A map record as control commands carry it (without ``primary`` and ``state``)."""
    return {"id": rec["id"], "table": rec["table"], "low": rec["low"], "high": rec["high"], "epoch": rec["epoch"],
            "path": rec["path"]}


def create_table(cl: Cluster, ctl: Controller, name: str, settings: dict | None = None,
                 rid: str | None = None) -> dict:
    """Add a table (with its ``settings``: TTL, reserved throughput) with one range on the least-loaded
    live server and open it there. A retry of the request that created it (the same ``rid``: a
    frontend re-sends a request the coordinator took long to answer) answers as the first did,
    instead of TableAlreadyExists."""
    from rangetable.entity import validate_table_name

    validate_table_name(name)
    checked = check_settings(settings or {})
    with cl.map.lock:
        if cl.map.pmap.created_by(name, rid):
            return {"table": cl.map.pmap.table_name(name)}
        rec, (puts, deletes) = _new_table(cl, name, rid)
        more_puts, more_deletes = cl.map.table_settings.put(name, checked)
        cl.map.commit(({**puts, **more_puts}, deletes + more_deletes))
        rec = dict(cl.map.pmap.ranges[rec["id"]])
    _open_new(cl, ctl, rec)
    return {"table": name}


def _new_table(cl: Cluster, name: str, rid: str | None) -> tuple[dict, Writes]:
    """A new table's range, placed (replica set on the servers holding the fewest copies, in distinct zones;
    else the least-loaded server), added to the map (under the map lock); the writes to commit."""
    replicas: list[str] = []
    if cl.cfg.replicas > 1:
        live = cl.registry.live_servers()
        replicas = choose_replicas(cl.cfg.replicas, {s: cl.map.pmap.replica_count(s) for s in live},
                                   {s: cl.registry.servers[s].zone for s in live if cl.registry.servers[s].zone})
        primary = replicas[0] if replicas else None
    else:
        primary = cl.registry.pick_server()
    rec, writes = cl.map.pmap.create_table(name, primary, rid)
    if replicas:
        writes[0].update(cl.map.pmap.update(rec, replicas=replicas, insync=list(replicas))[0])
    return rec, writes


def _open_new(cl: Cluster, ctl: Controller, rec: dict) -> None:
    """Open a new table's range (committed) on its replicas, or its primary."""
    if rec.get("replicas"):
        replica_ops.open_replicas(cl, ctl, [rec], create=True)
    elif rec["primary"] is not None:
        _load(cl, ctl, rec["primary"], rec)


def _push_settings(cl: Cluster, ctl: Controller, table: str) -> None:
    """Have every live partition server apply the committed table settings (a server that misses them
    catches up from its next lease answer, within a heartbeat)."""
    with cl.map.lock:
        state = cl.map.table_settings
        msg: TableSettingsCommand = {"op": "table_settings", "settings": state.by_table, "settings_v": state.version}
        servers = cl.registry.live_servers()
    failed = [(s, r) for s, r in zip(servers, ctl.call_many([(s, msg) for s in servers]), strict=True)
              if isinstance(r, Exception)]
    for server, exc in failed:
        log.warning("table settings of %s not applied on %s yet: %s", table, server, exc)


def set_table(cl: Cluster, ctl: Controller, name: str, changes: dict) -> dict:
    """Change a table's settings (controller job): commit them, then have every live partition
    server apply them before answering, so a TTL change holds for reads when this returns. The change
    feed and its before-images stay on while the table has indexes (their applier reads them)."""
    with cl.map.lock:
        table = cl.map.pmap.user_table(name)
        state = cl.map.table_settings
        settings = check_settings(changes, state.of(table))
        defs = cl.map.pmap.indexes_of(table)
        if defs and (settings.get("feed_off") or not settings.get("feed_before")):
            raise TableError("InvalidInput", f"Table {table} has indexes ({', '.join(d['name'] for d in defs)}): its "
                                             "change feed and before-images stay on until they are dropped.")
        cl.map.commit(state.put(table, settings))
    _push_settings(cl, ctl, table)
    cl.events.record("table_settings", table=table, **describe(settings))
    return {"table": table, **describe(settings)}


def delete_table(cl: Cluster, ctl: Controller, name: str) -> None:
    """Drop a table from the catalog and destroy its range directories, with its indexes (their
    definitions and tables) in the same commit."""
    with cl.map.lock:
        if is_index_table(name):
            raise TableError("ResourceNotFound")
        pm = cl.map.pmap
        defs = pm.indexes_of(name)
        gone, writes = pm.delete_table(name)
        writes[1].append(acl_key(name))  # the table's stored access policies go with it
        writes[1].extend(cl.map.table_settings.put(name, {})[1])  # and its settings
        writes[1].extend(cl.map.cuts.forget(name))  # and, on a secondary cluster, its cut
        for d in defs:
            _merge(writes, _drop_index_writes(cl, gone, d))
        cl.map.commit(writes)
    for d in defs:
        cl.map.claims.forget(d["table"], d["name"])
    cl.map.source_claims.forget(name, "")
    _destroy(cl, ctl, gone)


def _merge(into: Writes, more: Writes) -> None:
    """Fold the writes of a later map change into ``into`` (its puts win: the later map version)."""
    into[0].update(more[0])
    into[1].extend(more[1])


def _drop_index_writes(cl: Cluster, gone: list[dict], d: dict) -> Writes:
    """Remove an index's table (its ranges appended to ``gone``), settings and definition (under the map lock)."""
    pm = cl.map.pmap
    entries = index_table(d["table"], d["name"])
    writes: Writes = ({}, [])
    if entries.lower() in pm.tables:
        ranges, writes = pm.delete_table(entries)
        gone.extend(ranges)
        writes[1].extend(cl.map.table_settings.put(entries, {})[1])
    _merge(writes, pm.drop_index(d["table"], d["name"]))
    return writes


def _destroy(cl: Cluster, ctl: Controller, gone: list[dict]) -> None:
    """Destroy the directories of removed ranges on every live server holding a copy."""
    for r in gone:
        for server in r.get("replicas") or [r["primary"]]:
            if server and cl.registry.is_alive(server):
                try:
                    ctl.call(server, {"op": "destroy", "range": _public(r)})
                except TableError as exc:
                    log.warning("destroy %s on %s: %s", r["id"], server, exc)


def create_index(cl: Cluster, ctl: Controller, table: str, name: Any, on: Any, include: Any = None,
                 rid: str | None = None) -> dict:
    """Declare index ``name`` of ``table`` (state ``building``), as one commit: its entries table
    (:func:`rangetable.index_def.index_table`, placed and replicated as a user table's, its own change feed
    off), the base table's feed and before-images on (the applier reads them), the definition. Then the
    entries table is opened and the base table's settings pushed. A retry of the same request (``rid``)
    answers as the first did."""
    checked = check_def(table, name, on, include)
    with cl.map.lock:
        pm = cl.map.pmap
        base = cl.map.pmap.user_table(table)
        entries = index_table(base, checked.name)
        defs = pm.indexes_of(base)
        if pm.created_by(entries, rid) and (done := find(defs, checked.name)) is not None:
            return {"index": done}
        if find(defs, checked.name) is not None:
            raise TableError("IndexAlreadyExists", f"Table {base} already has an index {checked.name}.")
        if len(defs) >= MAX_INDEXES:
            raise TableError("InvalidInput", f"Table {base} has {len(defs)} indexes: at most {MAX_INDEXES}.")
        d = IndexDef(base, checked.name, checked.on, checked.include).to_wire()
        state = cl.map.table_settings
        rec, writes = _new_table(cl, entries, rid)
        _merge(writes, state.put(entries, {"feed_off": 1}))
        _merge(writes, state.put(base, check_settings({"feed_off": 0, "feed_before": 1}, state.of(base))))
        _merge(writes, pm.put_index(d))
        cl.map.commit(writes)
        rec = dict(pm.ranges[rec["id"]])
    _open_new(cl, ctl, rec)
    _push_settings(cl, ctl, base)
    cl.events.record("create_index", table=base, index=d["name"], on=d["on"], include=d["include"], range=rec["id"])
    return {"index": d}


def drop_index(cl: Cluster, ctl: Controller, table: str, name: str) -> dict:
    """Drop an index: its definition and its entries table (IndexNotFound when there is none)."""
    gone: list[dict] = []
    with cl.map.lock:
        base = cl.map.pmap.user_table(table)
        d = find(cl.map.pmap.indexes_of(base), name)
        if d is None:
            raise TableError("IndexNotFound", f"Table {base} has no index {name}.")
        cl.map.commit(_drop_index_writes(cl, gone, d))
    cl.map.claims.forget(base, d["name"])
    _destroy(cl, ctl, gone)
    cl.events.record("drop_index", table=base, index=d["name"])
    return {}


def index_ready(cl: Cluster, ctl: Controller, table: str, name: str) -> dict:
    """An index's build caught up with its table (its applier says so): ``building`` → ``ready`` (idempotent)."""
    with cl.map.lock:
        base = cl.map.pmap.user_table(table)
        d = find(cl.map.pmap.indexes_of(base), name)
        if d is None:
            raise TableError("IndexNotFound", f"Table {base} has no index {name}.")
        if d["state"] == "ready":
            return {"index": d}
        d = {**d, "state": "ready"}
        cl.map.commit(cl.map.pmap.put_index(d))
    cl.events.record("index_ready", table=base, index=d["name"])
    return {"index": d}


def judge_lag(cl: Cluster, table: str, d: dict, lag_s: float | None) -> None:
    """Back-pressure, decided here only: put on ``d`` (a definition of ``table``'s, the map lock held) how far
    behind its table it is (:func:`rangetable.index_def.holding_writes` of ``lag_s``, from
    :meth:`coordinator.map.claims.Claims.lag_of`), committing the map when that crosses the bound; every
    frontend then holds (or lets go) the table's writes."""
    if lag_s is None:
        return
    behind = holding_writes(d["state"] == "ready", float(d.get("behind_s", 0.0)), lag_s)
    if behind != d.get("behind_s", 0.0):  # crossed the bound (or moved far past it): the map says so
        changed = {k: v for k, v in d.items() if k != "behind_s"}
        if behind:
            changed["behind_s"] = behind
        cl.map.commit(cl.map.pmap.put_index(changed))


def judge_lapsed_indexes(cl: Cluster, ctl: Controller, now: float | None = None) -> None:
    """Run every second by the leader: an index whose applier's lease ran out (no frontend applies it) falls
    behind by the clock, so its table's writes wait once that passes the bound, as when an applier reports it."""
    now = time.monotonic() if now is None else now
    with cl.map.lock:
        for table, name in cl.map.claims.lapsed(now):
            d = find(cl.map.pmap.indexes_of(table), name)
            if d is not None:
                judge_lag(cl, table, d, cl.map.claims.lag_of(table, name, now))


def index_check(cl: Cluster, ctl: Controller, table: str, name: str, repair: bool = False) -> dict:
    """Ask the index's applier for a check (``repair``: and to fix what differs): the request is put on the
    definition (``check``: ``{"id", "repair"}``), which the applier reads from the map it is published with;
    a check of the same kind already asked for is joined (one of the other kind refused). Answers ``{"id"}``: ``last_check`` carries it once
    done."""
    with cl.map.lock:
        base = cl.map.pmap.user_table(table)
        d = find(cl.map.pmap.indexes_of(base), name)
        if d is None:
            raise TableError("IndexNotFound", f"Table {base} has no index {name}.")
        pending = d.get("check")
        if pending is not None:
            if bool(pending["repair"]) != bool(repair):
                raise TableError("InvalidInput", f"A check of index {d['name']} of {base} is running "
                                                 f"({'with' if pending['repair'] else 'without'} repair): wait for it.")
            return {"id": pending["id"]}
        check = {"id": uuid.uuid4().hex[:12], "repair": bool(repair)}
        cl.map.commit(cl.map.pmap.put_index({**d, "check": check}))
    cl.events.record("index_check", table=base, index=d["name"], id=check["id"], repair=check["repair"])
    return {"id": check["id"]}


def index_checked(cl: Cluster, ctl: Controller, table: str, name: str, check_id: str, rep: dict) -> dict:
    """The applier's report of check ``check_id``: kept as the definition's ``last_check``, the request
    cleared (a report of a check no longer asked for is dropped)."""
    with cl.map.lock:
        base = cl.map.pmap.user_table(table)
        d = find(cl.map.pmap.indexes_of(base), name)
        if d is None:
            raise TableError("IndexNotFound", f"Table {base} has no index {name}.")
        if (d.get("check") or {}).get("id") != check_id:
            return {"stored": False}
        d = {k: v for k, v in d.items() if k != "check"}
        d["last_check"] = {**rep, "id": check_id}
        cl.map.commit(cl.map.pmap.put_index(d))
    cl.events.record("index_checked", table=base, index=d["name"], id=check_id,
                     differences=rep.get("differences"), remaining=rep.get("remaining"))
    return {"stored": True}


def _load(cl: Cluster, ctl: Controller, server: str, rec: dict) -> bool:
    try:
        ctl.call(server, {"op": "load", "range": replica_ops.command(cl, rec), "version": cl.map.pmap.version,
                          **cl.map.table_settings.message()})
        return True
    except TableError as exc:
        log.warning("load %s on %s failed: %s", rec["id"], server, exc)
        return False


def record_dead(cl: Cluster, ctl: Controller, dead: list[dict[str, Any]]) -> None:
    """The servers the loop has just declared dead (``{"server", "silent_s"}`` each): one durable write for their
    events and one map version naming them (a delta to the frontends), however many died at once; then their
    ranges are reassigned (:func:`assign_orphans`), also when those writes fail (etcd without a majority)."""
    try:
        cl.events.record_many([{"kind": "server_dead", **d} for d in dead])
        with cl.map.lock:
            cl.map.changes.servers.update(d["server"] for d in dead)
            cl.map.commit_version({})
    finally:
        ctl.submit(assign_orphans, cl, ctl, key="orphans")


def assign_orphans(cl: Cluster, ctl: Controller, reason: str = "primary not alive") -> list[str]:
    """Give every serving range without a live primary to a live server, all in one map change.

    The new primaries are chosen by :func:`coordinator.replicas.placement.place_orphans` (least-loaded first),
    committed in one meta-store write (one map version, one delta to the frontends), then every
    target is told to load its ranges at once (``Controller.call_many``), so a dead server's 100
    ranges fail over in about one round trip instead of 100. Returns the ids reassigned.
    """
    t0 = time.monotonic()
    with cl.map.lock:
        live = cl.registry.live_servers()
        orphans = sorted(rid for primary in cl.map.pmap.primaries() if not cl.registry.is_alive(primary)
                         for rid in cl.map.pmap.primary_ids(primary) if cl.map.pmap.ranges[rid]["state"] == "serving"
                         and not is_replicated(cl.map.pmap.ranges[rid]))
        replicated = cl.cfg.replicas > 1
        if not orphans or not live:
            return replica_ops.fail_over(cl, ctl, reason) if replicated else []
        plan = place_orphans(orphans, {sid: cl.map.pmap.primary_count(sid) for sid in live})
        sources = {rid: cl.map.pmap.ranges[rid]["primary"] for rid in orphans}
        puts: dict[bytes, Any] = {}
        for rid, target in plan.items():
            puts.update(cl.map.pmap.update(cl.map.pmap.ranges[rid], primary=target)[0])
        cl.map.commit((puts, []))
        recs = {rid: dict(cl.map.pmap.ranges[rid]) for rid in orphans}
        version = cl.map.pmap.version
    results = ctl.call_many([(plan[rid], {"op": "load", "range": _public(recs[rid]), "version": version,
                                          **cl.map.table_settings.message()})
                             for rid in orphans])
    ms = _ms(t0)
    for rid, res in zip(orphans, results, strict=True):
        if isinstance(res, TableError):
            log.warning("load %s on %s failed: %s", rid, plan[rid], res)
    cl.events.record_many([{"kind": "failover", "range": rid, "table": recs[rid]["table"], "source": sources[rid],
                       "target": plan[rid], "reason": reason, "duration_ms": ms,
                       "ok": not isinstance(res, TableError)} for rid, res in zip(orphans, results, strict=True)])
    return orphans + (replica_ops.fail_over(cl, ctl, reason) if replicated else [])


def reconcile(cl: Cluster, ctl: Controller, server: str) -> None:
    """Make a server's open ranges match the map: load what it should serve, unload the rest."""
    with cl.map.lock:
        info = cl.registry.servers.get(server)
        if info is None or not info.alive:
            return
        reported = {rid: (epoch, state) for rid, epoch, state in info.ranges}
        desired = {r["id"]: dict(r) for r in cl.map.pmap.primary_ranges(server) if r["state"] == "serving"}
        followed = {r["id"]: dict(r) for r in cl.map.pmap.followed_by(server) if r["state"] == "serving"}
        known = set(cl.map.pmap.ranges)
        busy = set(cl.map.pmap.busy_ids())
    restarted = []  # replicated ranges whose primary lost them (it restarted): a new primary is chosen
    ahead = sorted(rid for rid, rec in {**followed, **desired}.items()
                   if is_replicated(rec) and replica_ahead(rec, reported.get(rid)))
    for rid, rec in desired.items():
        if reported.get(rid) == (rec["epoch"], "serving") or rid in ahead:
            continue
        if is_replicated(rec) and rid not in reported:
            restarted.append(rid)
        else:
            _load(cl, ctl, server, rec)
    stale = [rec for rid, rec in followed.items()
             if reported.get(rid) != (rec["epoch"], "following") and rid not in ahead]
    if ahead:  # the map lost a configuration the replicas adopted: a new one past it, never the stale one
        log.warning("ranges %s on %s are at a later epoch than the map: promoting past it", ahead, server)
        replica_ops.promote(cl, ctl, ahead, reason=f"{server} is at a later epoch than the map")
    if stale:
        replica_ops.open_replicas(cl, ctl, stale, only={server})
    if restarted:
        replica_ops.promote(cl, ctl, restarted, reason=f"{server} restarted")
    for rid, (epoch, _state) in reported.items():
        if rid in desired or rid in followed or rid in busy:
            continue
        try:
            if rid in known and is_replicated(cl.map.pmap.ranges[rid]):  # no longer a replica here: its copy is stale
                ctl.call(server, {"op": "destroy", "range": {"id": rid, "path": f"ranges/{rid}"}})
            elif rid in known:
                ctl.call(server, {"op": "unload", "range": rid, "epoch": epoch})
            else:  # the half of a split or merge that never committed: garbage
                ctl.call(server, {"op": "destroy", "range": {"id": rid, "path": f"ranges/{rid}"}})
        except TableError as exc:
            log.warning("reconcile %s on %s: %s", rid, server, exc)


def replica_ahead(rec: dict, reported: tuple[int, str] | None) -> bool:
    """True when a server reports a replicated range at a later epoch than its map record: the map lost a
    change (a takeover from a store without the last write). Loading the record there would be refused
    (or, by a server that did not check, make a second primary); only a new configuration past the
    adopted epoch (a promotion) repairs it."""
    return reported is not None and int(reported[0]) > int(rec["epoch"])


def _prepare(ctl: Controller, server: str | None, rid: str, epoch: int) -> None:
    """Ask the primary to flush a range while it still serves (shortens the offline window)."""
    if server is None:
        return
    try:
        ctl.call(server, {"op": "prepare", "range": rid, "epoch": epoch})
    except TableError as exc:
        log.info("prepare %s on %s: %s", rid, server, exc)


def move(cl: Cluster, ctl: Controller, rid: str, target: str, reason: str = "manual") -> dict:
    """Move a range: source closes it, the map records the new primary, the target opens it."""
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        if not cl.registry.is_alive(target):
            raise TableError("InvalidInput", f"server {target} is not alive")
        if rec["primary"] == target:
            return {"range": rid, "offline_ms": 0.0}
        source = rec["primary"]
    if is_replicated(rec):  # a primary moves to one of its in-sync replicas: a leadership transfer
        return replica_ops.transfer(cl, ctl, rid, target, reason)
    _prepare(ctl, source, rid, rec["epoch"])
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None or rec["primary"] != source or rec["state"] != "serving":
            raise TableError("ServerBusy", f"range {rid} changed while preparing its move")
        cl.map.commit(cl.map.pmap.update(rec, state="moving"))
        epoch = rec["epoch"]
        crash_point("move.after_intent", cl.cfg.data_dir)
    t0 = time.monotonic()
    if source and cl.registry.is_alive(source):
        try:
            ctl.call(source, {"op": "unload", "range": rid, "epoch": epoch, "version": cl.map.pmap.version})
        except TableError as exc:
            with cl.map.lock:
                cl.map.commit(cl.map.pmap.update(cl.map.pmap.ranges[rid], state="serving"))
            raise TableError("ServerBusy", f"source {source} did not release {rid}: {exc}") from None
    crash_point("move.after_unload", cl.cfg.data_dir)
    with cl.map.lock:  # the commit point
        cl.map.commit(cl.map.pmap.update(cl.map.pmap.ranges[rid], primary=target, state="serving"))
        rec = dict(cl.map.pmap.ranges[rid])
        crash_point("move.after_commit", cl.cfg.data_dir)
    ok = _load(cl, ctl, target, rec)
    offline = _ms(t0)
    cl.events.record("move", range=rid, table=rec["table"], source=source, target=target, reason=reason,
             offline_ms=offline, duration_ms=offline, ok=ok)
    if not ok:
        raise TableError("ServerBusy", f"target {target} could not open {rid}; it will be retried")
    return {"range": rid, "source": source, "target": target, "offline_ms": offline}


def split(cl: Cluster, ctl: Controller, rid: str, key: str | None, reason: str = "manual") -> dict:
    """Split a range at a PartitionKey (or at the data median) into two ranges on the same server."""
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        primary = rec["primary"]
        if rec["state"] != "serving" or not cl.registry.is_alive(primary):
            raise TableError("ServerBusy", f"range {rid} is not serving")
        if rec.get("move"):  # its replica set is changing (coordinator/control/replica_move.py)
            raise TableError("ServerBusy", f"range {rid} is moving a replica to {rec['move']['target']}")
    if key is None:
        key = ctl.call(primary, {"op": "split_key", "range": rid, "epoch": rec["epoch"]})
        if key is None:
            raise TableError("InvalidInput", f"range {rid} holds fewer than two PartitionKeys")
    if not (rec["low"] < key and (rec["high"] is None or key < rec["high"])):
        raise TableError("InvalidInput", f"split key {key!r} is not strictly inside {rid}")
    _prepare(ctl, primary, rid, rec["epoch"])
    with cl.map.lock:
        if cl.map.pmap.ranges.get(rid) is not rec or rec["state"] != "serving":
            raise TableError("ServerBusy", f"range {rid} changed while preparing its split")
        left = cl.map.pmap.new_range(rec["table"], rec["low"], key, primary, rec["epoch"] + 1)
        right = cl.map.pmap.new_range(rec["table"], key, rec["high"], primary, rec["epoch"] + 1)
        puts, dels = cl.map.pmap.update(rec, state="splitting")
        cl.map.commit((puts, dels))
        epoch = rec["epoch"]
        crash_point("split.after_intent", cl.cfg.data_dir)
    while fault_armed("split.hold", cl.cfg.data_dir):  # a test holds the split here, past its intent
        time.sleep(0.05)
    steps: dict[str, float] = {}
    clock = StepClock(steps)
    try:
        # The primary prepares the halves while the range still serves (frontends route a splitting
        # range to its primary) and answers after a short switch-over: the range is offline from that
        # switch-over (its "offline_ms") until both halves are loaded below.
        done = ctl.call(primary, {"op": "split", "range": rid, "epoch": epoch, "key": key,
                                "left": _public(left), "right": _public(right), "version": cl.map.pmap.version})
        clock.step("split")
        t0 = time.monotonic()
    except TableError as exc:
        with cl.map.lock:
            cl.map.commit(cl.map.pmap.update(cl.map.pmap.ranges[rid], state="serving"))
        ctl.submit(reconcile, cl, ctl, primary, key=f"reconcile:{primary}")
        if exc.error_code == "NotPrimary":  # the map's primary does not serve this epoch yet (a load failed or
            # is late after a leadership transfer; the reconcile above opens it): the split may be asked again
            raise TableError("ServerBusy", f"range {rid} is not open on its primary {primary} at epoch {epoch} "
                             f"yet ({exc.message}): retry the split") from None
        raise
    crash_point("split.after_split", cl.cfg.data_dir)
    if is_replicated(rec):  # the followers split their copies at the parent's last batch, then all commit
        replica_ops.split_followers(cl, ctl, rec, key, left, right, int(done["seq"]), done.get("counts"))
        clock.step("followers")
    with cl.map.lock:  # the commit point
        old = cl.map.pmap.ranges[rid]
        cl.map.commit(cl.map.pmap.replace([old], [left, right]))
        crash_point("split.after_commit", cl.cfg.data_dir)
    clock.step("commit")
    if is_replicated(rec):
        replica_ops.open_replicas(cl, ctl, [left, right])
    else:
        for r in (left, right):
            _load(cl, ctl, primary, r)
    clock.step("load")
    offline = round(float(done["offline_ms"]) + _ms(t0), 2)
    for server in rec.get("replicas") or [primary]:
        try:
            ctl.call(server, {"op": "destroy", "range": _public(rec)})
        except TableError as exc:
            log.warning("destroy %s on %s after split: %s", rid, server, exc)
    cl.events.record("split", range=rid, table=rec["table"], key=key, left=left["id"], right=right["id"],
             server=primary, reason=reason, offline_ms=offline, duration_ms=round(sum(steps.values()), 2),
             steps=steps, primary_steps=done["steps"])
    return {"range": rid, "key": key, "left": left["id"], "right": right["id"], "offline_ms": offline,
            "steps": steps}


def merge(cl: Cluster, ctl: Controller, rid: str, reason: str = "manual", target: str | None = None) -> dict:
    """Merge a range with its right-hand neighbour on ``target`` (default: the left range's primary),
    moving either range there first if needed."""
    with cl.map.lock:
        rec = cl.map.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        rs = cl.map.pmap.ranges_of(rec["table"])
        i = [r["id"] for r in rs].index(rid)
        if i + 1 >= len(rs):
            raise TableError("InvalidInput", f"range {rid} is the last of its table; merge its left neighbour")
        right = rs[i + 1]
        if rec.get("move") or right.get("move"):  # a replica set is changing (coordinator/control/replica_move.py)
            raise TableError("ServerBusy", f"range {rid} or {right['id']} is moving a replica")
        if is_replicated(rec) and set(rec["replicas"]) != set(right["replicas"]):
            raise TableError("InvalidInput", f"ranges {rid} and {right['id']} are replicated on different servers "
                             f"({', '.join(rec['replicas'])} / {', '.join(right['replicas'])}): they cannot merge")
    target = target or rec["primary"]
    for r in (rec, right):
        if r["primary"] != target:
            move(cl, ctl, r["id"], target, reason=f"merge of {rid} and {right['id']}")
    with cl.map.lock:
        left, right = dict(cl.map.pmap.ranges[rid]), dict(cl.map.pmap.ranges[right["id"]])
        primary = left["primary"]
        if left["state"] != "serving" or right["state"] != "serving" or not cl.registry.is_alive(primary):
            raise TableError("ServerBusy", "ranges are not serving")
        out = cl.map.pmap.new_range(left["table"], left["low"], right["high"], primary,
                                max(left["epoch"], right["epoch"]) + 1)
        p1, _ = cl.map.pmap.update(cl.map.pmap.ranges[left["id"]], state="merging")
        p2, _ = cl.map.pmap.update(cl.map.pmap.ranges[right["id"]], state="merging")
        cl.map.commit(({**p1, **p2}, []))
        crash_point("merge.after_intent", cl.cfg.data_dir)
    t0 = time.monotonic()
    try:
        if is_replicated(left):  # every replica merges its copies, at the two ranges' last batches
            replica_ops.merge_replicas(cl, ctl, left, right, out)
        else:
            ctl.call(primary, {"op": "merge", "left": _public(left), "right": _public(right), "out": _public(out),
                             "version": cl.map.pmap.version})
    except TableError:
        with cl.map.lock:
            for r in (left, right):
                cl.map.pmap.ranges[r["id"]]["state"] = "serving"
            cl.map.pmap.reindex()
            cl.map.commit(({range_key(r["id"]): cl.map.pmap.ranges[r["id"]] for r in (left, right)}, []))
        if is_replicated(left):  # they were sealed at the next epoch: configure them past it
            replica_ops.promote(cl, ctl, [left["id"], right["id"]], reason="merge failed")
        ctl.submit(reconcile, cl, ctl, primary, key=f"reconcile:{primary}")
        raise
    crash_point("merge.after_merge", cl.cfg.data_dir)
    with cl.map.lock:  # the commit point
        cl.map.commit(cl.map.pmap.replace([cl.map.pmap.ranges[left["id"]], cl.map.pmap.ranges[right["id"]]], [out]))
        crash_point("merge.after_commit", cl.cfg.data_dir)
    if is_replicated(out):
        replica_ops.open_replicas(cl, ctl, [out])
    else:
        _load(cl, ctl, primary, out)
    offline = _ms(t0)
    for r in (left, right):
        for server in r.get("replicas") or [primary]:
            try:
                ctl.call(server, {"op": "destroy", "range": _public(r)})
            except TableError as exc:
                log.warning("destroy %s on %s after merge: %s", r["id"], server, exc)
    cl.events.record("merge", range=out["id"], table=out["table"], left=left["id"], right=right["id"], server=primary,
             reason=reason, offline_ms=offline, duration_ms=offline)
    return {"range": out["id"], "left": left["id"], "right": right["id"], "offline_ms": offline}


def collect_garbage(cl: Cluster, ctl: Controller) -> list[str]:
    """Delete range directories that no range in the map and no live server refers to.

    They are left behind by splits and merges that crashed before or after their commit point. The
    controller runs jobs one at a time, so no operation that allocated a directory is in flight.
    Only on the single-host layout, where the coordinator's data root is the partition servers'
    (``ranges/`` under it); with ``--meta etcd://`` (multi-host) the coordinator never touches a
    partition server's files (docs/multi-host.md).
    """
    if cl.cfg.meta:
        return []
    root = os.path.join(cl.cfg.data_dir, "ranges")
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    if not names:
        return []
    with cl.map.lock:  # references only: the sets are built outside the lock the heartbeats need
        used = set(cl.map.pmap.ranges)
        reported = [info.ranges for info in cl.registry.servers.values()]
    for ranges in reported:  # a heartbeat replaces a server's list, never changes it in place
        used.update(r[0] for r in ranges)
    removed = []
    for name in names:
        if name not in used:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(name)
    if removed:
        log.info("removed unused range directories %s", removed)
    return removed


def recover(cl: Cluster) -> list[str]:
    """After a restart: roll back operations that never reached their commit point.

    A range still ``moving``, ``splitting`` or ``merging`` was not committed (the commit point
    sets it back to ``serving`` or replaces it), so it returns to ``serving`` under its recorded
    primary; reconciliation then reloads it there and discards any uncommitted halves.
    """
    fixed: list[str] = []
    with cl.map.lock:
        puts: dict[bytes, Any] = {}
        for r in cl.map.pmap.ranges.values():
            if r["state"] != "serving":
                r["state"] = "serving"
                if is_replicated(r):  # its replicas may be sealed at the next epoch: a configuration past it
                    r["epoch"] += 2
                puts[range_key(r["id"])] = r
                fixed.append(r["id"])
        if puts:
            cl.map.pmap.reindex()
            cl.map.pmap.version += 1
            puts[b"meta/version"] = cl.map.pmap.version
            cl.map.commit((puts, []))
    return fixed
