"""The coordinator's event log: splits, moves, merges, failovers, dead servers, hot keys, backups ….

:class:`EventLog` numbers every event, keeps the last :data:`~coordinator.map.server_info.MAX_EVENTS` in
memory and in the meta store (older ones are deleted in the same write), and counts events by kind since
the process started (for ``/metrics``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from coordinator.map.server_info import MAX_EVENTS

if TYPE_CHECKING:
    from coordinator.state.maps import MapService

log = logging.getLogger("rangetable.coordinator")


class EventLog:
    """Durable, numbered coordinator events; written under the map's lock into its meta store."""

    def __init__(self, maps: MapService) -> None:
        self._maps = maps
        self.recent: list[dict] = []  # the last MAX_EVENTS events, oldest first
        self.seq = 1  # the number of the next event
        self.counts: dict[str, int] = {}  # events by kind since this process started (metrics)

    def load(self, events: list[dict]) -> None:
        """Continue the log of the store a takeover loaded (``events``: its last ones, oldest first)."""
        with self._maps.lock:
            self.recent = events
            self.seq = (events[-1]["seq"] + 1) if events else 1

    def record(self, kind: str, **fields: Any) -> None:
        """Record an event (split, move, merge, failover, hot key …) durably."""
        self.record_many([{"kind": kind, **fields}])

    def record_many(self, items: list[dict]) -> None:
        """Record several events (each with its ``kind``) in one durable write."""
        with self._maps.lock:
            puts, deletes = {}, []
            evs = []
            for fields in items:
                ev = {"seq": self.seq, "time": time.time(), **fields}
                self.seq += 1
                self.recent.append(ev)
                self.counts[ev["kind"]] = self.counts.get(ev["kind"], 0) + 1
                evs.append(ev)
                puts[b"event/%012d" % ev["seq"]] = ev
            while len(self.recent) > MAX_EVENTS:
                old = self.recent.pop(0)
                puts.pop(b"event/%012d" % old["seq"], None)
                deletes.append(b"event/%012d" % old["seq"])
            self._maps.meta_store().commit(puts, deletes)
        for ev in evs:
            log.info("event %s", ev)

    def since(self, seq: int, limit: int) -> list[dict]:
        """The last ``limit`` events numbered after ``seq`` (none for ``limit`` <= 0)."""
        with self._maps.lock:
            return [e for e in self.recent if e["seq"] > seq][-limit:] if limit > 0 else []
