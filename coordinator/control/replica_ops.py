"""The coordinator's jobs on replica sets (run by the controller thread, one at a time): open a replicated
range on its replicas, fail over a dead or restarted primary, drop dead followers, and move followers in
and out of the in-sync set on the primaries' reports. The policy is in :mod:`coordinator.replicas.sets`;
the protocol between replicas in :mod:`partition_server.replication.protocol`.

The coordinator is the configuration master of Vertical Paxos II: each change is committed to the meta
store before any replica hears of it, a new primary is chosen only among replicas sealed at the new
epoch (they refuse the old primary from then on), and a dead primary is replaced only once its lease has
surely lapsed (the server was declared dead), so it can neither acknowledge a write nor serve a read
that the new primary does not have.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from coordinator.replicas.sets import (
    after_promotion,
    config_token,
    insync_change,
    next_epoch,
    promotion,
    repair,
    without,
)
from rangetable.errors import TableError
from rangetable.kernel.crash import crash_point
from rangetable.messages import is_replicated

if TYPE_CHECKING:
    from coordinator.control.controller import Controller
    from coordinator.state.cluster import Cluster
    from rangetable.messages import ControlCommand, RangeRecord, SplitCommand

log = logging.getLogger("rangetable.coordinator")


def command(cl: Cluster, rec: dict, dropped: list[str] | None = None, create: bool = False) -> RangeRecord:
    """A range record as control commands carry it; for a replicated range with its configuration:
    ``primary``, ``replicas``, ``insync``, ``min_insync``, each replica's replication endpoint and the
    configuration's token (:func:`~coordinator.replicas.sets.config_token`)."""
    out: RangeRecord = {"id": rec["id"], "table": rec["table"], "low": rec["low"], "high": rec["high"],
                        "epoch": rec["epoch"], "path": rec["path"]}
    if is_replicated(rec):
        out["primary"] = rec["primary"]
        out["replicas"] = list(rec["replicas"])
        out["insync"] = list(rec["insync"])
        out["min_insync"] = cl.cfg.min_insync
        # An endpoint is "" until the server's first heartbeat to this coordinator (after a takeover): the
        # primary keeps that follower (its commits wait for it) but cannot send to it until refresh_peers
        # names it (an empty endpoint crashed the partition servers: chaos seed 302).
        out["peers"] = {s: cl.registry.servers[s].repl_endpoint for s in rec["replicas"] if s in cl.registry.servers}
        secret = cl.keys.pair("coordinator").secret
        assert secret is not None  # KeyRing.pair checked it
        out["token"] = config_token(secret, rec["id"], rec["epoch"])
        if dropped:
            out["dropped"] = dropped
        if create:  # a new range: its replicas, the primary's too, start empty (never said again later)
            out["create"] = True
    return out


def _load_calls(cl: Cluster, recs: list[dict], only: set[str] | None = None,
                dropped: dict[str, list[str]] | None = None, create: bool = False) -> list[tuple[str, ControlCommand]]:
    calls: list[tuple[str, ControlCommand]] = []
    for rec in recs:
        cmd = command(cl, rec, (dropped or {}).get(rec["id"]), create)
        for s in rec["replicas"]:
            if (only is None or s in only) and cl.registry.is_alive(s):
                calls.append((s, {"op": "load", "range": cmd, "version": cl.map.pmap.version,
                                  **cl.map.table_settings.message()}))
    return calls


def open_replicas(cl: Cluster, ctl: Controller, recs: list[dict], only: set[str] | None = None,
                  dropped: dict[str, list[str]] | None = None, create: bool = False) -> None:
    """Send each replica (or only the servers in ``only``) of ``recs`` its configuration, all at once
    (``create``: new ranges, whose primary may start on an empty directory)."""
    with cl.map.lock:
        calls = _load_calls(cl, recs, only, dropped, create)
    for (server, _), res in zip(calls, ctl.call_many(calls), strict=True):
        if isinstance(res, TableError):
            log.warning("load of a replica on %s failed: %s", server, res)


