"""Routing policy of a frontend: the cached partition map and query cursors. Pure, no sockets.

:class:`MapCache` answers "which range, which server" for a key; :class:`QueryCursor` walks the
scans of a query plan across range boundaries and produces the next sub-request, so the frontend
loop only moves messages.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import Any

from rangetable.errors import TableError
from rangetable.index_def import IndexDef
from rangetable.keys import encode_key, range_bounds
from rangetable.planner import Plan

# A splitting range still serves on its primary while the halves are prepared (partition_server/split_job.py);
# a moving or merging one does not: requests for it wait for the next map.
ROUTED_STATES = frozenset({"serving", "splitting"})


class Route:
    """Where a request goes: a range of the map and its primary's endpoint (None when not serving).

    The endpoint is looked up in the map's server table when asked, so a server that joins, moves
    or dies changes every route to it without touching the routes.
    """

    __slots__ = ("range", "_servers")

    def __init__(self, range: dict, servers: dict[str, str]) -> None:  # noqa: A002 - the map's word
        self.range = range
        self._servers = servers

    @property
    def endpoint(self) -> str | None:
        """The primary's data endpoint, or None while the range is not serving or has no live primary."""
        r = self.range
        return self._servers.get(r["primary"]) if r["state"] in ROUTED_STATES else None

    def secondary_endpoint(self, attempt: int, pick: int = 0) -> str | None:
        """Where the ``attempt``-th try of a ``-secondary`` read goes (:func:`secondary_order`: an in-sync
        follower first, each retry the next candidate), or None when nothing can serve the range now."""
        order = secondary_order(self.range, self._servers, self.endpoint, pick)
        return order[attempt % len(order)] if order else None


def secondary_order(rec: dict, servers: dict[str, str], endpoint: str | None, pick: int) -> list[str]:
    """Where a read of the ``-secondary`` endpoint may go, best first: the range's in-sync followers that
    have a live endpoint (starting at the ``pick``-th, so reads spread over them), then the primary's
    endpoint ``endpoint`` (None when it is not serving). Only the primary for a range that is not replicated
    or has no in-sync follower; empty when nothing can serve it now."""
    primary = rec.get("primary")
    followers = [servers[s] for s in sorted(rec.get("insync") or ()) if s != primary and s in servers]
    if followers:
        k = pick % len(followers)
        followers = followers[k:] + followers[:k]
    return followers + ([endpoint] if endpoint is not None else [])


