"""The coordinator's request dispatch: heartbeats, map requests, status and admin commands.

Quick questions (status, events, the map, tables) are answered at once in the loop thread; every
multi-step change (create or delete a table, move, split, merge, backup) goes to the controller
thread, which answers when it is done (:mod:`coordinator.operations`); a backup's chunks go to a relay
thread of their own (:mod:`coordinator.backup`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from coordinator import acl, backup, client_keys, leases, replica_move, sync_time
from coordinator import operations as ops
from coordinator.map.holdings import holdings, range_reports
from coordinator.map.server_info import live_endpoints
from coordinator.replicas.sets import health, is_replicated
from rangetable import curve, protocol
from rangetable.errors import TableError

if TYPE_CHECKING:
    from coordinator.interfaces import AdminHost
    from rangetable.messages import Heartbeat, MapDelta

text = protocol.field
JOBS: dict[str, tuple[Callable[..., Any], Callable[[dict], tuple]]] = {  # op -> (controller job, its arguments)
    "create_table": (ops.create_table, lambda r: (text(r, "table", str), text(r, "settings", dict, None),
                                                  text(r, "rid", str, None))),
    "set_table": (ops.set_table, lambda r: (text(r, "table", str), text(r, "settings", dict))),
    "delete_table": (ops.delete_table, lambda r: (text(r, "table", str),)),
    "move": (ops.move, lambda r: (text(r, "range", str), text(r, "server", str))),
    "split": (ops.split, lambda r: (text(r, "range", str), text(r, "key", str, None))),
    "merge": (ops.merge, lambda r: (text(r, "range", str),)),
    "replica_move": (replica_move.start, lambda r: (text(r, "range", str), text(r, "source", str), text(r, "target", str),
                                                    text(r, "timeout_s", (int, float), None))),
}


def handle(co: AdminHost, ident: bytes, rid: bytes, req: dict, role: str | None) -> bytes | None:
    """Answer a request now (returns the body) or hand it to the controller (None).

    ``role`` is the sender's, from its CURVE key: only partition servers heartbeat, only the admin
    key adds or revokes client keys, frontends and the admin key send the rest (``curve.may``).
    """
    op = req["op"]
    kind = ("heartbeat" if op == "heartbeat" else "keys_list" if op == "keys_list"
            else "keys_admin" if op in client_keys.OPS else "backup" if op in backup.OPS else "admin")
    if not curve.may("coordinator", kind, role):
        raise TableError("AuthorizationPermissionMismatch", f"{op!r} is not accepted from a {role or 'client'} key")
    if op in client_keys.OPS:
        return protocol.ok(client_keys.handle(co, op, req))
    if op == "heartbeat":
        return protocol.ok(leases.heartbeat(co, cast("Heartbeat", req)))  # from a partition-server key
    if op == "map":
        since = req.get("since")
        if isinstance(since, int) and not isinstance(since, bool):
            co.publish()  # changes committed but not yet published go out first
            with co.lock:
                delta = co.deltas.since(since, co.published)
            if delta is not None:
                answer: MapDelta = {**delta, "pub": co.pub_endpoint}
                return protocol.ok(answer)
        return co.map_snapshots.answer(ident, rid)  # None: the snapshot thread answers when it is packed
    if op in ("status", "ranges"):
        return protocol.ok(status(co))
    if op == "sync_time":  # the -secondary endpoint's LastSyncTime (Get Service Stats)
        with co.lock:
            return protocol.ok(sync_time.last_sync(co.pmap.ranges.values(), co.servers, time.monotonic(), time.time()))
    if op == "servers":  # the server list alone: cheap with a large map (no ranges, no loads)
        return protocol.ok({"version": co.pmap.version, "servers": server_list(co, loads=False),
                            "gc": co.gc.snapshot()})
    if op == "balancer":
        with co.lock:
            return protocol.ok(co.balancer_loop.control(req))
    if op == "events":
        since = protocol.field(req, "since", int, 0)
        limit = protocol.field(req, "limit", int, 200)
        with co.lock:
            return protocol.ok([e for e in co.events if e["seq"] > since][-limit:] if limit > 0 else [])
    if op == "list_tables":
        with co.lock:
            return protocol.ok({"tables": sorted(co.pmap.tables.values(), key=str.lower), "next": None})
    if op == "get_table":
        with co.lock:
            name = co.pmap.table_name(protocol.field(req, "table", str))
            return protocol.ok({"table": name, **co.table_settings.show(name)})
    if op in acl.OPS:
        return protocol.ok(acl.handle(co, op, req))

    def reply(res: Any, err: TableError | None) -> None:
        """Send the job's answer to the requester (through the loop thread)."""
        co.notify([b"reply", ident, rid, protocol.error(err) if err else protocol.ok(res)])

    if op in backup.OPS:  # the admin key only: a backup reads every table (coordinator/backup.py)
        backup.dispatch(co, req, reply)
        return None
    if op not in JOBS:
        raise TableError("InvalidInput", f"unknown op {op!r}")
    fn, args = JOBS[op]
    try:
        argv = args(req)
    except KeyError as exc:
        raise TableError("InvalidInput", f"missing field {exc}") from None
    co.controller.submit(fn, co, co.controller, *argv, reply=reply)
    return None


def status(co: AdminHost) -> dict:
    """The map, the servers with their load, the term, the last takeover and the replicas each range should
    have (``rangetable ranges``, ``servers``, the dashboard); each replicated range with its health
    (:func:`coordinator.replicas.sets.health`)."""
    now = time.monotonic()
    with co.lock:
        snap = co.pmap.snapshot()
        live = {s.id for s in co.servers.values() if s.alive}
        snap["ranges"] = [{**r, "health": health(r, live, co.cfg.replicas)} if is_replicated(r) else r
                          for r in snap["ranges"]]
        snap["pub"] = co.pub_endpoint
        snap["endpoints"] = live_endpoints(co.servers)
        return {**snap, "term": co.term, "leader": co.endpoint, "takeover": co.takeover,
                "servers": server_list(co, now), "replicas": co.cfg.replicas}


def server_list(co: AdminHost, now: float | None = None, loads: bool = True) -> list[dict]:
    """Every registered server with its state (and with ``loads``, its ranges' latest load reports and
    what it holds as primary and as follower: :func:`coordinator.map.holdings.holdings`)."""
    now = time.monotonic() if now is None else now
    with co.lock:
        out = []
        held = holdings(co.pmap.ranges.values(), range_reports(co.pmap.ranges.values(), co.servers), co.servers) if loads else {}
        for s in sorted(co.servers.values(), key=lambda s: s.id):
            row = {"id": s.id, "endpoint": s.endpoint, "alive": s.alive, "pid": s.pid,
                   "incarnation": s.incarnation, "last_seen_s": round(now - s.last_seen, 2),
                   "ranges": co.pmap.owned_count(s.id), "pending": s.pending, "zone": s.zone}
            if loads:
                row["load"] = s.load
                row["holds"] = held[s.id]  # ranges, entities, bytes as primary and as follower (holdings.py)
            rebuilding = {rid: rep for rid, rep in s.repl.items() if rep.get("rebuilding")}
            if rebuilding:
                row["rebuilding"] = rebuilding
            out.append(row)
        return out