def _seal(cl: Cluster, ctl: Controller, recs: dict[str, dict], primaries: bool,
          epochs: dict[str, list[int]] | None = None) -> dict[str, dict[str, int]]:
    """Seal the live primaries (``primaries``) or the live followers of ``recs`` at the next epoch; returns
    range → server → the last batch it holds, for those that answered (and appends the epochs they said
    they had adopted to ``epochs``)."""
    with cl.map.lock:
        targets = [(s, rid) for rid, rec in recs.items() for s in rec["replicas"]
                   if (s == rec["primary"]) == primaries and cl.registry.is_alive(s)]
    seals: list[tuple[str, ControlCommand]] = [
        (s, {"op": "seal", "range": rid, "epoch": recs[rid]["epoch"] + 1, "path": recs[rid]["path"]})
        for s, rid in targets]
    positions: dict[str, dict[str, int]] = {rid: {} for rid in recs}
    for (server, rid), res in zip(targets, ctl.call_many(seals) if seals else [], strict=True):
        if isinstance(res, dict):
            positions[rid][server] = int(res["seq"])
            if epochs is not None:
                epochs.setdefault(rid, []).append(int(res.get("epoch", 0)))
        else:
            log.info("seal of %s on %s: %s", rid, server, res)
    return positions


def promote(cl: Cluster, ctl: Controller, rids: list[str], reason: str,
            prefer: dict[str, str] | None = None) -> list[str]:
    """Give each range of ``rids`` a new configuration at the next epoch: seal its primary if it is alive
    (it stops taking writes and answers once its in-sync followers hold its last batch), then its live
    followers (they refuse the old epoch from then on), promote the in-sync replica that got furthest
    (``prefer``: a transfer's target, on a tie), drop the replicas that did not answer, and configure them
    all. Returns the ranges promoted; a range none of whose in-sync replicas answered keeps waiting."""
    t0 = time.monotonic()
    with cl.map.lock:
        recs = {rid: dict(cl.map.pmap.ranges[rid]) for rid in rids if rid in cl.map.pmap.ranges}
    adopted: dict[str, list[int]] = {}
    positions = _seal(cl, ctl, recs, primaries=True, epochs=adopted)
    for rid, pos in _seal(cl, ctl, recs, primaries=False, epochs=adopted).items():
        positions[rid].update(pos)
    crash_point("promote.after_seal", cl.cfg.data_dir)
    done, events = [], []
    with cl.map.lock:
        puts: dict[bytes, Any] = {}
        for rid, rec in recs.items():
            cur = cl.map.pmap.ranges.get(rid)
            if cur is None or cur["epoch"] != rec["epoch"]:
                continue  # changed meanwhile
            pick = promotion(cur, positions[rid], (prefer or {}).get(rid))
            if pick is None:
                log.warning("range %s: no in-sync replica answered (%s): it waits for one", rid, positions[rid])
                events.append({"kind": "unavailable", "range": rid, "table": cur["table"], "reason": reason,
                               "replicas": cur["replicas"], "answered": sorted(positions[rid])})
                continue
            old = cl.registry.servers.get(rec["primary"])
            floor = int(old.repl.get(rid, {}).get("committed", -1)) if old is not None and old.repl else -1
            change = after_promotion(cur, pick, positions[rid], floor)
            epoch = next_epoch(cur["epoch"], adopted.get(rid, []))
            puts.update(cl.map.pmap.update(cur, **change, epoch=epoch, state="serving")[0])
            done.append(rid)
            events.append({"kind": "promote", "range": rid, "table": cur["table"], "source": rec["primary"],
                           "target": pick, "reason": reason, "epoch": cur["epoch"], "batch": positions[rid][pick],
                           "dropped": sorted(set(rec["replicas"]) - set(change["replicas"]))})
        if puts:
            cl.map.commit((puts, []))
            crash_point("promote.after_commit", cl.cfg.data_dir)
        promoted = [dict(cl.map.pmap.ranges[rid]) for rid in done]
    open_replicas(cl, ctl, promoted)
    ms = round((time.monotonic() - t0) * 1000, 2)
    for e in events:
        e["duration_ms"] = ms
    if events:
        cl.events.record_many(events)
    return done


