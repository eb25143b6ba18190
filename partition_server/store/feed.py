"""A range's change feed: every entity change of its committed batches, kept on the replica's own disk.

The feed rides in the range's replicated log (``../shared/DESIGN.md``, "The log as the one mechanism"):
each write, transaction and TTL reclaim that changes entities puts, in the same RocksDB WriteBatch, one
**feed record** per changed entity, in the store's column family :data:`FAMILY`::

    FEED_PREFIX + >Q Timestamp + entity key  ->  kind (1 byte) + >I len(before) + before + value

``kind`` is what happened to the entity (the index in :data:`KINDS`: insert, replace, merge, delete,
expire), ``value`` the stored value after the change (``msgpack([ts, props])``; empty for a delete or an
expiry) and ``before`` the stored value before it, kept only when the table asks for before-images. The
value comes last, so the replica log sends it once although the batch writes it twice
(:func:`shared_tail`). Being ordinary keys of the
batch, records reach the followers with it, survive restarts, failovers and re-replication as the data
does, are copied into both halves of a split (each half reads only its own span) and united by a merge.

**A column family of their own.** Records are appended in Timestamp order and deleted only from the oldest
end (:func:`trim`). Kept among the entities, every memtable mixed both, so each L0 file spanned the whole key
space and every L0 → base compaction rewrote the feed's whole history with the entities (docs/scale.md,
"Where the time goes"). In a family of their own, each flush writes a file above every older one, which
compaction moves down without rewriting it. A record's key keeps its prefix, so the operations of a batch
(:data:`~partition_server.store.tee.Ops`) say by their keys alone which family they go to
(:func:`~partition_server.store.tee.add_op`); :func:`migrate` moves the records of a store written before.

**Positions.** A range hands out strictly increasing Timestamps, a split's halves and a merge's result
continue above their parents', and a new primary holds every committed batch: so ``(Timestamp, entity
key)`` orders a table's changes totally, per-key order included, whatever ranges served them. A cursor is
such a position (:func:`after_key`); a transaction's records share one Timestamp and one PartitionKey.

**Resolved Timestamp.** A range's last Timestamp ``R`` (:attr:`RangeStore.last_ts`) is a promise: no later
batch carries a Timestamp at or below it. A read answers ``R`` with the records up to it, and the partition
server sends that answer only once every batch it holds is committed (the read is held like any read of an
uncommitted write), so the records are committed and the promise survives a failover. An idle range moves
``R`` forward with a *close*: a batch that only advances its last Timestamp
(:meth:`RangeStore.close_timestamp`).

**Floor.** ``META_FEED`` holds ``[on, floor]``: whether the feed was on at the range's last write, and the
Timestamp at or below which records may be missing — raised when the feed is switched on again (the writes
while it was off are not in it) and by retention (:func:`trim`). A read from a position below the floor is
refused with ``FeedTrimmed``, never answered with a silent gap.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import msgpack
import rocksdict

from partition_server.store.counts import count_span
from partition_server.store.keys import META_FEED
from rangetable.edm import ticks_to_iso
from rangetable.errors import TableError
from rangetable.kernel.storage import column_family
from rangetable.keys import META_PREFIX
from rangetable.table_settings import DEFAULT_FEED_RETENTION_S, TICKS_PER_SECOND

FAMILY = "feed"  # the store's column family that holds the records
FEED_PREFIX = META_PREFIX + b"f/"
FEED_END = META_PREFIX + b"f0"  # the byte after "/": the end of the feed's span
_TS = struct.Struct(">Q")

INSERT, REPLACE, MERGE, DELETE, EXPIRE = "insert", "replace", "merge", "delete", "expire"
KINDS = (INSERT, REPLACE, MERGE, DELETE, EXPIRE)
_HEAD = struct.Struct(">BI")  # a record's kind and the length of its before-image
MAX_READ_BYTES = 4 << 20  # a read answers about this many bytes of records at most
MAX_SCANNED = 20_000  # records a read looks at, at most (a split's half skips its sibling's records)
FRESH_TICKS = 200_000  # 20 ms: a read without a hint closes a range whose last Timestamp is older
IDLE_TICKS = 5_000_000  # 0.5 s: a range that is read closes at least this often, idle or not


def record_kind(op: str, existed: bool, deleted: bool) -> str:
    """What a write operation ``op`` did to an entity, as the feed names it: an upsert of an absent
    entity is an insert, of a present one a replace (``insert_or_replace``) or merge (``insert_or_merge``)."""
    if deleted:
        return DELETE
    if op == "insert" or not existed:
        return INSERT
    if op in ("replace", "insert_or_replace"):
        return REPLACE
    return MERGE


def record_key(ts: int, key: bytes) -> bytes:
    """The feed key of the change of entity ``key`` at Timestamp ``ts``."""
    return FEED_PREFIX + _TS.pack(ts) + key


def pack_record(kind: str, value: bytes | None, before: bytes | None) -> bytes:
    """A feed record's stored value (see the module docstring)."""
    b = before or b""
    return _HEAD.pack(KINDS.index(kind), len(b)) + b + (value or b"")