class MapCache:
    """A frontend's copy of the partition map: installed from a snapshot, kept by numbered deltas
    (``coordinator.map.deltas``: the ZeroMQ guide's *Clone* pattern)."""

    def __init__(self) -> None:
        self.version = -1
        self.tables: dict[str, str] = {}
        self.ranges: dict[str, dict] = {}
        self.by_table: dict[str, tuple[list[str], list[Route]]] = {}
        self.servers: dict[str, str] = {}
        self.indexes: dict[str, list[IndexDef]] = {}  # base table lower -> its declared indexes
        self.holding: dict[str, IndexDef] = {}  # base table lower -> an index of it that holds its writes (behind)
        self.pub = ""
        self.received = float("-inf")  # monotonic time the current map was last confirmed
        self.cuts: dict[str, int] = {}  # a secondary cluster: table lower -> the cut its reads are answered at
        self.cuts_heard = False  # a secondary cluster: the coordinator's cuts arrived once at least
        self.geo: dict[str, Any] | None = None  # the geo role the coordinator sent last (coordinator/map/geo_role.py)

    @property
    def snapshot(self) -> dict:
        """The cached map in the coordinator's snapshot form (for the ``map`` op)."""
        return {
            "version": self.version,
            "tables": sorted(self.tables.values()),
            "ranges": [rt.range for t in sorted(self.by_table) for rt in self.by_table[t][1]],
            "servers": dict(self.servers),
            "indexes": {t: [d.to_wire() for d in ds] for t, ds in self.indexes.items()},
            "pub": self.pub,
        }

    def apply(self, snap: dict) -> bool:
        """Install a snapshot or a delta if it is not older than ours; returns True when installed.

        A delta (it has ``prev``) applies only to a map at a version in ``[prev, version]``;
        False for a delta means "missed updates: ask for ``map {since: self.version}``"
        unless the delta is simply old (``version < self.version``).
        """
        if "prev" in snap:
            return self.apply_delta(snap)
        if snap.get("version", -1) < self.version:
            return False
        self.received = time.monotonic()
        self.version = snap["version"]
        self.tables = {t.lower(): t for t in snap.get("tables", [])}
        self.ranges = {r["id"]: r for r in snap.get("ranges", [])}
        groups: dict[str, list[dict]] = {}
        for r in self.ranges.values():
            groups.setdefault(r["table"].lower(), []).append(r)
        self.servers = dict(snap.get("servers", {}))
        self._set_indexes(snap.get("indexes", {}))
        self.by_table = {}
        for t, rs in groups.items():
            rs.sort(key=lambda r: r["low"])
            self.by_table[t] = ([r["low"] for r in rs], [Route(r, self.servers) for r in rs])
        self.pub = snap.get("pub", self.pub)
        return True

    def is_gap(self, delta: dict) -> bool:
        """True when a delta starts after our version: updates were missed."""
        return delta["prev"] > self.version

    def apply_delta(self, delta: dict) -> bool:
        """Apply a delta in place (O(changed ranges × log n)); False when it does not fit our version."""
        if self.version < 0 or delta["prev"] > self.version or delta["version"] < self.version:
            return False
        self.received = time.monotonic()
        if "tables" in delta:
            self.tables = {t.lower(): t for t in delta["tables"]}
            for t in [t for t in self.by_table if t not in self.tables]:
                for rt in self.by_table.pop(t)[1]:
                    self.ranges.pop(rt.range["id"], None)
        for rid in list(delta["removed"]) + [r["id"] for r in delta["ranges"]]:
            old = self.ranges.pop(rid, None)
            if old is not None:
                self._unroute(old)
        for r in delta["ranges"]:
            if r["table"].lower() in self.tables:
                self.ranges[r["id"]] = r
                self._route(r)
        if "indexes" in delta:
            self._set_indexes(delta["indexes"])
        for sid, endpoint in delta["servers"].items():
            if endpoint is None:
                self.servers.pop(sid, None)
            else:
                self.servers[sid] = endpoint
        self.version = delta["version"]
        self.pub = delta.get("pub", self.pub)  # a map answer names the leader's PUB
        return True

    def set_geo(self, geo: Any) -> None:
        """Install the geo role the coordinator sent (``{"role", "epoch", "source"}``), unless older than the one
        held."""
        if (isinstance(geo, dict) and geo.get("role") in ("primary", "fenced", "secondary")
                and type(geo.get("epoch")) is int and (self.geo is None or geo["epoch"] >= self.geo["epoch"])):
            self.geo = geo

    def set_cuts(self, wire: Any) -> None:
        """Install the cuts a secondary cluster's coordinator sent (``{table lower: cut}``: every table's). A
        cut never moves back here (a new leader may start from one persisted a moment earlier); a table not named
        is gone, its cut with it."""
        if not isinstance(wire, dict):
            return
        old = self.cuts
        self.cuts = {t: max(c, old.get(t, c)) for t, c in wire.items() if isinstance(t, str) and type(c) is int}
        self.cuts_heard = True

    def _set_indexes(self, wire: dict[str, list[dict]]) -> None:
        self.indexes = {t: [IndexDef.from_wire(d) for d in ds] for t, ds in wire.items()}
        self.holding = {t: d for t, ds in self.indexes.items() for d in ds if d.behind_s}

    def indexes_of(self, table: str) -> list[IndexDef]:
        """The indexes declared on a table (by name; ``[]``: none)."""
        return self.indexes.get(table.lower(), [])

    def _route(self, r: dict) -> None:
        lows, routes = self.by_table.setdefault(r["table"].lower(), ([], []))
        i = bisect.bisect_left(lows, r["low"])
        lows.insert(i, r["low"])
        routes.insert(i, Route(r, self.servers))

    def _unroute(self, r: dict) -> None:
        lows, routes = self.by_table.get(r["table"].lower(), ([], []))
        i = bisect.bisect_left(lows, r["low"])
        while i < len(routes) and lows[i] == r["low"]:
            if routes[i].range["id"] == r["id"]:
                del lows[i], routes[i]
                return
            i += 1

    def has_table(self, table: str) -> bool:
        """True when the table is in the cached catalog."""
        return table.lower() in self.tables

    def route(self, table: str, pk: str) -> Route:
        """The range holding PartitionKey ``pk`` and its primary's endpoint (None if unassigned)."""
        lows, routes = self.by_table.get(table.lower(), ((), ()))
        i = bisect.bisect_right(lows, pk) - 1  # type: ignore[arg-type]
        if i < 0:
            raise TableError("TableNotFound")
        return routes[i]

    def route_key(self, table: str, key: bytes) -> Route:
        """The range holding an encoded key (a key position of a scan)."""
        pk = key.split(b"\x00", 1)[0].decode("utf-8", "surrogatepass")
        return self.route(table, pk)