def transfer(cl: Cluster, ctl: Controller, rid: str, target: str, reason: str) -> dict:
    """Move a replicated range's primary to ``target``, an in-sync replica: a leadership transfer, no data
    copied. The range is offline from the primary's seal (it drains its last batches to the followers)
    until the target serves: milliseconds."""
    with cl.map.lock:
        rec = cl.map.pmap.ranges[rid]
        if target not in rec["insync"] or not cl.registry.is_alive(target):
            raise TableError("InvalidInput", f"{target} is not a live in-sync replica of {rid}: "
                             f"its primary moves to one of {', '.join(s for s in rec['insync'] if s != rec['primary'])}")
        if rec["state"] != "serving":
            raise TableError("ServerBusy", f"range {rid} is {rec['state']}")
        source = rec["primary"]
        cl.map.commit(cl.map.pmap.update(rec, state="moving"))
        crash_point("transfer.after_intent", cl.cfg.data_dir)
    t0 = time.monotonic()
    try:
        promote(cl, ctl, [rid], reason, prefer={rid: target})
    finally:
        with cl.map.lock:
            cur = cl.map.pmap.ranges.get(rid)
            if cur is not None and cur["state"] != "serving":
                cl.map.commit(cl.map.pmap.update(cur, state="serving"))
    with cl.map.lock:
        primary = cl.map.pmap.ranges[rid]["primary"]
    offline = round((time.monotonic() - t0) * 1000, 2)
    cl.events.record("move", range=rid, table=rec["table"], source=source, target=primary, reason=reason,
             offline_ms=offline, duration_ms=offline, ok=primary == target, transfer=True)
    if primary != target:
        raise TableError("ServerBusy", f"{target} had not caught up with {rid}'s primary; it stays on {primary}")
    return {"range": rid, "source": source, "target": target, "offline_ms": offline, "transfer": True}


def fail_over(cl: Cluster, ctl: Controller, reason: str = "server not alive") -> list[str]:
    """Deal with every replicated range that has a replica on a server no longer alive: promote a new
    primary where the primary is gone, drop the gone followers elsewhere (one map change)."""
    with cl.map.lock:
        affected = {rid for sid, info in cl.registry.servers.items() if not info.alive
                    for rid in cl.map.pmap.primary_ids(sid) + [r["id"] for r in cl.map.pmap.followed_by(sid)]}
        recs = [cl.map.pmap.ranges[rid] for rid in sorted(affected)
                if rid in cl.map.pmap.ranges and is_replicated(cl.map.pmap.ranges[rid])
                and cl.map.pmap.ranges[rid]["state"] == "serving"]
        headless = [r["id"] for r in recs if not cl.registry.is_alive(r["primary"])]
        puts: dict[bytes, Any] = {}
        shrunk = []
        for rec in recs:
            if rec["id"] in headless:
                continue
            # A dead follower leaves the in-sync set but keeps its replica: back with its disk (a restart,
            # a pause), it catches up and rejoins; gone for good, it is rebuilt elsewhere.
            insync = insync_change(rec, [s for s in rec["replicas"] if not cl.registry.is_alive(s)], [])
            if insync is not None:
                puts.update(cl.map.pmap.update(rec, insync=insync)[0])
                shrunk.append(rec["id"])
        if puts:
            cl.map.commit((puts, []))
        primaries = [dict(cl.map.pmap.ranges[rid]) for rid in shrunk]
    if primaries:
        open_replicas(cl, ctl, primaries, only={r["primary"] for r in primaries})
        cl.events.record_many([{"kind": "insync", "range": r["id"], "table": r["table"], "reason": reason,
                           "replicas": r["replicas"], "insync": r["insync"]} for r in primaries])
    return promote(cl, ctl, headless, reason) if headless else []


def adjust_insync(cl: Cluster, ctl: Controller, server: str) -> None:
    """Act on a primary's replication report: followers that lag leave the in-sync set, caught-up ones
    join it, and ones that cannot catch up from its log (diverged, or too far behind) lose their copy."""
    with cl.map.lock:
        info = cl.registry.servers.get(server)
        if info is None or not info.alive:
            return
        puts: dict[bytes, Any] = {}
        changed, dropped, destroy = [], {}, []
        for rid, rep in info.repl.items():
            rec = cl.map.pmap.ranges.get(rid)
            if rec is None or not is_replicated(rec) or rec["primary"] != server or rec["state"] != "serving":
                continue
            lagging, rebuild = rep.get("lagging", []), rep.get("rebuild", [])
            change: dict = {}
            dead = [s for s in rec["replicas"] if not cl.registry.is_alive(s)]
            new = insync_change(rec, lagging + rebuild, rep.get("joining", []), dead)
            if new is not None:
                change["insync"] = new
            for s in rebuild:  # its copy cannot catch up from the primary's log: dropped (and rebuilt elsewhere)
                if s != server and s in rec["replicas"]:
                    change.update(without({**rec, **change}, s))
                    destroy.append((s, rid))
            if change:
                puts.update(cl.map.pmap.update(rec, **change)[0])
            if change or set(lagging) - set(rec["insync"]):
                changed.append(rid)
                dropped[rid] = sorted(set(lagging + rebuild))
        if puts:
            cl.map.commit((puts, []))
        recs = [dict(cl.map.pmap.ranges[rid]) for rid in changed]
    if recs:
        open_replicas(cl, ctl, recs, only={server}, dropped=dropped)
        cl.events.record_many([{"kind": "insync", "range": r["id"], "table": r["table"], "insync": r["insync"],
                           "replicas": r["replicas"], "dropped": dropped.get(r["id"], [])} for r in recs])
    for s, rid in destroy:
        try:
            ctl.call(s, {"op": "destroy", "range": {"id": rid, "path": f"ranges/{rid}"}})
        except TableError as exc:
            log.info("destroy the stale copy of %s on %s: %s", rid, s, exc)


