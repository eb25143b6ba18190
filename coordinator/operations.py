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
from typing import TYPE_CHECKING, Any

from coordinator import replica_ops
from coordinator.acl import acl_key
from coordinator.map.partition_map import range_key
from coordinator.replicas.placement import place_orphans
from coordinator.replicas.sets import choose_replicas, is_replicated
from rangetable.errors import TableError
from rangetable.kernel.crash import crash_point, fault_armed
from rangetable.kernel.stats import StepClock
from rangetable.table_settings import check_settings, describe

if TYPE_CHECKING:
    from coordinator.interfaces import Commands, MapWriter
    from rangetable.messages import RangeRecord, TableSettingsCommand

log = logging.getLogger("rangetable.coordinator")


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 2)


def _public(rec: dict) -> RangeRecord:
    """A map record as control commands carry it (without ``owner`` and ``state``)."""
    return {"id": rec["id"], "table": rec["table"], "low": rec["low"], "high": rec["high"], "epoch": rec["epoch"],
            "path": rec["path"]}


def create_table(co: MapWriter, ctl: Commands, name: str, settings: dict | None = None,
                 rid: str | None = None) -> dict:
    """Add a table (with its ``settings``: TTL, reserved throughput) with one range on the least-loaded
    live server and open it there. A retry of the request that created it (the same ``rid``: a
    frontend re-sends a request the coordinator took long to answer) answers as the first did,
    instead of TableAlreadyExists."""
    from rangetable.entity import validate_table_name

    validate_table_name(name)
    checked = check_settings(settings or {})
    with co.lock:
        if co.pmap.created_by(name, rid):
            return {"table": co.pmap.table_name(name)}
        replicas: list[str] = []
        if co.cfg.replicas > 1:  # a replica set on the servers holding the fewest copies, in distinct zones
            live = co.live_servers()
            replicas = choose_replicas(co.cfg.replicas, {s: co.pmap.replica_count(s) for s in live},
                                       {s: co.servers[s].zone for s in live if co.servers[s].zone})
            owner = replicas[0] if replicas else None
        else:
            owner = co.pick_server()
        rec, writes = co.pmap.create_table(name, owner, rid)
        if replicas:
            writes[0].update(co.pmap.update(rec, replicas=replicas, insync=list(replicas))[0])
        puts, deletes = co.table_settings.put(name, checked)
        co.commit(({**writes[0], **puts}, writes[1] + deletes))
        rec = dict(co.pmap.ranges[rec["id"]])
    if replicas:
        replica_ops.open_replicas(co, ctl, [rec], create=True)
    elif owner is not None:
        _load(co, ctl, owner, rec)
    return {"table": name}


def set_table(co: MapWriter, ctl: Commands, name: str, changes: dict) -> dict:
    """Change a table's settings (controller job): commit them, then have every live partition
    server apply them before answering, so a TTL change holds for reads when this returns."""
    with co.lock:
        table = co.pmap.table_name(name)  # TableNotFound
        state = co.table_settings
        settings = check_settings(changes, state.of(table))
        co.commit(state.put(table, settings))
        msg: TableSettingsCommand = {"op": "table_settings", "settings": state.by_table, "settings_v": state.version}
        servers = co.live_servers()
    failed = [(s, r) for s, r in zip(servers, ctl.call_many([(s, msg) for s in servers]), strict=True)
              if isinstance(r, Exception)]
    for server, exc in failed:  # such a server catches up from its next lease answer (within a heartbeat)
        log.warning("table settings of %s not applied on %s yet: %s", table, server, exc)
    co.event("table_settings", table=table, **describe(settings))
    return {"table": table, **describe(settings)}


def delete_table(co: MapWriter, ctl: Commands, name: str) -> None:
    """Drop a table from the catalog and destroy its range directories."""
    with co.lock:
        gone, writes = co.pmap.delete_table(name)
        writes[1].append(acl_key(name))  # the table's stored access policies go with it
        writes[1].extend(co.table_settings.put(name, {})[1])  # and its settings
        co.commit(writes)
    for r in gone:
        for server in r.get("replicas") or [r["owner"]]:
            if server and co.is_alive(server):
                try:
                    ctl.call(server, {"op": "destroy", "range": _public(r)})
                except TableError as exc:
                    log.warning("destroy %s on %s: %s", r["id"], server, exc)


