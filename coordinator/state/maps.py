"""The partition map as the coordinator holds it: the one place its changes are committed and published.

:class:`MapService` owns the map (:class:`~coordinator.map.partition_map.PartitionMap`), the lock every
thread takes to read or change it, the meta store of the term this coordinator leads, the table settings,
and what the next published delta carries. A change is committed to the meta store (one synced write)
*before* anything acts on it, then the loop is asked to publish it (:meth:`MapService.commit`); the loop
packs it into the next numbered delta (:meth:`MapService.next_delta`, the ZeroMQ guide's *Clone* pattern).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from coordinator.map.claims import CLAIM_PREFIX, SOURCE_CLAIM_PREFIX, Claims
from coordinator.map.deltas import DeltaLog, PendingChanges, build_delta
from coordinator.map.geo_role import ROLE_KEY, GeoRole
from coordinator.map.partition_map import PartitionMap
from coordinator.map.source_cuts import COPY_PREFIX, CUT_PREFIX, SourceCuts
from coordinator.map.table_settings import TableSettings
from rangetable import protocol

if TYPE_CHECKING:
    from coordinator.map.server_info import ServerInfo
    from coordinator.meta.store_like import MetaStoreLike
    from rangetable.messages import MapDelta, RangeRecord


LOCK_WAIT_S = 0.05  # the loop thread waits this long for the map's lock (MapService.briefly)


class MapService:
    """The map, its lock, the meta store and its commits, table settings, and the deltas published.

    ``notify`` hands frames to the coordinator's loop thread (``[b"publish"]`` after every commit).
    Every attribute is read and changed under :attr:`lock` (an RLock: a commit may nest in a change).
    """

    def __init__(self, notify: Callable[[list[bytes]], None]) -> None:
        self.lock = threading.RLock()
        self.meta: MetaStoreLike | None = None  # opened when this coordinator wins a term (takeover)
        self.pmap = PartitionMap.load([])
        self.table_settings = TableSettings()  # TTLs and reserved throughput (loaded at takeover)
        self.claims = Claims()  # who applies each index's changes (numbers loaded at takeover)
        self.source_claims = Claims(SOURCE_CLAIM_PREFIX)  # a secondary cluster: who applies each table's source
        self.cuts = SourceCuts()  # a secondary cluster: the cut each table is read at
        self.geo = GeoRole()  # primary, fenced or secondary (loaded at takeover)
        self.changes = PendingChanges()  # what the next published delta carries
        self.deltas = DeltaLog()
        self.published = self.pmap.version
        self.commits = 0  # commits so far (a commit without a new version is a new map state too)
        self._notify = notify

    @contextmanager
    def briefly(self) -> Iterator[bool]:
        """The map's lock for the ``with`` block if it comes within :data:`LOCK_WAIT_S` (yields True), else
        nothing held (yields False). The coordinator's loop thread takes the lock only this way: a commit holds
        it for as long as the meta store takes — up to its timeout when the etcd member it writes to is cut off —
        and a loop waiting there answered no heartbeat, so every partition server's lease lapsed (the netsplit
        drill). The commit that asks for a publish usually still holds it for a moment, hence the short wait."""
        got = self.lock.acquire(timeout=LOCK_WAIT_S)
        try:
            yield got
        finally:
            if got:
                self.lock.release()

    def meta_store(self) -> MetaStoreLike:
        """The meta store of the term this coordinator leads (opened at takeover, before any request
        other than a heartbeat is handled); raises RuntimeError on a standby, which has none."""
        meta = self.meta
        if meta is None:
            raise RuntimeError("this coordinator leads no term: it has no meta store open")
        return meta

    def take_over(self, meta: MetaStoreLike, pmap: PartitionMap, settings: list[tuple[bytes, Any]],
                  term: int = 0, geo_seed: dict[str, Any] | None = None) -> None:
        """Hold the map, table settings and geo role loaded from ``meta`` at a takeover of ``term`` (under
        :attr:`lock`); ``geo_seed``: the source a cluster started with ``--secondary-of`` follows until a role is
        persisted."""
        with self.lock:
            self.meta, self.pmap = meta, pmap
            self.table_settings.load(settings, term)
            now = time.monotonic()
            self.claims.load(meta.items(CLAIM_PREFIX), now)
            self.source_claims.load(meta.items(SOURCE_CLAIM_PREFIX), now)
            self.cuts.load(meta.items(CUT_PREFIX) + meta.items(COPY_PREFIX), now)
            self.geo.load(dict(meta.items(ROLE_KEY)).get(ROLE_KEY), geo_seed)
            self.published = pmap.version

    def commit(self, writes: tuple[dict, list]) -> None:
        """Persist a map change, then ask the loop to publish the new map."""
        puts, deletes = writes
        self.meta_store().commit(puts, deletes)
        with self.lock:
            self.commits += 1
            self.changes.note_writes(puts, deletes)
        self._notify([b"publish"])

    def commit_version(self, puts: dict[bytes, Any]) -> None:
        """Persist ``puts`` with the next map version (servers registered or declared dead: no record changes)."""
        with self.lock:
            self.pmap.version += 1
            self.commit(({**puts, b"meta/version": self.pmap.version}, []))

    def map_key(self) -> tuple[int, int]:
        """What identifies the current map state (its version, and the commits without a new version)."""
        return self.pmap.version, self.commits

    def next_delta(self, servers: Mapping[str, ServerInfo]) -> bytes | None:
        """What changed since the last delta, packed as the next delta and kept for ``map {since}``
        (None when nothing did); ``servers`` gives the endpoints of the servers that changed."""
        with self.lock:
            if self.pmap.version == self.published and not (
                    self.changes.ranges or self.changes.servers or self.changes.tables or self.changes.indexes):
                return None
            endpoints = {sid: (s.endpoint if s.alive and s.endpoint else None)
                         for sid in self.changes.servers if (s := servers.get(sid)) is not None}
            records = cast("dict[str, RangeRecord]", self.pmap.ranges)  # the map's records, as published
            delta = build_delta(self.published, self.pmap.version, self.changes.take(), records,
                                endpoints, sorted(self.pmap.tables.values()), self.pmap.indexes)
            packed = protocol.pack(delta)
            self.deltas.add(delta, packed)
            self.published = self.pmap.version
        return packed

    def delta_since(self, version: int) -> MapDelta | None:
        """The published changes since ``version`` folded into one delta (None when too old)."""
        with self.lock:
            return self.deltas.since(version, self.published)