def split_followers(cl: Cluster, ctl: Controller, rec: dict, key: str, left: dict, right: dict, seq: int,
                    counts: list[list[int]] | None = None) -> None:
    """Have the followers of ``rec`` split their copies at ``key`` where the primary did: after the parent's
    last batch ``seq``, which every in-sync follower holds (the primary answered once it was committed), with
    the halves' exact ``counts`` at that batch as the primary counted them (so no follower scans its copy).
    Fills in the halves' replica sets (before the commit): the followers that split, and those of them that
    were in sync; one that could not split is left out and loses its copy of the parent."""
    followers = [s for s in rec["replicas"] if s != rec["primary"] and cl.registry.is_alive(s)]
    cmd: SplitCommand = {"op": "split", "range": rec["id"], "epoch": rec["epoch"], "key": key, "left": command(cl, left),
                         "right": command(cl, right), "seq": seq, "version": cl.map.pmap.version}
    if counts is not None:
        cmd["counts"] = counts
    calls: list[tuple[str, ControlCommand]] = [(s, cmd) for s in followers]
    split = [rec["primary"]]
    for server, res in zip(followers, ctl.call_many(calls), strict=True):
        if isinstance(res, TableError):
            log.warning("split of %s on follower %s: %s", rec["id"], server, res)
        else:
            split.append(server)
    for half in (left, right):
        half["replicas"] = list(split)
        half["insync"] = [s for s in split if s in rec["insync"]]


def merge_replicas(cl: Cluster, ctl: Controller, left: dict, right: dict, out: dict) -> None:
    """Merge two adjacent replicated ranges (same replicas, same primary) on every replica: both are sealed
    (the primary drains them, the followers stop at the same batches), then each replica that holds both
    ranges' last batches merges its copies. Fills in ``out``'s replica set (before the commit); raises
    ServerBusy when the primary could not merge."""
    recs = {left["id"]: left, right["id"]: right}
    adopted: dict[str, list[int]] = {}
    positions = _seal(cl, ctl, recs, primaries=True, epochs=adopted)
    for rid, pos in _seal(cl, ctl, recs, primaries=False, epochs=adopted).items():
        positions[rid].update(pos)
    crash_point("promote.after_seal", cl.cfg.data_dir)
    primary = left["primary"]
    lp, rp = positions[left["id"]], positions[right["id"]]
    if primary not in lp or primary not in rp:
        raise TableError("ServerBusy", f"the primary {primary} did not seal {left['id']} and {right['id']}")
    members = [s for s in left["replicas"] if lp.get(s) == lp[primary] and rp.get(s) == rp[primary]]
    msg = {"left": command(cl, left), "right": command(cl, right), "out": command(cl, out), "version": cl.map.pmap.version}
    calls: list[tuple[str, ControlCommand]] = [(s, {"op": "merge", **msg}) for s in members]  # type: ignore[misc]
    merged = [s for s, res in zip(members, ctl.call_many(calls), strict=True) if not isinstance(res, TableError)]
    if primary not in merged:
        raise TableError("ServerBusy", f"the primary {primary} could not merge {left['id']} and {right['id']}")
    out["replicas"] = [primary] + [s for s in merged if s != primary]
    out["insync"] = [s for s in out["replicas"] if s in left["insync"] and s in right["insync"]]