def _load(co: MapWriter, ctl: Commands, server: str, rec: dict) -> bool:
    try:
        ctl.call(server, {"op": "load", "range": replica_ops.command(co, rec), "version": co.pmap.version,
                          **co.table_settings.message()})
        return True
    except TableError as exc:
        log.warning("load %s on %s failed: %s", rec["id"], server, exc)
        return False


def assign_orphans(co: MapWriter, ctl: Commands, reason: str = "owner not alive") -> list[str]:
    """Give every serving range without a live owner to a live server, all in one map change.

    The new owners are chosen by :func:`coordinator.replicas.placement.place_orphans` (least-loaded first),
    committed in one meta-store write (one map version, one delta to the frontends), then every
    target is told to load its ranges at once (``Controller.call_many``), so a dead server's 100
    ranges fail over in about one round trip instead of 100. Returns the ids reassigned.
    """
    t0 = time.monotonic()
    with co.lock:
        live = co.live_servers()
        orphans = sorted(rid for owner in co.pmap.owners() if not co.is_alive(owner)
                         for rid in co.pmap.owned_ids(owner) if co.pmap.ranges[rid]["state"] == "serving"
                         and not is_replicated(co.pmap.ranges[rid]))
        replicated = co.cfg.replicas > 1
        if not orphans or not live:
            return replica_ops.fail_over(co, ctl, reason) if replicated else []
        plan = place_orphans(orphans, {sid: co.pmap.owned_count(sid) for sid in live})
        sources = {rid: co.pmap.ranges[rid]["owner"] for rid in orphans}
        puts: dict[bytes, Any] = {}
        for rid, target in plan.items():
            puts.update(co.pmap.update(co.pmap.ranges[rid], owner=target)[0])
        co.commit((puts, []))
        recs = {rid: dict(co.pmap.ranges[rid]) for rid in orphans}
        version = co.pmap.version
    results = ctl.call_many([(plan[rid], {"op": "load", "range": _public(recs[rid]), "version": version,
                                          **co.table_settings.message()})
                             for rid in orphans])
    ms = _ms(t0)
    for rid, res in zip(orphans, results, strict=True):
        if isinstance(res, TableError):
            log.warning("load %s on %s failed: %s", rid, plan[rid], res)
    co.record_events([{"kind": "failover", "range": rid, "table": recs[rid]["table"], "source": sources[rid],
                       "target": plan[rid], "reason": reason, "duration_ms": ms,
                       "ok": not isinstance(res, TableError)} for rid, res in zip(orphans, results, strict=True)])
    return orphans + (replica_ops.fail_over(co, ctl, reason) if replicated else [])


def reconcile(co: MapWriter, ctl: Commands, server: str) -> None:
    """Make a server's open ranges match the map: load what it should serve, unload the rest."""
    with co.lock:
        info = co.servers.get(server)
        if info is None or not info.alive:
            return
        reported = {rid: (epoch, state) for rid, epoch, state in info.ranges}
        desired = {r["id"]: dict(r) for r in co.pmap.owned_by(server) if r["state"] == "serving"}
        followed = {r["id"]: dict(r) for r in co.pmap.followed_by(server) if r["state"] == "serving"}
        known = set(co.pmap.ranges)
        busy = set(co.pmap.busy_ids())
    restarted = []  # replicated ranges whose primary lost them (it restarted): a new primary is chosen
    ahead = sorted(rid for rid, rec in {**followed, **desired}.items()
                   if is_replicated(rec) and replica_ahead(rec, reported.get(rid)))
    for rid, rec in desired.items():
        if reported.get(rid) == (rec["epoch"], "serving") or rid in ahead:
            continue
        if is_replicated(rec) and rid not in reported:
            restarted.append(rid)
        else:
            _load(co, ctl, server, rec)
    stale = [rec for rid, rec in followed.items()
             if reported.get(rid) != (rec["epoch"], "following") and rid not in ahead]
    if ahead:  # the map lost a configuration the replicas adopted: a new one past it, never the stale one
        log.warning("ranges %s on %s are at a later epoch than the map: promoting past it", ahead, server)
        replica_ops.promote(co, ctl, ahead, reason=f"{server} is at a later epoch than the map")
    if stale:
        replica_ops.open_replicas(co, ctl, stale, only={server})
    if restarted:
        replica_ops.promote(co, ctl, restarted, reason=f"{server} restarted")
    for rid, (epoch, _state) in reported.items():
        if rid in desired or rid in followed or rid in busy:
            continue
        try:
            if rid in known and is_replicated(co.pmap.ranges[rid]):  # no longer a replica here: its copy is stale
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


