"""A secondary cluster's coordinator: the claims of its tables' appliers and the cuts they publish (issue 35,
``docs/geo.md``).

* ``source_claim`` {table, holder, ttl_s}: grant, renew or refuse the claim of applying the source's changes to
  a table (:class:`coordinator.map.claims.Claims`, numbered and persisted before it is answered), with the
  table's cut so far: a new holder resumes from it;
* ``source_copied`` {table, claim, copy}: the holder of the live claim notes how far the table's first copy got
  (``{start, next, copied}``); ``source_claim`` answers it as ``copy`` until the table's first cut;
* ``source_publish`` {table, claim, cut, lag_s}: the holder of the live claim makes ``cut`` the table's cut
  (:class:`coordinator.map.source_cuts.SourceCuts`); the loop sends the cuts to every frontend
  (``[b"cuts", …]`` on the PUB socket), which reads the table as of it;
* ``geo_status``: per table its cut, lag, applier and whether its lag is over the alarm threshold
  (``--geo-lag-alarm-s``; crossing it either way is an event, ``geo_lag_alarm`` or ``geo_lag_ok``);
* ``sync_time`` on a secondary cluster: the lowest cut over its tables (Get Service Stats' LastSyncTime).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rangetable import protocol
from rangetable.edm import TICKS_PER_SECOND, UNIX_EPOCH_TICKS
from rangetable.errors import TableError

if TYPE_CHECKING:
    from coordinator.interfaces import AdminHost
    from coordinator.state.maps import MapService

OPS = frozenset({"source_claim", "source_publish", "source_copied", "geo_status"})


def handle(co: AdminHost, op: str, req: dict) -> dict[str, Any]:
    """Answer one of :data:`OPS`."""
    maps = co.cluster.map
    now = time.monotonic()
    if op == "geo_status":
        return report(co, now)
    if not maps.geo.follows:  # an applier of a role this cluster left (a failover made it a primary)
        raise TableError("SourceFenced", f"this cluster is {maps.geo.role}: it follows no source")
    if op == "source_claim":
        with maps.lock:
            table = maps.pmap.user_table(protocol.field(req, "table", str))
            got = maps.source_claims.claim(table, "", req.get("holder"), req.get("ttl_s"), now,
                                           lambda puts: maps.meta_store().commit(puts, []))
            if got["granted"]:
                maps.source_claims.report(table, "", req["holder"], req.get("progress"), now)
            cur = maps.cuts.cuts.get(table.lower())
            return {**got, "cut": None if cur is None else cur.cut, "copy": maps.cuts.copies.get(table.lower())}
    with maps.lock:  # source_publish, source_copied: from the live claim's holder only
        table = maps.pmap.user_table(protocol.field(req, "table", str))
        claim = protocol.field(req, "claim", int)
        if not maps.source_claims.holds(table, "", claim, now):
            raise TableError("SourceFenced", f"claim {claim} of table {table} is not the live one")
        deletes: list[bytes] = []
        if op == "source_copied":
            puts = maps.cuts.note_copy(table, req.get("copy"), now)
            answer: dict[str, Any] = {}
        else:
            puts, deletes = maps.cuts.publish(table, req.get("cut"), req.get("lag_s"), now)
            answer = {"cut": maps.cuts.cuts[table.lower()].cut}
    if puts or deletes:  # outside the map lock: a meta-store round trip holds up nobody else
        maps.meta_store().commit(puts, deletes)
    return answer


def report(co: AdminHost, now: float) -> dict[str, Any]:
    """``geo_status``'s answer (and the status' ``geo`` section): :func:`status` on a secondary cluster, an
    empty one on a primary, with the alarm threshold."""
    with co.cluster.map.lock:
        role = co.cluster.map.geo.status(co.cluster.registry.servers.values())
    geo = co.cluster.map.geo
    if not geo.follows:  # nothing follows here
        return {"secondary": False, **role, "tables": [], "last_sync": None, "alarm_s": co.cfg.geo_lag_alarm_s}
    return {"secondary": True, **role, **status(co.cluster.map, now), "alarm_s": co.cfg.geo_lag_alarm_s}


def judge(maps: MapService, threshold_s: float, now: float) -> list[dict[str, Any]]:
    """The lag alarm's events (:meth:`coordinator.map.source_cuts.SourceCuts.judge`), under the map lock."""
    with maps.lock:
        return maps.cuts.judge(maps.pmap.user_tables(), threshold_s, now)


def status(maps: MapService, now: float) -> dict[str, Any]:
    """Every user table's cut, lag and applier, and the account's LastSyncTime (ticks; None before every table
    has a cut)."""
    with maps.lock:
        tables = maps.pmap.user_tables()
        rows = maps.cuts.status(tables, now)
        for row in rows:
            got = maps.source_claims.progress_of(row["table"], "", now)
            row["applier"] = got.get("holder")
            row.update({k: got.get(k) for k in ("applied", "copied", "error")})
        return {"tables": rows, "last_sync": maps.cuts.last_sync(tables)}


def sync_time(maps: MapService, wall: float) -> dict[str, Any]:
    """Get Service Stats on a secondary cluster: ``{"last_sync": wall-clock seconds or None, "status": "live"
    or "bootstrap" (some table has no cut yet), "lag_s"}``."""
    got = status(maps, time.monotonic())
    ticks = got["last_sync"]
    if ticks is None:
        return {"last_sync": None, "status": "bootstrap", "lag_s": None}
    at = (ticks - UNIX_EPOCH_TICKS) / TICKS_PER_SECOND
    return {"last_sync": at, "status": "live", "lag_s": round(max(0.0, wall - at), 4)}