def key_to_token(key: bytes) -> list[str]:
    """A resume key as the ``[PartitionKey, RowKey]`` continuation token."""
    pk, _, rk = key.partition(b"\x00")
    return [pk.decode("utf-8", "surrogatepass"), rk.decode("utf-8", "surrogatepass")]


def token_to_key(token: Any) -> bytes:
    """Inverse of :func:`key_to_token`; raises InvalidInput for a malformed token."""
    if not (isinstance(token, list | tuple) and len(token) == 2 and all(isinstance(t, str) for t in token)):
        raise TableError("InvalidInput", "continuation token must be [PartitionKey, RowKey]")
    return encode_key(token[0], token[1])


MAX_SPANS = 256  # spans of one range asked for in one scan request


def _clamp(hi: bytes | None, range_hi: bytes | None) -> bytes | None:
    """A scan's end ``hi`` cut at its range's end."""
    return hi if range_hi is None else (range_hi if hi is None else min(hi, range_hi))


@dataclass
class QueryCursor:
    """Walks a plan's scans in key order, one range at a time, until a page is full."""

    plan: Plan
    limit: int
    pos: bytes = b""
    index: int = 0
    results: list = field(default_factory=list)

    def next_segment(self, cache: MapCache, table: str) -> tuple[Route, list[tuple[bytes, bytes | None]]] | None:
        """The next route and the spans ``[(lo, hi), …]`` to scan there, in key order (the plan's scans
        that lie in that range, up to :data:`MAX_SPANS`: an ``or`` of many point keys costs one
        request per range, not one per key), or None when the plan is exhausted."""
        scans = self.plan.scans
        while self.index < len(scans):
            s = scans[self.index]
            lo = max(s.lo, self.pos)
            if s.hi is not None and lo >= s.hi:
                self.index += 1
                continue
            route = cache.route_key(table, lo)
            _, rhi = range_bounds(route.range["low"], route.range["high"])
            spans = [(lo, _clamp(s.hi, rhi))]
            j = self.index + 1
            while spans[-1][1] == scans[j - 1].hi and j < len(scans) and len(spans) < MAX_SPANS:
                t = scans[j]  # the previous scan ended inside this range: does the next start in it?
                if rhi is not None and t.lo >= rhi:
                    break
                spans.append((t.lo, _clamp(t.hi, rhi)))
                j += 1
            return route, spans
        return None

    def advance(self, entities: list, resume: bytes | None, seg_hi: bytes | None) -> None:
        """Take a segment's answer: its matches and where it stopped (None = segment exhausted)."""
        self.results.extend(entities)
        if resume is not None:
            self.pos = resume
        elif seg_hi is None:
            self.index = len(self.plan.scans)
        else:
            self.pos = seg_hi

    @property
    def remaining(self) -> int:
        """How many more entities fit on this page."""
        return self.limit - len(self.results)

    @property
    def done(self) -> bool:
        """True when every scan is exhausted."""
        return self.index >= len(self.plan.scans)

    def token(self) -> list[str] | None:
        """The continuation token for the page so far (None when the query is complete)."""
        return None if self.done else key_to_token(self.pos)
