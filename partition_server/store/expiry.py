"""Table TTL in a range store: expired entities hidden from every read, and reclaimed in the background.

Hiding needs nothing stored: :func:`live_get` wraps the store's reads so that an entity whose
Timestamp fails :func:`rangetable.table_settings.expired` reads as absent (a get, the current entity a
write or transaction looks at), and scans skip it (``oldest`` in
:func:`partition_server.store.range_scan.scan_span`). So a TTL set, changed or removed takes effect on the
next read, and conditions and counters see exactly what a get sees.

Reclaiming must cost in proportion to what expired, not to the table, and rocksdict has no
compaction filter (stack notes §1). So while a table has a TTL, every write of a range store also
puts one **expiry index** entry ``INDEX_PREFIX + >Q ts + tag + first key`` → ``msgpack([key, …])``
listing the keys it wrote at Timestamp ``ts`` (a transaction of 100 entities adds one entry, not
100). Index keys sort by Timestamp, so :func:`reclaim_step` reads only the entries older than the
TTL: it deletes each listed key whose *current* value is expired (an entity rewritten since is
left alone: its newer write has an entry of its own) and then the entry. The index is never updated
on an overwrite, so it holds one entry per write within the TTL window.

An index begins when a range first learns its table has a TTL (:data:`MARK_KEY` records that, with a
backfill cursor): the entities already there are indexed by :func:`backfill_step`, a one-off scan of
the range (the only step whose cost grows with the table). Removing the TTL drops the index with one
range delete. Index entries are meta keys: a split keeps them in both halves (a key of the other
half reads as absent and its entry is simply dropped), a merge unites them (the tag and first key
keep entries of both sides apart) and, unless both backfills were done, backfills the union again
(:func:`merged_mark`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import msgpack
import rocksdict

from partition_server.store.fast_path import stored_ts
from rangetable import protocol
from rangetable.keys import META_PREFIX
from rangetable.table_settings import oldest_live

INDEX_PREFIX = META_PREFIX + b"x/"  # + >Q ts + tag + first key -> msgpack [key, ...]
INDEX_END = META_PREFIX + b"x0"  # the byte after "/": the end of the index span
MARK_KEY = META_PREFIX + b"xmark"  # msgpack [backfill cursor (bytes) or None when done, Timestamp it began]
WRITE_TAG = b"w"  # an entry of a write
BACKFILL_TAG = b"b"  # an entry of the backfill
BACKFILL_GROUP = 100  # entities per backfill entry
_TS = struct.Struct(">Q")


def live_get(get: Callable[[Any], Any], oldest: int) -> Callable[[Any], Any]:
    """``get`` (one key, or a list of keys as rocksdict's multi-get takes them) answering None for a
    stored value whose Timestamp is below ``oldest`` (:func:`rangetable.table_settings.oldest_live`)."""

    def read(key: Any) -> Any:
        v = get(key)
        if type(key) is list:
            return [x if x is None or stored_ts(x) >= oldest else None for x in v]
        return v if v is None or stored_ts(v) >= oldest else None

    return read


def index_entry(ts: int, keys: list[bytes], tag: bytes = WRITE_TAG) -> tuple[bytes, bytes]:
    """The index entry (key, value) of ``keys`` written at ``ts`` (``keys`` not empty)."""
    return INDEX_PREFIX + _TS.pack(ts) + tag + keys[0], protocol.pack(keys)


def entry_ts(index_key: bytes) -> int:
    """The Timestamp of an index entry's key."""
    return _TS.unpack_from(index_key, len(INDEX_PREFIX))[0]


def reclaim_step(db: Any, wb: Any, oldest: int, max_keys: int = 2000,
                 gone: list[tuple[bytes, bytes]] | None = None) -> tuple[int, int, int]:
    """Put into ``wb`` the deletes of the expired entities (Timestamp below ``oldest``) listed by the
    oldest index entries, and of those entries, until about ``max_keys`` keys were looked at; each deleted
    key and the value it had go to ``gone`` when given (the change feed's expiries).

    Returns (entries consumed, entities deleted, their bytes). The caller writes ``wb`` under the
    store's write lock, so no write slips between the check and the delete.
    """
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(INDEX_PREFIX + _TS.pack(oldest))  # entries older than the TTL only
    ro.fill_cache(False)  # type: ignore[call-arg]  # the stub is wrong: it takes a bool
    entries: list[bytes] = []
    keys: list[bytes] = []
    it = db.items(from_key=INDEX_PREFIX, read_opt=ro)
    try:
        for k, v in it:
            entries.append(k)
            keys.extend(msgpack.unpackb(v))
            if len(keys) >= max_keys:
                break
    finally:
        it = None  # a live iterator would keep the DB LOCK after close()
    deleted = nbytes = 0
    keys = list(dict.fromkeys(keys))  # a key listed by two entries (a merge backfilled again) counts once
    if keys:
        for key, cur in zip(keys, db.get(keys), strict=True):
            if cur is not None and stored_ts(cur) < oldest:
                wb.delete(key)
                if gone is not None:
                    gone.append((key, cur))
                deleted += 1
                nbytes += len(key) + len(cur)
    for k in entries:
        wb.delete(k)
    return len(entries), deleted, nbytes


def backfill_step(db: Any, wb: Any, cursor: bytes, before: int, max_keys: int = 10_000) -> bytes | None:
    """Index up to ``max_keys`` entities from ``cursor`` on that were written before ``before`` (later
    ones have entries of their own), as entries of :data:`BACKFILL_GROUP` keys in Timestamp order;
    returns the cursor to go on from, None when the range is done."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(META_PREFIX)
    ro.fill_cache(False)  # type: ignore[call-arg]  # the stub is wrong: it takes a bool
    found: list[tuple[int, bytes]] = []
    nxt: bytes | None = None
    it = db.items(from_key=cursor, read_opt=ro)
    try:
        for k, v in it:
            if len(found) >= max_keys:
                nxt = k
                break
            ts = stored_ts(v)
            if ts < before:
                found.append((ts, k))
    finally:
        it = None
    found.sort()
    for i in range(0, len(found), BACKFILL_GROUP):
        group = found[i:i + BACKFILL_GROUP]
        key, value = index_entry(group[-1][0], [k for _, k in group], BACKFILL_TAG)  # the newest decides
        wb.put(key, value)
    return nxt


def read_mark(db: Any) -> tuple[bool, bytes | None, int]:
    """(whether the range keeps an index, the backfill cursor or None when done, the Timestamp the
    index began at)."""
    v = db.get(MARK_KEY)
    if v is None:
        return False, None, 0
    cursor, since = msgpack.unpackb(v)
    return True, cursor, since


def pack_mark(cursor: bytes | None, since: int) -> bytes:
    """The value of :data:`MARK_KEY`."""
    return protocol.pack([cursor, since])


def merged_mark(left: bytes | None, right: bytes | None) -> bytes | None:
    """The :data:`MARK_KEY` value of the union of two ranges with these marks (None: no index). Both
    backfills done: done. Otherwise the merged range backfills again from its start, up to the later
    of the two beginnings, so a half that was still indexing (or kept no index) is covered; entities
    indexed twice cost a second look when they expire, nothing more."""
    if left is None and right is None:
        return None
    marks = [msgpack.unpackb(m) for m in (left, right) if m is not None]
    since = max(m[1] for m in marks)
    if len(marks) == 2 and all(m[0] is None for m in marks):
        return pack_mark(None, since)
    return pack_mark(b"", since)


def index_stats(db: Any) -> int:
    """How many index entries the range holds (a scan of the index: for tests and benchmarks)."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(INDEX_END)
    it = db.keys(from_key=INDEX_PREFIX, read_opt=ro)
    try:
        return sum(1 for _ in it)
    finally:
        it = None


class Expiry:
    """A range store's TTL state: the TTL (ticks, 0 = none) and its expiry index's progress. The
    store calls every method under its write lock and writes the batch it passes."""

    __slots__ = ("ttl", "indexing", "cursor", "since", "reclaimed", "reclaimed_bytes")

    def __init__(self, db: Any) -> None:
        self.ttl = 0
        self.indexing, self.cursor, self.since = read_mark(db)
        self.reclaimed = 0  # entities deleted since open
        self.reclaimed_bytes = 0

    def oldest(self, now: int) -> int:
        """The smallest live Timestamp at ``now`` (0: nothing expires)."""
        return oldest_live(self.ttl, now)

    def reader(self, get: Callable[[Any], Any], now: int) -> Callable[[Any], Any]:
        """``get`` hiding expired entities (``get`` itself without a TTL)."""
        return live_get(get, oldest_live(self.ttl, now)) if self.ttl else get

    def configure(self, wb: Any, ttl: int, last_ts: int) -> None:
        """Apply a TTL of ``ttl`` ticks: start an index (and its backfill of the entities written up
        to ``last_ts``) when there was none, drop it when the TTL is removed."""
        self.ttl = ttl
        if ttl and not self.indexing:
            # a store that never wrote (a new table's range) has nothing to backfill
            self.indexing, self.cursor, self.since = True, (b"" if last_ts else None), last_ts + 1
            wb.put(MARK_KEY, pack_mark(self.cursor, self.since))
        elif not ttl and self.indexing:
            self.indexing, self.cursor = False, None
            wb.delete_range(INDEX_PREFIX, INDEX_END)
            wb.delete(MARK_KEY)

    def note_write(self, wb: Any, ts: int, keys: list[bytes]) -> None:
        """Index the ``keys`` a write puts at ``ts`` (nothing unless indexing, or for no keys)."""
        if self.indexing and keys:
            wb.put(*index_entry(ts, keys))

    @property
    def due(self) -> bool:
        """True when the store has a TTL, hence work for :meth:`step` (maybe none expired yet)."""
        return self.ttl > 0

    def step(self, db: Any, wb: Any, now: int, max_keys: int = 2000,
             gone: list[tuple[bytes, bytes]] | None = None) -> tuple[int, int]:
        """One bounded step of background work into ``wb``: the backfill while it runs, else
        reclaiming expired entities (each deleted key and its value to ``gone``). Returns (entities
        deleted, their bytes)."""
        if not self.ttl:
            return 0, 0
        if self.cursor is not None:
            self.cursor = backfill_step(db, wb, self.cursor, self.since, max_keys * 5)
            wb.put(MARK_KEY, pack_mark(self.cursor, self.since))
            return 0, 0
        _, deleted, nbytes = reclaim_step(db, wb, oldest_live(self.ttl, now), max_keys, gone)
        self.reclaimed += deleted
        self.reclaimed_bytes += nbytes
        return deleted, nbytes