def unpack_record(data: bytes) -> tuple[str, bytes | None, bytes | None]:
    """(kind, value or None, before or None) of :func:`pack_record`'s bytes."""
    code, n = _HEAD.unpack_from(data)
    start = _HEAD.size
    return KINDS[code], data[start + n:] or None, data[start:start + n] or None


def shared_tail(fkey: bytes, record: bytes, puts: dict[bytes, bytes]) -> int:
    """How many bytes at the end of feed record ``record`` (at feed key ``fkey``) repeat the value its batch puts
    at the record's entity key (``puts``: the batch's puts): 0 when none (a delete, a key not put)."""
    value = puts.get(fkey[len(FEED_PREFIX) + 8:])
    return len(value) if value is not None and record.endswith(value) else 0


def after_key(ts: int, key: bytes | None) -> bytes:
    """The first feed key after position ``(ts, key)``; ``key`` None means after every record of ``ts``."""
    if key is None:
        return FEED_PREFIX + _TS.pack(ts + 1)
    return FEED_PREFIX + _TS.pack(ts) + key + b"\x00"


def pack_state(on: bool, floor: int, records: int = 0, nbytes: int = 0) -> bytes:
    """``META_FEED``'s value: whether the feed was on at the last write, its floor, and the records it holds
    and their bytes (keys and values, exact: what ``rangetable ranges`` shows as the feed's size)."""
    return msgpack.packb([on, floor, records, nbytes])


def unpack_state(value: bytes | None, last_ts: int) -> tuple[bool, int, int, int]:
    """(on, floor, records, bytes) from ``META_FEED``. A store without it was never written with the feed on: a
    fresh store (``last_ts`` 0) starts its feed from nothing missed, an older one from its last Timestamp."""
    if value is None:
        return False, last_ts, 0, 0
    on, floor, records, nbytes = msgpack.unpackb(value)
    return bool(on), int(floor), int(records), int(nbytes)


def merged_state(left: bytes | None, right: bytes | None, left_ts: int, right_ts: int, records: int,
                 nbytes: int) -> bytes:
    """``META_FEED`` of a merge of two stores: on if both were, the higher floor, and the records the merged
    store holds (counted: the halves of one split share their parent's records)."""
    lon, lfloor, _, _ = unpack_state(left, left_ts)
    ron, rfloor, _, _ = unpack_state(right, right_ts)
    return pack_state(lon and ron, max(lfloor, rfloor), records, nbytes)


def newest(db: Any) -> int:
    """The Timestamp of the newest record of the feed (one seek back from its end), -1 when it has none
    (``db``: the feed's family, :attr:`Feed.db`)."""
    it = db.iter()
    try:
        it.seek_for_prev(FEED_END)
        if it.valid():
            key = it.key()
            if key.startswith(FEED_PREFIX):
                return int(_TS.unpack_from(key, len(FEED_PREFIX))[0])
        return -1
    finally:
        it = None  # a live iterator would keep the DB LOCK after close()


def count(db: Any, below: bytes = FEED_END) -> tuple[int, int]:
    """(records, bytes) of the feed's records with keys below ``below`` (all by default), counted by a pass
    (``db``: the feed's family, :attr:`Feed.db`)."""
    return count_span(db, FEED_PREFIX, below)


class Change(NamedTuple):
    """One entity's change in a batch, as the write path knows it."""

    key: bytes
    kind: str
    value: bytes | None  # the stored value after it (None: deleted or expired)
    before: bytes | None  # the stored value before it (None: absent)


