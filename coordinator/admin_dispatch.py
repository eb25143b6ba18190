"""The coordinator's request dispatch: heartbeats, map requests, status and admin commands.

Heartbeats and a frontend's map deltas are answered at once in the loop thread, which never waits for the
map's lock; every other question (status, events, tables, index claims, keys, geo roles) goes to the
answerer thread (:mod:`coordinator.answerer`), which may; every multi-step change (create or delete a table,
move, split, merge) goes to the controller thread, which answers when it is done
(:mod:`coordinator.control.operations`); a backup's chunks go to a relay thread of their own
(:mod:`coordinator.backup`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from coordinator import acl, backup, client_keys, geo_follow, geo_roles, leases, sync_time
from coordinator.control import operations as ops
from coordinator.control import replica_move
from coordinator.map.holdings import holdings, range_reports
from coordinator.map.server_info import live_endpoints
from coordinator.replicas.sets import health
from rangetable import curve, protocol
from rangetable.errors import TableError
from rangetable.index_def import find
from rangetable.messages import is_replicated

if TYPE_CHECKING:
    from coordinator.interfaces import AdminHost
    from coordinator.state.cluster import Cluster
    from rangetable.messages import Heartbeat, MapDelta

text = protocol.field
JOBS: dict[str, tuple[Callable[..., Any], Callable[[dict], tuple]]] = {  # op -> (controller job, its arguments)
    "create_table": (ops.create_table, lambda r: (text(r, "table", str), text(r, "settings", dict, None),
                                                  text(r, "rid", str, None))),
    "set_table": (ops.set_table, lambda r: (text(r, "table", str), text(r, "settings", dict))),
    "delete_table": (ops.delete_table, lambda r: (text(r, "table", str),)),
    "create_index": (ops.create_index, lambda r: (text(r, "table", str), r["name"], r.get("on"), r.get("include"),
                                                  text(r, "rid", str, None))),
    "drop_index": (ops.drop_index, lambda r: (text(r, "table", str), text(r, "name", str))),
    "index_ready": (ops.index_ready, lambda r: (text(r, "table", str), text(r, "name", str))),
    "index_check": (ops.index_check, lambda r: (text(r, "table", str), text(r, "name", str),
                                                text(r, "repair", bool, False))),
    "index_checked": (ops.index_checked, lambda r: (text(r, "table", str), text(r, "name", str),
                                                    text(r, "id", str), text(r, "report", dict))),
    "move": (ops.move, lambda r: (text(r, "range", str), text(r, "server", str))),
    "split": (ops.split, lambda r: (text(r, "range", str), text(r, "key", str, None))),
    "merge": (ops.merge, lambda r: (text(r, "range", str),)),
    "replica_move": (replica_move.start, lambda r: (text(r, "range", str), text(r, "source", str), text(r, "target", str),
                                                    text(r, "timeout_s", (int, float), None))),
}


def handle(co: AdminHost, ident: bytes, rid: bytes, req: dict, role: str | None) -> bytes | None:
    """In the loop thread: answer a heartbeat or a frontend's ``map`` request now (returns the body), hand a
    multi-step change to the controller, and every other request to the answerer thread (:func:`answer`,
    :mod:`coordinator.answerer`), which may wait for the map's lock; None when the answer comes later.

    ``role`` is the sender's, from its CURVE key: only partition servers heartbeat, only the admin
    key adds or revokes client keys, frontends and the admin key send the rest (``curve.may``).
    """
    op = req["op"]
    kind = ("heartbeat" if op == "heartbeat" else "keys_list" if op == "keys_list"
            else "keys_admin" if op in client_keys.OPS else "backup" if op in backup.OPS
            else "geo" if op in geo_roles.OPS else "admin")
    if not curve.may("coordinator", kind, role):
        raise TableError("AuthorizationPermissionMismatch", f"{op!r} is not accepted from a {role or 'client'} key")
    cl = co.cluster
    if op == "heartbeat":  # from a partition-server key
        return protocol.ok(leases.heartbeat(cl, co.controller, co.balancer_loop, co.term, cast("Heartbeat", req)))
    if op == "map":
        since = req.get("since")
        # a delta when the lock is free within a heartbeat's wait; held longer (a hung commit), a snapshot packed
        # off the loop instead of waiting here
        if isinstance(since, int) and not isinstance(since, bool):
            with cl.map.briefly() as held:
                if held:
                    co.publish()  # changes committed but not yet published go out first
                delta = cl.map.delta_since(since) if held else None
            if delta is not None:
                found: MapDelta = {**delta, "pub": co.pub_endpoint}
                return protocol.ok(found)
        return co.map_snapshots.answer(ident, rid)  # None: the snapshot thread answers when it is packed
    if op in JOBS:
        fn, args = JOBS[op]
        try:
            argv = args(req)
        except KeyError as exc:
            raise TableError("InvalidInput", f"missing field {exc}") from None
        co.controller.submit(fn, cl, co.controller, *argv, reply=_reply_to(co, ident, rid))
        return None
    co.answerer.ask(ident, rid, lambda: answer(co, ident, rid, req))
    return None


def _reply_to(co: AdminHost, ident: bytes, rid: bytes) -> Callable[[Any, TableError | None], None]:
    def reply(res: Any, err: TableError | None) -> None:
        """Send a later answer to the requester (through the loop thread)."""
        co.notify([b"reply", ident, rid, protocol.error(err) if err else protocol.ok(res)])
    return reply


def answer(co: AdminHost, ident: bytes, rid: bytes, req: dict) -> bytes | None:
    """The answer to a request that reads or changes the map (the answerer thread runs it; the request's role
    was checked by :func:`handle`): the body, or None when it is sent later; raises TableError."""
    op = req["op"]
    cl = co.cluster
    maps = cl.map
    if op in client_keys.OPS:
        return protocol.ok(client_keys.handle(cl, co.keys_changed, op, req))
    if op in ("status", "ranges"):
        return protocol.ok(status(co))
    if op == "sync_time":  # the -secondary endpoint's LastSyncTime (Get Service Stats)
        if maps.geo.follows:  # a secondary cluster: the lowest cut of its tables
            return protocol.ok(geo_follow.sync_time(maps, time.time()))
        with maps.lock:
            return protocol.ok(sync_time.last_sync(maps.pmap.ranges.values(), cl.registry.servers, time.monotonic(),
                                                   time.time()))
    if op == "servers":  # the server list alone: cheap with a large map (no ranges, no loads)
        return protocol.ok({"version": maps.pmap.version, "servers": server_list(cl, loads=False),
                            "gc": co.gc.snapshot()})
    if op == "balancer":
        with maps.lock:
            return protocol.ok(co.balancer_loop.control(req))
    if op == "events":
        since = protocol.field(req, "since", int, 0)
        limit = protocol.field(req, "limit", int, 200)
        return protocol.ok(cl.events.since(since, limit))
    if op == "list_tables":  # a user's tables: never an index's
        with maps.lock:
            return protocol.ok({"tables": maps.pmap.user_tables(), "next": None})
    if op in ("get_table", "list_indexes"):
        with maps.lock:
            name = maps.pmap.user_table(protocol.field(req, "table", str))
            now = time.monotonic()
            indexes = [{**d, **maps.claims.progress_of(name, d["name"], now)} for d in maps.pmap.indexes_of(name)]
            if op == "list_indexes":
                return protocol.ok({"indexes": indexes})
            return protocol.ok({"table": name, **maps.table_settings.show(name), "indexes": indexes})
    if op == "index_claim":
        return protocol.ok(index_claim(co, req))
    if op in geo_follow.OPS:
        return protocol.ok(geo_follow.handle(co, op, req))
    if op in acl.OPS:
        return protocol.ok(acl.handle(maps, op, req))

    reply = _reply_to(co, ident, rid)
    if op in geo_roles.OPS:
        got = geo_roles.handle(co, req, reply)
        return None if got is None else protocol.ok(got)
    if op in backup.OPS:  # the admin key only: a backup reads every table (coordinator/backup.py)
        backup.dispatch(cl, co.controller, co.backups, req, reply)
        return None
    raise TableError("InvalidInput", f"unknown op {op!r}")


def index_claim(co: AdminHost, req: dict) -> dict:
    """Grant, renew or refuse the claim of applying an index's changes (:class:`coordinator.map.claims.Claims`);
    a new grant's number is committed before it is answered."""
    maps = co.cluster.map
    with maps.lock:
        table = maps.pmap.user_table(protocol.field(req, "table", str))
        d = find(maps.pmap.indexes_of(table), protocol.field(req, "name", str))
        if d is None:
            raise TableError("IndexNotFound", f"Table {table} has no index {req['name']}.")
        now = time.monotonic()
        got = maps.claims.claim(table, d["name"], req.get("holder"), req.get("ttl_s"), now,
                                lambda puts: maps.meta_store().commit(puts, []))
        if got["granted"] and maps.claims.report(table, d["name"], req["holder"], req.get("progress"), now):
            ops.judge_lag(co.cluster, table, d, maps.claims.lag_of(table, d["name"], now))
        return got


