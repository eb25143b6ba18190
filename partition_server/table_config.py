"""What a partition server knows of its tables' settings (TTL, change feed, reserved throughput) and applies to
the ranges it serves.

The coordinator sends the settings of every table that has some, with a version, in three ways: with
each ``load`` command (so a range never serves before it knows its TTL), in a ``table_settings``
command when a user changes them (answered only once applied, so the change holds for reads when
``rangetable table set`` returns), and in a lease answer whenever the version the server reports in
its heartbeat is behind (a server that missed the command catches up within a heartbeat). Each
range's share of its table's reserved throughput comes with the lease answer (``shares``).
"""

from __future__ import annotations

from typing import Any

from partition_server.capacity import RangeCapacity
from partition_server.served import Served
from rangetable.table_settings import feed_settings, ttl_ticks


class TableConfig:
    """Table settings by lower-case table name, their version, and each range's capacity."""

    def __init__(self) -> None:
        self.settings: dict[str, dict] = {}
        self.version = -1  # none received yet
        self.capacity: dict[str, RangeCapacity] = {}  # range id -> its share (ranges of reserved tables only)
        self._shares: dict[str, tuple[float, float]] = {}

    def learn(self, msg: dict) -> bool:
        """Take ``settings`` (and ``settings_v``) from a command or lease answer if newer than what is
        known; True when they changed."""
        settings, version = msg.get("settings"), msg.get("settings_v")
        if not isinstance(settings, dict) or not isinstance(version, int) or version < self.version:
            return False
        changed = settings != self.settings
        self.settings, self.version = settings, version
        return changed

    def ttl_of(self, table: str) -> int:
        """The table's TTL in ticks (0: none)."""
        return ttl_ticks(int(self.settings.get(table.lower(), {}).get("ttl_s", 0)))

    def apply(self, rid: str, served: Served) -> None:
        """Give a served range its table's TTL, change-feed settings and capacity share."""
        served.store.set_ttl(self.ttl_of(served.record["table"]))
        served.store.set_feed(*feed_settings(self.settings.get(served.record["table"].lower(), {})))
        self._apply_share(rid, served.record["table"])

    def set_shares(self, shares: Any, open_ranges: dict[str, Served]) -> None:
        """Take ``{range id: [reads/s, writes/s]}`` (the ranges of reserved tables this server owns;
        ranges left out are unlimited) from a lease answer."""
        if not isinstance(shares, dict):
            return
        self._shares = {rid: (float(v[0]), float(v[1])) for rid, v in shares.items()}
        for rid, served in open_ranges.items():
            self._apply_share(rid, served.record["table"])
        for rid in [rid for rid in self.capacity if rid not in open_ranges]:
            del self.capacity[rid]

    def _apply_share(self, rid: str, table: str) -> None:
        """A range of a table with reserved throughput counts what it uses and refuses, limited to
        its share once the coordinator sent one (unlimited until then)."""
        s = self.settings.get(table.lower(), {})
        reads, writes = s.get("reads", 0), s.get("writes", 0)
        if not (reads or writes):
            self.capacity.pop(rid, None)
            return
        cap = self.capacity.get(rid)
        if cap is None:
            cap = self.capacity[rid] = RangeCapacity(table)
        r, w = self._shares.get(rid, (0.0, 0.0))
        cap.set_shares(r if reads else 0.0, w if writes else 0.0)

    def inherit(self, parents: list[str], children: list[str]) -> None:
        """New ranges made from ``parents`` (a split's halves, a merge's result) share the parents'
        capacity until the coordinator sends their own: a new range is never unlimited."""
        total = [0.0, 0.0]
        for rid in parents:
            r, w = self._shares.get(rid, (0.0, 0.0))
            total[0] += r
            total[1] += w
        if total != [0.0, 0.0]:
            for rid in children:
                self._shares[rid] = (total[0] / len(children), total[1] / len(children))

    def forget(self, rid: str) -> None:
        """A range stopped being served here."""
        self.capacity.pop(rid, None)