def _prepare(ctl: Commands, server: str | None, rid: str, epoch: int) -> None:
    """Ask the owner to flush a range while it still serves (shortens the offline window)."""
    if server is None:
        return
    try:
        ctl.call(server, {"op": "prepare", "range": rid, "epoch": epoch})
    except TableError as exc:
        log.info("prepare %s on %s: %s", rid, server, exc)


def move(co: MapWriter, ctl: Commands, rid: str, target: str, reason: str = "manual") -> dict:
    """Move a range: source closes it, the map records the new owner, the target opens it."""
    with co.lock:
        rec = co.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        if not co.is_alive(target):
            raise TableError("InvalidInput", f"server {target} is not alive")
        if rec["owner"] == target:
            return {"range": rid, "offline_ms": 0.0}
        source = rec["owner"]
    if is_replicated(rec):  # a primary moves to one of its in-sync replicas: a leadership transfer
        return replica_ops.transfer(co, ctl, rid, target, reason)
    _prepare(ctl, source, rid, rec["epoch"])
    with co.lock:
        rec = co.pmap.ranges.get(rid)
        if rec is None or rec["owner"] != source or rec["state"] != "serving":
            raise TableError("ServerBusy", f"range {rid} changed while preparing its move")
        co.commit(co.pmap.update(rec, state="moving"))
        epoch = rec["epoch"]
        crash_point("move.after_intent", co.cfg.data_dir)
    t0 = time.monotonic()
    if source and co.is_alive(source):
        try:
            ctl.call(source, {"op": "unload", "range": rid, "epoch": epoch, "version": co.pmap.version})
        except TableError as exc:
            with co.lock:
                co.commit(co.pmap.update(co.pmap.ranges[rid], state="serving"))
            raise TableError("ServerBusy", f"source {source} did not release {rid}: {exc}") from None
    crash_point("move.after_unload", co.cfg.data_dir)
    with co.lock:  # the commit point
        co.commit(co.pmap.update(co.pmap.ranges[rid], owner=target, state="serving"))
        rec = dict(co.pmap.ranges[rid])
        crash_point("move.after_commit", co.cfg.data_dir)
    ok = _load(co, ctl, target, rec)
    offline = _ms(t0)
    co.event("move", range=rid, table=rec["table"], source=source, target=target, reason=reason,
             offline_ms=offline, duration_ms=offline, ok=ok)
    if not ok:
        raise TableError("ServerBusy", f"target {target} could not open {rid}; it will be retried")
    return {"range": rid, "source": source, "target": target, "offline_ms": offline}