def status(co: AdminHost) -> dict:
    """The map, the servers with their load, the term, the last takeover and the replicas each range should
    have (``rangetable ranges``, ``servers``, the dashboard); each replicated range with its health
    (:func:`coordinator.replicas.sets.health`)."""
    now = time.monotonic()
    cl = co.cluster
    servers = cl.registry.servers
    with cl.map.lock:
        snap = cl.map.pmap.snapshot()
        live = {s.id for s in servers.values() if s.alive}
        snap["ranges"] = [{**r, "health": health(r, live, co.cfg.replicas)} if is_replicated(r) else r
                          for r in snap["ranges"]]
        snap["pub"] = co.pub_endpoint
        snap["endpoints"] = live_endpoints(servers)
        if co.cfg.source:  # a secondary cluster: each table's cut and lag (the dashboard's geo section)
            snap["geo"] = geo_follow.report(co, now)
        return {**snap, "term": co.term, "leader": co.endpoint, "takeover": co.takeover,
                "servers": server_list(cl, now), "replicas": co.cfg.replicas}


def server_list(cl: Cluster, now: float | None = None, loads: bool = True) -> list[dict]:
    """Every registered server with its state (and with ``loads``, its ranges' latest load reports and
    what it holds as primary and as follower: :func:`coordinator.map.holdings.holdings`)."""
    now = time.monotonic() if now is None else now
    with cl.map.lock:
        pmap, servers = cl.map.pmap, cl.registry.servers
        out = []
        held = holdings(pmap.ranges.values(), range_reports(pmap.ranges.values(), servers), servers) if loads else {}
        for s in sorted(servers.values(), key=lambda s: s.id):
            row = {"id": s.id, "endpoint": s.endpoint, "alive": s.alive, "pid": s.pid,
                   "incarnation": s.incarnation, "last_seen_s": round(now - s.last_seen, 2),
                   "ranges": pmap.primary_count(s.id), "pending": s.pending, "zone": s.zone}
            if loads:
                row["load"] = s.load
                row["holds"] = held[s.id]  # ranges, entities, bytes as primary and as follower (holdings.py)
            rebuilding = {rid: rep for rid, rep in s.repl.items() if rep.get("rebuilding")}
            if rebuilding:
                row["rebuilding"] = rebuilding
            out.append(row)
        return out