def rereplicate(cl: Cluster, ctl: Controller) -> list[str]:
    """Bring every under-replicated range back to ``--replicas`` copies: replicas on servers dead past
    ``--rereplicate-after-s`` are dropped, and live servers without a copy are told to rebuild one from the
    primary's checkpoint (``"rebuild": true``; they join the in-sync set once the primary reports them caught
    up). One map change for all; returns the ranges changed."""
    now = time.monotonic()
    with cl.map.lock:
        live = {sid: info for sid, info in cl.registry.servers.items() if info.alive and info.repl_endpoint}
        counts = {sid: cl.map.pmap.replica_count(sid) for sid in live}
        zones = {sid: info.zone for sid, info in live.items() if info.zone}
        missing = {sid: now - info.last_seen for sid, info in cl.registry.servers.items() if not info.alive}
        puts: dict[bytes, Any] = {}
        plans: dict[str, list[str]] = {}
        events = []
        for rec in list(cl.map.pmap.ranges.values()):
            if not is_replicated(rec) or rec["state"] != "serving":
                continue
            gone = {s: missing.get(s, float("inf")) for s in rec["replicas"] if s not in live}
            if len(rec["replicas"]) >= cl.cfg.replicas and not gone:
                continue
            plan = repair(rec, cl.cfg.replicas, gone, cl.cfg.rereplicate_after_s, counts, zones)
            if plan is None:
                continue
            added = plan.pop("added")
            puts.update(cl.map.pmap.update(rec, **plan)[0])
            for s in added:
                counts[s] = counts.get(s, 0) + 1
            plans[rec["id"]] = added
            events.append({"kind": "rereplicate", "range": rec["id"], "table": rec["table"], "added": added,
                           "dropped": sorted(set(rec["replicas"]) - set(plan["replicas"])),
                           "replicas": plan["replicas"]})
        if not puts:
            return []
        cl.map.commit((puts, []))
        recs = [dict(cl.map.pmap.ranges[rid]) for rid in plans]
        calls: list[tuple[str, ControlCommand]] = []
        for rec in recs:
            cmd = command(cl, rec)
            cmd["rebuild"] = True
            calls += [(s, {"op": "load", "range": cmd, "version": cl.map.pmap.version, **cl.map.table_settings.message()})
                      for s in plans[rec["id"]]]
    open_replicas(cl, ctl, recs, only={r["primary"] for r in recs})  # the primaries learn the new peers first
    targets = [(s, rec["id"]) for rec in recs for s in plans[rec["id"]]]
    for (server, rid), res in zip(targets, ctl.call_many(calls) if calls else [], strict=True):
        if isinstance(res, TableError):
            log.warning("rebuild of %s on %s failed to start: %s", rid, server, res)
    cl.events.record_many(events)
    log.info("re-replicating %d ranges: %s", len(plans), ", ".join(f"{r}+{'+'.join(a)}" for r, a in plans.items()))
    return sorted(plans)


def actionable(cl: Cluster, server: str, report: dict[str, dict]) -> bool:
    """True when a primary's replication report asks for a change of some in-sync set."""
    for rid, rep in report.items():
        if "lagging" in rep or "rebuild" in rep:
            rec = cl.map.pmap.ranges.get(rid)
            if rec is not None and rec.get("primary") == server:
                return True
        if "joining" in rep:
            rec = cl.map.pmap.ranges.get(rid)
            if rec is not None and rec.get("primary") == server and set(rep["joining"]) - set(rec.get("insync", ())):
                return True
    return False


def refresh_peers(cl: Cluster, ctl: Controller, server: str) -> None:
    """``server``'s replication endpoint became known or changed: send the configuration of every range it
    follows to their primaries again, so they can reach it, and of every range it leads to its followers, so
    their acknowledgements reach it (a follower configured while its primary's endpoint was unknown, as after
    a takeover, acknowledged nothing: its primary reported it lagging and it never rejoined the in-sync set)."""
    with cl.map.lock:
        recs = [dict(r) for r in cl.map.pmap.followed_by(server) if r["state"] == "serving"]
        led = [dict(r) for r in cl.map.pmap.primary_ranges(server) if r["state"] == "serving" and is_replicated(r)]
    if recs:
        open_replicas(cl, ctl, recs, only={r["primary"] for r in recs})
    if led:
        open_replicas(cl, ctl, led, only={s for r in led for s in r["replicas"] if s != server})