def split(co: MapWriter, ctl: Commands, rid: str, key: str | None, reason: str = "manual") -> dict:
    """Split a range at a PartitionKey (or at the data median) into two ranges on the same server."""
    with co.lock:
        rec = co.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        owner = rec["owner"]
        if rec["state"] != "serving" or not co.is_alive(owner):
            raise TableError("ServerBusy", f"range {rid} is not serving")
        if rec.get("move"):  # its replica set is changing (coordinator/replica_move.py)
            raise TableError("ServerBusy", f"range {rid} is moving a replica to {rec['move']['target']}")
    if key is None:
        key = ctl.call(owner, {"op": "split_key", "range": rid, "epoch": rec["epoch"]})
        if key is None:
            raise TableError("InvalidInput", f"range {rid} holds fewer than two PartitionKeys")
    if not (rec["low"] < key and (rec["high"] is None or key < rec["high"])):
        raise TableError("InvalidInput", f"split key {key!r} is not strictly inside {rid}")
    _prepare(ctl, owner, rid, rec["epoch"])
    with co.lock:
        if co.pmap.ranges.get(rid) is not rec or rec["state"] != "serving":
            raise TableError("ServerBusy", f"range {rid} changed while preparing its split")
        left = co.pmap.new_range(rec["table"], rec["low"], key, owner, rec["epoch"] + 1)
        right = co.pmap.new_range(rec["table"], key, rec["high"], owner, rec["epoch"] + 1)
        puts, dels = co.pmap.update(rec, state="splitting")
        co.commit((puts, dels))
        epoch = rec["epoch"]
        crash_point("split.after_intent", co.cfg.data_dir)
    while fault_armed("split.hold", co.cfg.data_dir):  # a test holds the split here, past its intent
        time.sleep(0.05)
    steps: dict[str, float] = {}
    clock = StepClock(steps)
    try:
        # The owner prepares the halves while the range still serves (frontends route a splitting
        # range to its owner) and answers after a short switch-over: the range is offline from that
        # switch-over (its "offline_ms") until both halves are loaded below.
        done = ctl.call(owner, {"op": "split", "range": rid, "epoch": epoch, "key": key,
                                "left": _public(left), "right": _public(right), "version": co.pmap.version})
        clock.step("split")
        t0 = time.monotonic()
    except TableError:
        with co.lock:
            co.commit(co.pmap.update(co.pmap.ranges[rid], state="serving"))
        ctl.submit(reconcile, co, ctl, owner, key=f"reconcile:{owner}")
        raise
    crash_point("split.after_split", co.cfg.data_dir)
    if is_replicated(rec):  # the followers split their copies at the parent's last batch, then all commit
        replica_ops.split_followers(co, ctl, rec, key, left, right, int(done["seq"]), done.get("counts"))
        clock.step("followers")
    with co.lock:  # the commit point
        old = co.pmap.ranges[rid]
        co.commit(co.pmap.replace([old], [left, right]))
        crash_point("split.after_commit", co.cfg.data_dir)
    clock.step("commit")
    if is_replicated(rec):
        replica_ops.open_replicas(co, ctl, [left, right])
    else:
        for r in (left, right):
            _load(co, ctl, owner, r)
    clock.step("load")
    offline = round(float(done["offline_ms"]) + _ms(t0), 2)
    for server in rec.get("replicas") or [owner]:
        try:
            ctl.call(server, {"op": "destroy", "range": _public(rec)})
        except TableError as exc:
            log.warning("destroy %s on %s after split: %s", rid, server, exc)
    co.event("split", range=rid, table=rec["table"], key=key, left=left["id"], right=right["id"],
             server=owner, reason=reason, offline_ms=offline, duration_ms=round(sum(steps.values()), 2),
             steps=steps, owner_steps=done["steps"])
    return {"range": rid, "key": key, "left": left["id"], "right": right["id"], "offline_ms": offline,
            "steps": steps}


