"""The partition map and table catalog: pure data, with the invariants that must always hold.

A range record is a dict ``{"id", "table", "low", "high", "primary", "epoch", "path", "state"}``:
PartitionKey bounds ``[low, high)`` (``high`` None = unbounded), the owning server id (or None while
unassigned), an epoch that grows on every change of primary or bounds, the range's directory relative
to the data root, and ``state`` (``serving``, or ``moving`` / ``splitting`` / ``merging`` while an
operation holds it). The map has a version that grows on every change.

Every mutation returns the meta-store writes that persist it (``puts``, ``deletes``), so the
coordinator commits the change durably before acting on it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from coordinator.map.indexes import INDEX_PREFIX, index_key
from rangetable.errors import TableError
from rangetable.index_def import is_index_table

Writes = tuple[dict[bytes, Any], list[bytes]]


def with_primary(rec: dict) -> dict:
    """A range record as stored now: one written up to 9e6edd7, which named the primary ``owner``, reads the same."""
    if "owner" in rec:
        rec = {("primary" if k == "owner" else k): v for k, v in rec.items()}
    return rec


def range_key(rid: str) -> bytes:
    """Meta-store key of a range record."""
    return b"range/" + rid.encode()


def table_key(name: str) -> bytes:
    """Meta-store key of a catalog entry (case-insensitive)."""
    return b"table/" + name.lower().encode()


def creator_key(name: str) -> bytes:
    """Meta-store key of the request id that created a table (its retries are answered as done)."""
    return b"tablerid/" + name.lower().encode()


@dataclass
class PartitionMap:
    """Tables, ranges, the map version and the id counter."""

    tables: dict[str, str] = field(default_factory=dict)  # lower-case name -> name as created
    creators: dict[str, str] = field(default_factory=dict)  # lower-case name -> request id that created it
    ranges: dict[str, dict] = field(default_factory=dict)
    indexes: dict[str, list[dict]] = field(default_factory=dict)  # base table lower -> definitions (wire), by name
    version: int = 0
    next_id: int = 1
    # Indexes kept by every mutation below, so per-heartbeat questions cost O(the server's ranges),
    # not O(the map): range ids per primary, ids of ranges held by an operation (not serving), and ids of
    # ranges with a replica move under way (asked about every second).
    _as_primary: dict[str | None, set[str]] = field(default_factory=dict, repr=False, compare=False)
    _followed: dict[str, set[str]] = field(default_factory=dict, repr=False, compare=False)  # replicas, not primary
    _busy: set[str] = field(default_factory=set, repr=False, compare=False)
    _moving: set[str] = field(default_factory=set, repr=False, compare=False)
    _stamp: int = field(default=0, repr=False, compare=False)  # grows on every index change
    _primary_stamp: dict[str | None, int] = field(default_factory=dict, repr=False, compare=False)

    # --- indexes ------------------------------------------------------------------------------

    def _index(self, rec: dict) -> None:
        self._touch(rec["primary"])
        self._as_primary.setdefault(rec["primary"], set()).add(rec["id"])
        for sid in rec.get("replicas", ()):
            if sid != rec["primary"]:
                self._touch(sid)
                self._followed.setdefault(sid, set()).add(rec["id"])
        if rec["state"] != "serving":
            self._busy.add(rec["id"])
        if rec.get("move"):
            self._moving.add(rec["id"])

    def _touch(self, primary: str | None) -> None:
        self._stamp += 1
        self._primary_stamp[primary] = self._stamp

    def primary_stamp(self, server: str | None) -> int:
        """A number that changes whenever a range of this server (or one leaving it) changes, so a
        caller can tell "nothing changed for this server" without looking at its ranges."""
        return self._primary_stamp.get(server, 0)

    def _unindex(self, rec: dict) -> None:
        self._touch(rec["primary"])
        ids = self._as_primary.get(rec["primary"])
        if ids is not None:
            ids.discard(rec["id"])
            if not ids:
                del self._as_primary[rec["primary"]]
        for sid in rec.get("replicas", ()):
            followed = self._followed.get(sid)
            if followed is not None:
                self._touch(sid)
                followed.discard(rec["id"])
                if not followed:
                    del self._followed[sid]
        self._busy.discard(rec["id"])
        self._moving.discard(rec["id"])

    def reindex(self) -> None:
        """Rebuild the primary, busy and moving indexes (after records were changed in place)."""
        self._as_primary, self._busy, self._followed, self._moving = {}, set(), {}, set()
        for primary in list(self._primary_stamp):
            self._touch(primary)
        for r in self.ranges.values():
            self._index(r)

    # --- queries ------------------------------------------------------------------------------

    def table_name(self, name: str) -> str:
        """The table's name as created; raises TableNotFound."""
        try:
            return self.tables[name.lower()]
        except KeyError:
            raise TableError("TableNotFound") from None

    def user_table(self, name: str) -> str:
        """A user's table as created; TableNotFound for it and for an index's table."""
        if is_index_table(name):
            raise TableError("TableNotFound")
        return self.table_name(name)

    def user_tables(self) -> list[str]:
        """The users' tables as created, by name (never an index's)."""
        return sorted((t for t in self.tables.values() if not is_index_table(t)), key=str.lower)

    def indexes_of(self, table: str) -> list[dict]:
        """A table's index definitions (wire form), by name."""
        return self.indexes.get(table.lower(), [])

    def ranges_of(self, table: str) -> list[dict]:
        """The ranges of a table in key order."""
        key = table.lower()
        return sorted((r for r in self.ranges.values() if r["table"].lower() == key), key=lambda r: r["low"])

    def range_for(self, table: str, pk: str) -> dict:
        """The range holding a PartitionKey."""
        rs = self.ranges_of(table)
        i = bisect.bisect_right([r["low"] for r in rs], pk) - 1
        if i < 0:
            raise TableError("TableNotFound")
        return rs[i]

    def primary_ranges(self, server: str) -> list[dict]:
        """Ranges assigned to a server."""
        return [self.ranges[rid] for rid in self._as_primary.get(server, ())]

    def followed_by(self, server: str) -> list[dict]:
        """Replicated ranges a server holds a replica of without being their primary."""
        return [self.ranges[rid] for rid in self._followed.get(server, ())]

    def replica_count(self, server: str) -> int:
        """How many ranges a server holds a copy of (as primary or follower; O(1))."""
        return len(self._as_primary.get(server, ())) + len(self._followed.get(server, ()))

    def primary_ids(self, server: str | None) -> list[str]:
        """Ids of the ranges a server owns (None: the unassigned ones)."""
        return list(self._as_primary.get(server, ()))

    def primary_count(self, server: str | None) -> int:
        """How many ranges a server owns (O(1))."""
        return len(self._as_primary.get(server, ()))

    def primaries(self) -> list[str | None]:
        """Every primary that holds at least one range (None: unassigned ranges)."""
        return list(self._as_primary)

    def busy_ids(self) -> set[str]:
        """Ids of the ranges an operation holds (state other than ``serving``)."""
        return self._busy

    def moving_ids(self) -> set[str]:
        """Ids of the ranges with a replica move under way (``move`` in their record)."""
        return self._moving

    def snapshot(self) -> dict:
        """The whole map as plain data (for frontends and the CLI)."""
        return {
            "version": self.version,
            "tables": sorted(self.tables.values()),
            "ranges": sorted(self.ranges.values(), key=lambda r: (r["table"].lower(), r["low"])),
            "indexes": dict(self.indexes),
        }

    def check(self) -> list[str]:
        """Violations of the map invariants (empty when the map is valid).

        Per table: ranges disjoint, covering ["", ∞) with no gap, bounds never inside a
        PartitionKey (they are PartitionKeys, so that holds by construction); every range of a
        known table; ids unique (dict keys).
        """
        problems = []
        for name in self.tables.values():
            rs = self.ranges_of(name)
            if not rs:
                problems.append(f"table {name} has no ranges")
                continue
            if rs[0]["low"] != "":
                problems.append(f"table {name}: first range starts at {rs[0]['low']!r}")
            for a, b in zip(rs, rs[1:], strict=False):
                if a["high"] != b["low"]:
                    problems.append(f"table {name}: {a['id']} ends at {a['high']!r}, {b['id']} starts at {b['low']!r}")
            if rs[-1]["high"] is not None:
                problems.append(f"table {name}: last range ends at {rs[-1]['high']!r}")
        for r in self.ranges.values():
            if r["table"].lower() not in self.tables:
                problems.append(f"range {r['id']} belongs to unknown table {r['table']}")
            if r["high"] is not None and not r["low"] < r["high"]:
                problems.append(f"range {r['id']} is empty: [{r['low']!r}, {r['high']!r})")
        return problems

    # --- mutations (each returns its meta-store writes) -----------------------------------------

    def _bump(self, puts: dict[bytes, Any]) -> None:
        self.version += 1
        puts[b"meta/version"] = self.version
        puts[b"meta/next_id"] = self.next_id

    def new_range(self, table: str, low: str, high: str | None, primary: str | None, epoch: int = 1) -> dict:
        """A fresh range record with a new id (not yet in the map)."""
        rid = f"r{self.next_id:06d}"
        self.next_id += 1
        return {
            "id": rid,
            "table": table,
            "low": low,
            "high": high,
            "primary": primary,
            "epoch": epoch,
            "path": f"ranges/{rid}",
            "state": "serving",
        }

    def create_table(self, name: str, primary: str | None, rid: str | None = None) -> tuple[dict, Writes]:
        """Add a table with one range covering the whole key space. ``rid``, the request's id, is kept
        with it, so a retry of the same request can be told from another creator (:meth:`created_by`)."""
        if name.lower() in self.tables:
            raise TableError("TableAlreadyExists")
        self.tables[name.lower()] = name
        rec = self.new_range(name, "", None, primary)
        self.ranges[rec["id"]] = rec
        self._index(rec)
        puts: dict[bytes, Any] = {table_key(name): name, range_key(rec["id"]): rec}
        if rid:
            self.creators[name.lower()] = rid
            puts[creator_key(name)] = rid
        self._bump(puts)
        return rec, (puts, [])

    def created_by(self, name: str, rid: str | None) -> bool:
        """True when the table ``name`` exists and the request ``rid`` created it (a retry of it)."""
        return bool(rid) and self.creators.get(name.lower()) == rid

    def delete_table(self, name: str) -> tuple[list[dict], Writes]:
        """Remove a table and its ranges; returns the removed ranges (their directories are garbage)."""
        real = self.tables.pop(name.lower(), None)
        if real is None:
            raise TableError("ResourceNotFound")
        gone = self.ranges_of(real)
        for r in gone:
            del self.ranges[r["id"]]
            self._unindex(r)
        puts: dict[bytes, Any] = {}
        self._bump(puts)
        deletes = [table_key(real)] + [range_key(r["id"]) for r in gone]
        if self.creators.pop(real.lower(), None) is not None:
            deletes.append(creator_key(real))
        return gone, (puts, deletes)

    def put_index(self, d: dict) -> Writes:
        """Add or replace an index definition (wire form)."""
        self._set_index(d)
        puts: dict[bytes, Any] = {index_key(d["table"], d["name"]): d}
        self._bump(puts)
        return puts, []

    def drop_index(self, table: str, name: str) -> Writes:
        """Remove an index definition."""
        self._unset_index(table.lower(), name.lower())
        puts: dict[bytes, Any] = {}
        self._bump(puts)
        return puts, [index_key(table, name)]

    def _set_index(self, d: dict) -> None:
        low = d["table"].lower()
        defs = [x for x in self.indexes.get(low, []) if x["name"].lower() != d["name"].lower()] + [d]
        self.indexes[low] = sorted(defs, key=lambda x: x["name"].lower())

    def _unset_index(self, table: str, name: str) -> None:
        defs = [x for x in self.indexes.get(table, []) if x["name"].lower() != name]
        if defs:
            self.indexes[table] = defs
        else:
            self.indexes.pop(table, None)

    def update(self, rec: dict, **changes: Any) -> Writes:
        """Change fields of a range; a new primary or new bounds bump its epoch (``epoch`` sets it)."""
        cur = self.ranges[rec["id"]]
        if any(k in changes and changes[k] != cur[k] for k in ("primary", "low", "high")) and "epoch" not in changes:
            cur["epoch"] += 1
        self._unindex(cur)
        cur.update(changes)
        self._index(cur)
        puts: dict[bytes, Any] = {range_key(cur["id"]): cur}
        self._bump(puts)
        return puts, []

    def replace(self, old: list[dict], new: list[dict]) -> Writes:
        """Swap ranges for others covering the same keys (the commit point of a split or merge)."""
        lo_old = min(r["low"] for r in old)
        lo_new = min(r["low"] for r in new)
        if lo_old != lo_new:
            raise ValueError("replacement must cover the same key span")
        for r in old:
            self._unindex(self.ranges.pop(r["id"]))
        puts: dict[bytes, Any] = {}
        for r in new:
            self.ranges[r["id"]] = r
            self._index(r)
            puts[range_key(r["id"])] = r
        self._bump(puts)
        return puts, [range_key(r["id"]) for r in old]

    @classmethod
    def from_snapshot(cls, snap: dict) -> PartitionMap:
        """A map rebuilt from :meth:`snapshot` output (to check invariants from outside)."""
        pm = cls(version=snap["version"])
        pm.tables = {t.lower(): t for t in snap["tables"]}
        pm.ranges = {r["id"]: dict(r) for r in snap["ranges"]}
        pm.indexes = {t: list(ds) for t, ds in snap.get("indexes", {}).items()}
        pm.reindex()
        return pm

    @classmethod
    def load(cls, items: list[tuple[bytes, Any]]) -> PartitionMap:
        """Rebuild the map from meta-store items."""
        pm = cls()
        for k, v in items:
            if k.startswith(b"table/"):
                pm.tables[k[6:].decode()] = v
            elif k.startswith(b"tablerid/"):
                pm.creators[k[9:].decode()] = v
            elif k.startswith(b"range/"):
                pm.ranges[v["id"]] = with_primary(v)
            elif k.startswith(INDEX_PREFIX):
                pm._set_index(v)
            elif k == b"meta/version":
                pm.version = v
            elif k == b"meta/next_id":
                pm.next_id = v
        pm.reindex()
        return pm

    def apply(self, puts: dict[bytes, Any], deletes: list[bytes]) -> None:
        """Apply meta-store writes (decoded) as :meth:`load` would read them, keeping the indexes:
        how a standby follows the leader's store without rebuilding the map."""
        for k in deletes:
            if k.startswith(b"table/"):
                self.tables.pop(k[6:].decode(), None)
            elif k.startswith(b"tablerid/"):
                self.creators.pop(k[9:].decode(), None)
            elif k.startswith(b"range/"):
                old = self.ranges.pop(k[6:].decode(), None)
                if old is not None:
                    self._unindex(old)
            elif k.startswith(INDEX_PREFIX):
                table, _, name = k[len(INDEX_PREFIX):].decode().partition("/")
                self._unset_index(table, name)
        for k, v in puts.items():
            if k.startswith(b"table/"):
                self.tables[k[6:].decode()] = v
            elif k.startswith(b"tablerid/"):
                self.creators[k[9:].decode()] = v
            elif k.startswith(b"range/"):
                old = self.ranges.get(v["id"])
                if old is not None:
                    self._unindex(old)
                rec = with_primary(v)
                self.ranges[rec["id"]] = rec
                self._index(rec)
            elif k.startswith(INDEX_PREFIX):
                self._set_index(v)
            elif k == b"meta/version":
                self.version = v
            elif k == b"meta/next_id":
                self.next_id = v
