"""Table settings on the coordinator: TTL and reserved throughput (``rangetable table set``).

Stored in the meta store under ``tableset/<table lower>`` (a table with nothing set has no key),
changed by :func:`coordinator.control.operations.set_table`,
committed with the table's creation and deleted with it. Partition servers learn them, with a
version, from every ``load`` command, from a ``table_settings`` command sent to every live server
when a user changes them (the change is answered once every server applied it), and from a lease
answer whenever a heartbeat reports an older version.

The capacity part: once a second (at most), while some table has reserved throughput,
:meth:`TableSettings.refresh` splits each reservation over the table's ranges by their demand
(:mod:`coordinator.map.capacity`) and the lease answers carry each server its ranges' shares. The same
pass sums each table's used and refused entities/s: the per-table metrics.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from coordinator.map.capacity import smooth, split_reservation
from rangetable.table_settings import describe

if TYPE_CHECKING:
    from coordinator.map.partition_map import PartitionMap
    from coordinator.map.server_info import ServerInfo

PREFIX = b"tableset/"
REFRESH_S = 1.0
VERSION_BITS = 32  # a settings version is term << 32 plus the changes made in that term
DIRECTIONS = (("reads", 0), ("writes", 1))


def settings_key(table: str) -> bytes:
    """Meta-store key of a table's settings (case-insensitive)."""
    return PREFIX + table.lower().encode()


class TableSettings:
    """Every table's settings (by lower-case name), their version, and the capacity shares."""

    def __init__(self) -> None:
        self.by_table: dict[str, dict] = {}
        self.version = 0
        self.shares: dict[str, list[float]] = {}  # range id -> [reads/s, writes/s]
        self.usage: dict[str, dict[str, float]] = {}  # table lower -> used/refused reads/writes per second
        self._demand: dict[tuple[str, int], float] = {}  # (range id, direction) -> smoothed demand
        self._refreshed = 0.0

    def load(self, items: list[tuple[bytes, Any]], term: int = 0) -> None:
        """Install the settings stored in the meta store (at the takeover of ``term``). Their version starts at
        ``term << 32``: a partition server keeps the newest version it saw, so a new leader's must be above every
        version of the leaders before it (else the servers ignore its changes until its count catches up)."""
        self.by_table = {k[len(PREFIX):].decode(): dict(v) for k, v in items if k.startswith(PREFIX)}
        self.version = max(self.version + 1, term << VERSION_BITS)

    def of(self, table: str) -> dict:
        """A table's settings (``{}``: none)."""
        return self.by_table.get(table.lower(), {})

    def put(self, table: str, settings: dict) -> tuple[dict, list]:
        """Set a table's settings in memory; returns the meta-store writes that persist them."""
        key, lower = settings_key(table), table.lower()
        self.version += 1
        if settings:
            self.by_table[lower] = settings
            return {key: settings}, []
        self.by_table.pop(lower, None)
        return {}, [key]

    def message(self) -> Any:
        """The fields that give a partition server the settings: ``settings`` and ``settings_v``."""
        return {"settings": self.by_table, "settings_v": self.version}

    def show(self, table: str) -> dict[str, Any]:
        """A table's settings and its capacity metrics, as ``get_table`` answers them."""
        s = self.of(table)
        return {**describe(s), "ttl_s": s.get("ttl_s", 0), "usage": self.usage.get(table.lower(), {})}

    def lease_fields(self, server: str, known_version: Any, pmap: PartitionMap) -> dict[str, Any]:
        """What a lease answer adds for ``server``: the settings when its ``known_version`` is behind,
        and its ranges' shares while some table has reserved throughput."""
        out: dict[str, Any] = {}
        if known_version != self.version:
            out.update(self.message())
        if self.shares:
            out["shares"] = {rid: self.shares[rid] for rid in pmap.primary_ids(server) if rid in self.shares}
        return out

    def refresh(self, pmap: PartitionMap, servers: dict[str, ServerInfo], now: float | None = None) -> None:
        """Split every reservation over its table's ranges by their demand (at most once per
        :data:`REFRESH_S`), and sum each table's usage."""
        now = time.monotonic() if now is None else now
        if now - self._refreshed < REFRESH_S:
            return
        self._refreshed = now
        reserved = {t: s for t, s in self.by_table.items() if s.get("reads") or s.get("writes")}
        if not reserved:
            self.shares, self.usage, self._demand = {}, {}, {}
            return
        loads: dict[str, dict] = {}
        for info in servers.values():
            if info.alive:
                loads.update(info.load)
        shares: dict[str, list[float]] = {}
        usage: dict[str, dict[str, float]] = {}
        demand: dict[tuple[str, int], float] = {}
        for table, s in reserved.items():
            rids = [r["id"] for r in pmap.ranges_of(table)]
            use = usage[table] = {}
            for name, d in DIRECTIONS:
                per: dict[str, float] = {}
                for rid in rids:
                    ld = loads.get(rid, {})
                    used, refused = ld.get(f"used_{name}_s", 0.0), ld.get(f"refused_{name}_s", 0.0)
                    use[f"used_{name}_s"] = use.get(f"used_{name}_s", 0.0) + used
                    use[f"refused_{name}_s"] = use.get(f"refused_{name}_s", 0.0) + refused
                    per[rid] = demand[(rid, d)] = smooth(self._demand.get((rid, d)), used + refused)
                for rid, share in split_reservation(float(s.get(name, 0)), per).items():
                    shares.setdefault(rid, [0.0, 0.0])[d] = round(share, 1)
            for rid in rids:
                shares.setdefault(rid, [0.0, 0.0])
        self.shares, self.usage, self._demand = shares, usage, demand

