"""What each partition server holds, as primary and as follower: ranges, entities and bytes.

Decided here once, from the map (each range's primary and replicas) and each range's latest load report
(sent by its primary, exact at its last batch: :mod:`partition_server.store.counts`); the coordinator's
``status`` carries it per server as ``holds`` and ``/metrics`` exports it, and ``rangetable ranges``,
``rangetable status`` and the dashboard show that, computing nothing of their own. A follower holds what
its range's primary reports (the same batches, once in sync: a lagging one holds a few batches fewer).
A range of one copy counts for its primary as primary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ROLES = ("primary", "follower")


def empty_holds() -> dict[str, dict[str, int]]:
    """Nothing held, in either role."""
    return {role: {"ranges": 0, "entities": 0, "bytes": 0} for role in ROLES}


def holdings(ranges: Iterable[Mapping[str, Any]], loads: Mapping[str, Mapping[str, Any]],
             servers: Iterable[str] = ()) -> dict[str, dict[str, dict[str, int]]]:
    """``{server: {"primary" | "follower": {"ranges", "entities", "bytes"}}}`` for every server that holds a
    range (and every one of ``servers``, holding nothing if so); ``loads`` maps a range id to its latest
    report (``entities``, ``bytes``; a range not reported yet counts as empty)."""
    out: dict[str, dict[str, dict[str, int]]] = {s: empty_holds() for s in servers}
    for r in ranges:
        ld = loads.get(r["id"]) or {}
        n, size = int(ld.get("entities", 0) or 0), int(ld.get("bytes", 0) or 0)
        primary = r.get("primary")
        holders = [(primary, "primary")] if primary else []
        holders += [(s, "follower") for s in r.get("replicas") or () if s != primary]
        for server, role in holders:
            h = out.setdefault(server, empty_holds())[role]
            h["ranges"] += 1
            h["entities"] += n
            h["bytes"] += size
    return out


def range_reports(ranges: Iterable[Mapping[str, Any]], servers: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Each range's latest load report from its primary (range id → report), from the servers' ``load``: a
    follower may report its copy too (its size), never what the primary decides the figures by."""
    out: dict[str, Mapping[str, Any]] = {}
    for r in ranges:
        info = servers.get(r.get("primary") or "")
        ld = (getattr(info, "load", None) or {}).get(r["id"]) if info is not None else None
        if ld is not None:
            out[r["id"]] = ld
    return out