def merge(co: MapWriter, ctl: Commands, rid: str, reason: str = "manual", target: str | None = None) -> dict:
    """Merge a range with its right-hand neighbour on ``target`` (default: the left range's owner),
    moving either range there first if needed."""
    with co.lock:
        rec = co.pmap.ranges.get(rid)
        if rec is None:
            raise TableError("ResourceNotFound", f"no range {rid}")
        rs = co.pmap.ranges_of(rec["table"])
        i = [r["id"] for r in rs].index(rid)
        if i + 1 >= len(rs):
            raise TableError("InvalidInput", f"range {rid} is the last of its table; merge its left neighbour")
        right = rs[i + 1]
        if rec.get("move") or right.get("move"):  # a replica set is changing (coordinator/replica_move.py)
            raise TableError("ServerBusy", f"range {rid} or {right['id']} is moving a replica")
        if is_replicated(rec) and set(rec["replicas"]) != set(right["replicas"]):
            raise TableError("InvalidInput", f"ranges {rid} and {right['id']} are replicated on different servers "
                             f"({', '.join(rec['replicas'])} / {', '.join(right['replicas'])}): they cannot merge")
    target = target or rec["owner"]
    for r in (rec, right):
        if r["owner"] != target:
            move(co, ctl, r["id"], target, reason=f"merge of {rid} and {right['id']}")
    with co.lock:
        left, right = dict(co.pmap.ranges[rid]), dict(co.pmap.ranges[right["id"]])
        owner = left["owner"]
        if left["state"] != "serving" or right["state"] != "serving" or not co.is_alive(owner):
            raise TableError("ServerBusy", "ranges are not serving")
        out = co.pmap.new_range(left["table"], left["low"], right["high"], owner,
                                max(left["epoch"], right["epoch"]) + 1)
        p1, _ = co.pmap.update(co.pmap.ranges[left["id"]], state="merging")
        p2, _ = co.pmap.update(co.pmap.ranges[right["id"]], state="merging")
        co.commit(({**p1, **p2}, []))
        crash_point("merge.after_intent", co.cfg.data_dir)
    t0 = time.monotonic()
    try:
        if is_replicated(left):  # every replica merges its copies, at the two ranges' last batches
            replica_ops.merge_replicas(co, ctl, left, right, out)
        else:
            ctl.call(owner, {"op": "merge", "left": _public(left), "right": _public(right), "out": _public(out),
                             "version": co.pmap.version})
    except TableError:
        with co.lock:
            for r in (left, right):
                co.pmap.ranges[r["id"]]["state"] = "serving"
            co.pmap.reindex()
            co.commit(({range_key(r["id"]): co.pmap.ranges[r["id"]] for r in (left, right)}, []))
        if is_replicated(left):  # they were sealed at the next epoch: configure them past it
            replica_ops.promote(co, ctl, [left["id"], right["id"]], reason="merge failed")
        ctl.submit(reconcile, co, ctl, owner, key=f"reconcile:{owner}")
        raise
    crash_point("merge.after_merge", co.cfg.data_dir)
    with co.lock:  # the commit point
        co.commit(co.pmap.replace([co.pmap.ranges[left["id"]], co.pmap.ranges[right["id"]]], [out]))
        crash_point("merge.after_commit", co.cfg.data_dir)
    if is_replicated(out):
        replica_ops.open_replicas(co, ctl, [out])
    else:
        _load(co, ctl, owner, out)
    offline = _ms(t0)
    for r in (left, right):
        for server in r.get("replicas") or [owner]:
            try:
                ctl.call(server, {"op": "destroy", "range": _public(r)})
            except TableError as exc:
                log.warning("destroy %s on %s after merge: %s", r["id"], server, exc)
    co.event("merge", range=out["id"], table=out["table"], left=left["id"], right=right["id"], server=owner,
             reason=reason, offline_ms=offline, duration_ms=offline)
    return {"range": out["id"], "left": left["id"], "right": right["id"], "offline_ms": offline}


def collect_garbage(co: MapWriter, ctl: Commands) -> list[str]:
    """Delete range directories that no range in the map and no live server refers to.

    They are left behind by splits and merges that crashed before or after their commit point. The
    controller runs jobs one at a time, so no operation that allocated a directory is in flight.
    Only on the single-host layout, where the coordinator's data root is the partition servers'
    (``ranges/`` under it); with ``--meta etcd://`` (multi-host) the coordinator never touches a
    partition server's files (docs/multi-host.md).
    """
    if co.cfg.meta:
        return []
    root = os.path.join(co.cfg.data_dir, "ranges")
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    if not names:
        return []
    with co.lock:  # references only: the sets are built outside the lock the heartbeats need
        used = set(co.pmap.ranges)
        reported = [info.ranges for info in co.servers.values()]
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


def recover(co: MapWriter) -> list[str]:
    """After a restart: roll back operations that never reached their commit point.

    A range still ``moving``, ``splitting`` or ``merging`` was not committed (the commit point
    sets it back to ``serving`` or replaces it), so it returns to ``serving`` under its recorded
    owner; reconciliation then reloads it there and discards any uncommitted halves.
    """
    fixed: list[str] = []
    with co.lock:
        puts: dict[bytes, Any] = {}
        for r in co.pmap.ranges.values():
            if r["state"] != "serving":
                r["state"] = "serving"
                if is_replicated(r):  # its replicas may be sealed at the next epoch: a configuration past it
                    r["epoch"] += 2
                puts[range_key(r["id"])] = r
                fixed.append(r["id"])
        if puts:
            co.pmap.reindex()
            co.pmap.version += 1
            puts[b"meta/version"] = co.pmap.version
            co.commit((puts, []))
    return fixed
