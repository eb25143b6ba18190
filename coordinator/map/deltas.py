"""Map updates as numbered deltas (the ZeroMQ guide's *Clone* pattern). Pure data, no sockets.

Every map change is published as a delta that carries only what changed, so its size is
proportional to the change, not to the map::

    {"prev": p, "version": v, "ranges": [range record…], "removed": [range id…],
     "servers": {server id: endpoint | None}, "tables": [name…] (only when the catalog changed),
     "indexes": {base table lower: [definition…]} (only when a definition changed)}

A delta holds the *latest* value of everything that changed after version ``prev`` up to
``version``, so applying it to any copy of the map at a version in ``[prev, version]`` gives the map
at ``version`` (applying it twice is harmless). A frontend whose map is older than ``prev`` missed a
delta: it asks for ``map {since: its version}`` and gets the missed deltas folded into one from the
:class:`DeltaLog`, or a full snapshot when the log no longer reaches back that far.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from coordinator.map.indexes import INDEX_PREFIX

if TYPE_CHECKING:
    from rangetable.messages import MapDelta, RangeRecord

DELTA_LOG = 1024  # deltas kept for catch-up (each one is small: it holds only what changed)


@dataclass
class PendingChanges:
    """What changed since the last published delta (filled by commits, emptied by publishing)."""

    ranges: set[str] = field(default_factory=set)
    servers: set[str] = field(default_factory=set)
    tables: bool = False
    indexes: bool = False

    def note_writes(self, puts: dict[bytes, Any], deletes: list[bytes]) -> None:
        """Record the range and catalog keys a meta-store commit touches."""
        for k in list(puts) + list(deletes):
            if k.startswith(b"range/"):
                self.ranges.add(k[6:].decode())
            elif k.startswith(b"table/"):
                self.tables = True
            elif k.startswith(INDEX_PREFIX):
                self.indexes = True
            elif k.startswith(b"server/"):
                self.servers.add(k[7:].decode())

    def take(self) -> PendingChanges:
        """The pending changes, leaving this empty."""
        out = PendingChanges(self.ranges, self.servers, self.tables, self.indexes)
        self.ranges, self.servers, self.tables, self.indexes = set(), set(), False, False
        return out


def build_delta(prev: int, version: int, changes: PendingChanges, ranges: Mapping[str, RangeRecord],
                endpoints: dict[str, str | None], tables: list[str],
                indexes: dict[str, list[dict]] | None = None) -> MapDelta:
    """The delta from ``prev`` to ``version``: current records of changed ranges (ids no longer in
    ``ranges`` are removed), changed servers' endpoints (None: gone), the catalog if it changed, every
    index definition if one changed."""
    delta: MapDelta = {"prev": prev, "version": version, "ranges": [], "removed": [], "servers": {}}
    for rid in sorted(changes.ranges):
        rec = ranges.get(rid)
        if rec is None:
            delta["removed"].append(rid)
        else:
            delta["ranges"].append(rec)
    for sid in sorted(changes.servers):
        delta["servers"][sid] = endpoints.get(sid)
    if changes.tables:
        delta["tables"] = tables
    if changes.indexes:
        delta["indexes"] = dict(indexes or {})
    return delta


def fold(deltas: list[MapDelta]) -> MapDelta:
    """Consecutive deltas (oldest first) as one delta from the first ``prev`` to the last ``version``."""
    ranges: dict[str, RangeRecord] = {}
    removed: set[str] = set()
    servers: dict[str, str | None] = {}
    tables = None
    indexes = None
    for d in deltas:
        for rid in d["removed"]:
            ranges.pop(rid, None)
            removed.add(rid)
        for rec in d["ranges"]:
            ranges[rec["id"]] = rec
            removed.discard(rec["id"])
        servers.update(d["servers"])
        if "tables" in d:
            tables = d["tables"]
        if "indexes" in d:
            indexes = d["indexes"]
    out: MapDelta = {"prev": deltas[0]["prev"], "version": deltas[-1]["version"],
                     "ranges": [ranges[k] for k in sorted(ranges)], "removed": sorted(removed),
                     "servers": servers}
    if tables is not None:
        out["tables"] = tables
    if indexes is not None:
        out["indexes"] = indexes
    return out


class DeltaLog:
    """The last ``limit`` published deltas, packed, for frontends that missed some."""

    def __init__(self, limit: int = DELTA_LOG) -> None:
        self._log: deque[tuple[int, int, bytes]] = deque(maxlen=limit)

    def add(self, delta: MapDelta, packed: bytes) -> None:
        """Keep a published delta (``packed`` is its msgpack form, as sent)."""
        self._log.append((delta["prev"], delta["version"], packed))

    def since(self, version: int, current: int) -> MapDelta | None:
        """One delta taking a map at ``version`` to ``current``, or None when the log does not reach
        back that far (the caller sends a snapshot instead)."""
        if version > current:
            return None
        picked = [packed for prev, v, packed in self._log if v > version or (v == version == prev)]
        if version == current and not picked:
            return {"prev": version, "version": current, "ranges": [], "removed": [], "servers": {}}
        if not picked:
            return None
        first = msgpack.unpackb(picked[0], raw=False, strict_map_key=False)
        if first["prev"] > version:
            return None  # a delta in between has left the log
        return fold([first] + [msgpack.unpackb(p, raw=False, strict_map_key=False) for p in picked[1:]])