def migrate(db: Any, family: Any, handle: Any) -> int:
    """Move the records a store written before they had a family of their own keeps among its entities (in
    ``db``'s default family) into the feed's (``family``, ``handle``), in batches of about 1 MiB that each
    put a run of records there and delete it here, atomically; returns how many moved (0: one seek)."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(FEED_END)
    moved = 0
    while True:
        wb = rocksdict.WriteBatch(raw_mode=True)
        size, last = 0, None
        it = db.items(from_key=FEED_PREFIX, read_opt=ro)
        try:
            for k, v in it:
                wb.put(k, v, handle)
                size += len(k) + len(v)
                last = k
                moved += 1
                if size >= 1 << 20:
                    break
        finally:
            it = None  # a live iterator would keep the DB LOCK after close()
        if last is None:
            return moved
        wb.delete_range(FEED_PREFIX, last + b"\x00")
        db.write(wb)


class Feed:
    """A store's feed settings and persisted state, and its records' column family (:attr:`db`); the store
    calls it under its write lock."""

    def __init__(self, db: Any, last_ts: int) -> None:
        self.want = False  # the table's setting: records are written while True
        self.before_images = False
        self.retention_ticks = DEFAULT_FEED_RETENTION_S * TICKS_PER_SECOND
        self.db: Any  # the records' column family: a view of it (an Rdict) and its handle for WriteBatches
        self.family: Any
        self.db, self.family = column_family(db, FAMILY)
        migrate(db, self.db, self.family)
        self.reload(db, last_ts)

    def reload(self, db: Any, last_ts: int) -> None:
        """Read ``META_FEED`` again (a follower that applied its primary's batches becomes primary)."""
        stored = db.get(META_FEED)
        self.on, self.floor, self.records, self.nbytes = unpack_state(stored, last_ts)
        self.stored_on: bool | None = self.on if stored is not None else None  # what META_FEED says (None: absent)
        self.top: int | None = None  # the newest record's Timestamp (-1: none), once known: see nothing_after

    def nothing_after(self, after: tuple[int, bytes | None]) -> bool:
        """True when the store holds no record after position ``after``, known without a read of the records
        (a query's freshness check asks this of every base range: frontend/indexes/query.py). The newest
        record's Timestamp is found by one seek the first time, then kept by :meth:`note`; the store forgets it
        (``top = None``) when records are written other than through :meth:`note` (a follower's batch, a split's
        replay)."""
        top = self.top
        if top is None:
            top = self.top = newest(self.db)
        return top < after[0] or (top == after[0] and after[1] is None)

    def configure(self, on: bool, before_images: bool, retention_s: int | None) -> None:
        """Take the table's feed settings (applied from the next write on)."""
        self.want = on
        self.before_images = before_images
        self.retention_ticks = (DEFAULT_FEED_RETENTION_S if retention_s is None else retention_s) * TICKS_PER_SECOND

    def read_floor(self, last_ts: int) -> int:
        """The floor a read sees now: a feed switched on again since the last write misses what the writes
        while it was off changed, up to the last Timestamp."""
        return self.floor if self.stored_on is not False else max(self.floor, last_ts)

    def note(self, wb: Any, ts: int, changes: list[Change], last_ts: int) -> None:
        """Put the records of ``changes`` (all at Timestamp ``ts``) into ``wb``, and ``META_FEED`` when the
        feed was switched on or off since the last write (``last_ts``: the store's last Timestamp before it)."""
        switched = self.want != self.stored_on
        if switched:
            if self.want and self.stored_on is False:
                self.floor = max(self.floor, last_ts)  # the writes while it was off are not in it
            self.on = self.want
            self.stored_on = self.want
        if self.want and changes:
            keep = self.before_images
            size = 0
            for c in changes:
                fk = record_key(ts, c.key)
                record = pack_record(c.kind, c.value, c.before if keep else None)
                wb.put(fk, record, self.family)
                size += len(fk) + len(record)
            self.records += len(changes)
            self.nbytes += size
            if self.top is not None:
                self.top = ts  # Timestamps only grow: the newest record is this batch's
        elif not switched:
            return
        wb.put(META_FEED, pack_state(self.on, self.floor, self.records, self.nbytes))

    def raise_floor(self, wb: Any, ts: int) -> None:
        """Put into ``wb`` a floor raised to ``ts``: the changes at or below it are not in this feed (a secondary
        range's first copy put them without records)."""
        if ts > self.floor:
            self.floor = ts
            wb.put(META_FEED, pack_state(self.on, self.floor, self.records, self.nbytes))

    def drop_after(self, wb: Any, ts: int, lo: bytes, hi: bytes | None) -> int:
        """Put into ``wb`` the deletion of this range's records (entity keys ``[lo, hi)``) after Timestamp ``ts``
        (a secondary sealed at that cut: changes it applied past it never happened here); returns how many."""
        ro = rocksdict.ReadOptions()
        ro.set_iterate_upper_bound(FEED_END)
        it = self.db.items(from_key=FEED_PREFIX + _TS.pack(ts + 1), read_opt=ro)
        n, size, at = 0, 0, len(FEED_PREFIX) + _TS.size
        try:
            for fk, record in it:
                key = fk[at:]
                if key >= lo and (hi is None or key < hi):
                    wb.delete(fk, self.family)
                    n, size = n + 1, size + len(fk) + len(record)
        finally:
            it = None  # a live iterator would keep the DB LOCK after close()
        if n:
            self.records, self.nbytes = max(0, self.records - n), max(0, self.nbytes - size)
            self.top = None
            wb.put(META_FEED, pack_state(self.on, self.floor, self.records, self.nbytes))
        return n

    def cutoff(self, now: int) -> int | None:
        """The Timestamp at or below which records are older than the retention at ``now``; None when nothing
        more is to trim."""
        cutoff = now - self.retention_ticks
        return cutoff if cutoff > self.floor else None

    def trim(self, wb: Any, cutoff: int, gone: tuple[int, int]) -> None:
        """Put into ``wb`` the deletion of every record at or below ``cutoff`` (``gone``: their count and bytes,
        :func:`count`) and the raised floor."""
        wb.delete_range(FEED_PREFIX, FEED_PREFIX + _TS.pack(cutoff + 1), self.family)
        self.floor = cutoff
        self.records = max(0, self.records - gone[0])
        self.nbytes = max(0, self.nbytes - gone[1])
        wb.put(META_FEED, pack_state(self.on, self.floor, self.records, self.nbytes))


class FeedPage(NamedTuple):
    """A range's answer to a feed read: records ``[ts, key, kind, value, before]`` in position order, the
    Timestamp every record at or below which it holds (``frontier``: the resolved Timestamp, or the last
    record's when the page is full), whether more follow up to the resolved Timestamp, and the floor."""

    records: list[list]
    frontier: int
    more: bool
    floor: int = 0


def should_close(last_ts: int, now: int, need: int | None) -> bool:
    """Whether a read closes the range first (:meth:`RangeStore.close_timestamp
    <partition_server.store.range_store.RangeStore.close_timestamp>`). ``need`` is the highest frontier the
    reader has seen elsewhere in the table: the table's resolved Timestamp can pass it only once this range's
    does, so a range below it closes; a busy range above it need not (its writes move its frontier), except at
    least every :data:`IDLE_TICKS`, so an idle table's resolved time keeps moving. A read without a hint (a
    reader's first page) closes a range whose last Timestamp is older than :data:`FRESH_TICKS`."""
    if need is None:
        return now - last_ts > FRESH_TICKS
    return last_ts < need or now - last_ts > IDLE_TICKS


def check_position(on: bool, floor: int, after: tuple[int, bytes | None] | None) -> None:
    """Refuse a read of a feed that is off (``FeedDisabled``), or from a position at or below the floor
    (``FeedTrimmed``, with the gap). ``after`` None reads from the oldest record kept."""
    if not on:
        raise TableError("FeedDisabled", "The table's change feed is off: `rangetable table set TABLE --feed on`.")
    if after is not None and after[0] < floor:
        raise TableError("FeedTrimmed", f"The change feed no longer holds changes after {ticks_to_iso(after[0], full=True)} "
                                        f"up to {ticks_to_iso(floor, full=True)} (retention or a time the feed was off): changes in that "
                                        f"gap may be missing. Read from the beginning again.")


def read(db: Any, after: tuple[int, bytes | None] | None, floor: int, upto: int, lo: bytes, hi: bytes | None,
         limit: int) -> FeedPage:
    """The records after ``after`` (None: from the oldest kept, above ``floor``) with Timestamps at or below
    ``upto``, of entity keys in ``[lo, hi)``, at most about ``limit`` (a Timestamp's records are never split
    between pages; ``limit`` 0 answers no record and frontier ``upto``; ``db``: the feed's family). A read looks at about
    :data:`MAX_SCANNED` records at most, so one over a span that holds few of them (a split's half, whose
    store keeps its sibling's records until they age out) answers ``more`` with what it found so far."""
    if limit <= 0:
        return FeedPage([], upto, False, floor)
    start = after_key(*after) if after is not None else after_key(floor, None)
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(FEED_PREFIX + _TS.pack(upto + 1))
    out: list[list] = []
    size = 0
    n = len(FEED_PREFIX)
    unpack_ts = _TS.unpack_from
    last_ts = -1
    scanned = 0
    it = db.items(from_key=start, read_opt=ro)
    try:
        for fk, v in it:
            ts = unpack_ts(fk, n)[0]
            scanned += 1
            if ts != last_ts:
                if len(out) >= limit or size >= MAX_READ_BYTES or scanned > MAX_SCANNED:
                    return FeedPage(out, last_ts, True, floor)
                last_ts = ts
            key = fk[n + 8:]
            if key < lo or (hi is not None and key >= hi):
                continue
            kind, value, before = unpack_record(v)
            out.append([ts, key, kind, value, before])
            size += len(fk) + len(v)
    finally:
        it = None  # a live iterator would keep the DB LOCK after close()
    return FeedPage(out, upto, False, floor)
