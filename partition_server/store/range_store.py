"""One key range of a table: a RocksDB directory holding entities, their Timestamps and meta keys.

Layout (all raw bytes, opened only through :func:`rangetable.kernel.storage.open_range_db`):

* entity ``encode_key(pk, rk)`` → ``msgpack([ts_ticks, typed_props])``;
* ``META_TS`` → ``>QQQQ`` (last Timestamp handed out; the request records' count, the Timestamp the
  next purge of them starts from and their bytes: a :class:`~partition_server.store.request_records.Window`);
* ``REQ_PREFIX + request_id`` → ``msgpack([ts, kind, result])``, the answer of a write or batch that
  carried a request id (``kind`` "w" or "b"), so a retry gets the same answer without re-applying it;
* ``REQT_PREFIX + >Q ts + request_id`` → ``>I size``, the same records ordered oldest first for purging
  (both in :mod:`partition_server.store.request_records`);
* the change feed's records, in a column family of their own (:mod:`partition_server.store.feed`);
* ``META_COUNT`` → ``>QQ``: the entities the store holds and their bytes, exact, put by every batch that
  changes them (:mod:`partition_server.store.counts`);
* ``DROP_KEY`` → ``msgpack([lo, hi])`` after ``split(compact=False)``: the span deleted but not yet
  compacted (disk space is freed by :meth:`RangeStore.compact_pending`);
* while the table has a TTL, the expiry index (:mod:`partition_server.store.expiry`): one entry per write,
  in Timestamp order, and ``MARK_KEY``. Expired entities read as absent everywhere (:meth:`RangeStore.set_ttl`);
* in a range of a secondary cluster, an undo record per change applied from the source (for reads at a cut,
  :mod:`partition_server.store.cut`) and ``META_SOURCE`` → ``msgpack([claim, position])`` of its applier
  (:meth:`RangeStore.apply_source`).

Every write is one WriteBatch that carries the entity change, the new ``META_TS``, the new counts and any
request record, so Timestamps stay strictly increasing across restarts and retries stay exactly-once.
The store is a library: the partition server process drives it. Writes are serialised by a lock;
reads need none.

The copies a store makes of itself are its own methods too: a split's hard-linked halves and the record of
the writes made while they are built (:mod:`partition_server.store.range_split`,
:mod:`partition_server.split_job`), merges, and the replication side of the store — a primary's writes
stamped and shipped, a follower's batches applied with their log position (``META_REPL``; Vertical Paxos
II's primary-backup, :mod:`partition_server.replication.protocol`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, overload

import msgpack
import rocksdict

from partition_server.store import cut, fast_path, index_state
from partition_server.store.counts import (
    Counts,
    capture,
    count_span,
    delta,
    half_counts,
    left_share,
    pack_counts,
    read_counts,
    unpack_counts,
)
from partition_server.store.expiry import Expiry
from partition_server.store.feed import (
    EXPIRE,
    Change,
    Feed,
    FeedPage,
    check_position,
    record_key,
    record_kind,
    should_close,
)
from partition_server.store.feed import count as count_feed
from partition_server.store.feed import read as read_feed
from partition_server.store.keys import DROP_KEY, META_COUNT, META_INDEX, META_REPL, META_SOURCE, META_TS
from partition_server.store.prefilter import Needles
from partition_server.store.range_ops import check_batch_shape, prepare_op
from partition_server.store.range_scan import scan_span, span_may_hold
from partition_server.store.range_split import (
    checkpoint_halves,
    choose_split_key,
    compaction_slices,
    merge_stores,
    split_store,
)
from partition_server.store.replica_log import pack_position, unpack_position, write_batch
from partition_server.store.request_records import (
    BATCH,
    BATCH_ANSWERS,
    MISSING,
    PURGE_EVERY,  # read here at each write, so tests can patch it on this module
    WRITE,
    add_record,
    lookup,
    packed_answer,
    refusal,
    replayed_batch,
    stored_answer,
    unpack_meta,
)
from partition_server.store.request_records import REQ_PREFIX as REQ_PREFIX  # re-exported (layout above)
from partition_server.store.request_records import pack_meta as pack_meta  # re-exported: META_TS's encoding
from partition_server.store.tee import Ops, Shipper, Tee
from rangetable import protocol
from rangetable.edm import UNIX_EPOCH_TICKS, Entity
from rangetable.errors import TableError
from rangetable.filter import Predicate
from rangetable.kernel.checkpoint import checkpoint_db
from rangetable.kernel.storage import open_range_db
from rangetable.keys import META_PREFIX, encode_key


def _probe(db: rocksdict.Rdict, held: list[bool], lo: bytes, hi: bytes) -> bool:
    """:func:`span_may_hold`, its answer noted in ``held``."""
    answer = span_may_hold(db, lo, hi)
    held.append(answer)
    return answer


def wall_ticks() -> int:
    """The wall clock in .NET ticks (100 ns since 0001-01-01 UTC); the default store clock."""
    return time.time_ns() // 100 + UNIX_EPOCH_TICKS


class _Closed:
    """Stands in for the DB after close(): any use answers RangeBusy (a retriable error)."""

    def __getattr__(self, name: str) -> Any:
        raise TableError("RangeBusy", "The range store is closed.")


_CLOSED = _Closed()
_DELETIONS = re.compile(r"# (?:range )?deletions=(\d+)")  # in RocksDB's aggregated table properties


class RangeStore:
    """A range's entities in one RocksDB directory; see the module docstring for the layout. Its reads and writes
    first, then the copies it makes of itself: split halves, merges and replication."""

    def __init__(
        self,
        db: rocksdict.Rdict,
        path: str,
        *,
        sync: bool = False,
        request_window_s: float = 600.0,
        request_window_max: int = 100_000,
        request_window_bytes: int = 64 << 20,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._db: Any = db
        self.path = path
        self.sync = sync
        self.request_window_s = request_window_s
        self.request_window_max = request_window_max
        self.request_window_bytes = request_window_bytes
        self.clock: Callable[[], int] = clock or wall_ticks
        self._wo = rocksdict.WriteOptions()
        self._wo.sync = sync
        self._lock = threading.Lock()
        self._compact_lock = threading.Lock()
        self._last_ts, self._window = unpack_meta(db.get(META_TS))
        self._drop_pending = db.get(DROP_KEY) is not None
        self._closing = False
        self._req_writes = 0
        self._tee = Tee()  # a split's record of this store's writes (split_job.py)
        self._counts, counted = read_counts(db)  # exact; counted once for a store written before META_COUNT
        if counted:
            db.put(META_COUNT, pack_counts(self._counts), self._wo)
        self.expiry = Expiry(db)  # the table's TTL and its expiry index
        self.feed = Feed(db, self._last_ts)  # the change feed's settings and state (feed.py)
        self._trimmed = b""  # a secondary range: the undo time key its next trim reads from (cut.expired)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = True, **limits: Any) -> RangeStore:
        """Open the store at ``path`` (created if missing unless ``create=False``); ``limits`` are the
        keywords of the constructor after ``path`` (``sync``, the request window's bounds, ``clock``)."""
        p = os.fspath(path)
        return cls(open_range_db(p, create=create), p, **limits)

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def last_ts(self) -> int:
        """The last Timestamp (ticks) this store handed out; 0 for a fresh store."""
        return self._last_ts

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._db is _CLOSED

    def close(self) -> None:
        """Close the DB and release its directory LOCK; later calls are no-ops.

        Scans and split_key never keep iterators beyond their call, so nothing derived from the DB
        outlives this and the LOCK is free for another process (or this one) at once. A running
        :meth:`compact_pending` stops after its current slice (tens of ms; close runs on the server's
        loop, and a multi-GB half takes seconds, longer than a lease); the span stays noted under
        ``DROP_KEY`` and the next open compacts the rest.
        """
        self._closing = True
        with self._compact_lock, self._lock:
            db = self._db
            if db is _CLOSED:
                return
            self._db = _CLOSED
            self.feed.db = self.feed.family = _CLOSED  # the feed family's view and handle hold the DB too
            try:
                db.close()
            except rocksdict.DbClosedError:
                pass

    @property
    def compaction_pending(self) -> bool:
        """True while a span dropped by ``split(compact=False)`` still awaits :meth:`compact_pending`."""
        return self._drop_pending

    def compact_pending(self) -> bool:
        """Compact away the span a ``split(compact=False)`` dropped; False if there was none, or if
        :meth:`close` stopped it between slices (the span then stays noted for the next open).

        Safe to run in a background thread while the store serves (RocksDB compacts without the
        GIL; reads and writes go on). Afterwards :meth:`stats` is right.
        """
        db = self._db
        if db is _CLOSED or self._closing:
            return False
        v = db.get(DROP_KEY)
        if v is None:
            self._drop_pending = False
            return False
        lo, hi = msgpack.unpackb(v)
        if not self.compact_span(lo, hi):
            return False
        with self._compact_lock:
            if self._closing:
                return False
            self._db.delete(DROP_KEY, self._wo)
        self._drop_pending = False
        return True

    def compact_span(self, lo: bytes, hi: bytes) -> bool:
        """Compact ``[lo, hi)`` in slices of a few SST files each (RocksDB drops deleted keys and frees
        their space); False if :meth:`close` stopped it between slices."""
        for a, b in compaction_slices(self._db.live_files(), lo, hi):
            with self._compact_lock:
                if self._closing:
                    return False
                self._db.compact_range(a or None, b)
        return True

    def flush(self) -> None:
        """Flush memtables to SST files, the feed's too (for moves and checkpoints)."""
        self._db.flush(True)
        self.feed.db.flush(True)

    def checkpoint(self, path: str) -> dict[str, Any]:
        """A consistent copy of the store at ``path`` (flush, then hard links; see
        :func:`rangetable.kernel.checkpoint.checkpoint_db`), with the store's size estimates added."""
        with self._lock:  # no write of this store lands between the flush and the links
            self._db.flush(True)
            info = checkpoint_db(self._db, path)
        return {**info, "last_ts": self._last_ts, "entities_estimate": self.counts().entities}  # exact now

    def __enter__(self) -> RangeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reads -------------------------------------------------------------------------------

    def _read(self, seen: dict[bytes, bytes | None] | None = None) -> Callable[[Any], Any]:
        """The DB's get (one key or a list), hiding expired entities: every read of a current entity
        goes through it. With ``seen``, every stored value it read (expired or not) is noted there."""
        get = self._db.get if seen is None else capture(self._db.get, seen)
        return self.expiry.reader(get, self.clock())

    def get(self, pk: str, rk: str) -> Entity | None:
        """The entity at (pk, rk), or None (also when expired)."""
        v = self._read()(encode_key(pk, rk))
        if v is None:
            return None
        ts, props = msgpack.unpackb(v)
        return Entity(pk, rk, ts, props)

    def get_raw(self, key: bytes) -> bytes | None:
        """The stored value (``msgpack([ts, props])``) at an encoded entity key, or None (also when
        expired)."""
        return self._read()(key)

    def get_at(self, pk: str, rk: str, at: int) -> Entity | None:
        """The entity at (pk, rk) as it stood at the cut ``at`` of a secondary cluster (:mod:`.cut`), or None
        (absent then, or expired then: the table's TTL judged at the cut, as the source answered at it)."""
        key = encode_key(pk, rk)
        cut.check_floor(self._db, at)
        v = cut.version_at(self._db, key, at, self._db.get(key))
        if v is None:
            return None
        ts, props = msgpack.unpackb(v)
        oldest = self.expiry.oldest(at)
        return None if oldest and ts < oldest else Entity(pk, rk, ts, props)

    @overload
    def scan(self, lo: bytes, hi: bytes | None, predicate: Predicate | None = None,
             select: list[str] | None = None, limit: int = 1000, budget_s: float | None = None, *,
             wire: Literal[False] = False, needs_ts: bool = True, needs_props: bool = True,
             points: list[bytes] | None = None, wanted: Needles = (),
             at: int | None = None) -> tuple[list[Entity], bytes | None]: ...

    @overload
    def scan(self, lo: bytes, hi: bytes | None, predicate: Predicate | None = None,
             select: list[str] | None = None, limit: int = 1000, budget_s: float | None = None, *,
             wire: Literal[True], needs_ts: bool = True, needs_props: bool = True,
             points: list[bytes] | None = None, wanted: Needles = (),
             at: int | None = None) -> tuple[list[bytes], bytes | None]: ...

    def scan(self, lo: bytes, hi: bytes | None, predicate: Predicate | None = None,
             select: list[str] | None = None, limit: int = 1000, budget_s: float | None = None, *,
             wire: bool = False, needs_ts: bool = True, needs_props: bool = True,
             points: list[bytes] | None = None, wanted: Needles = (),
             at: int | None = None) -> tuple[list[Entity], bytes | None] | tuple[list[bytes], bytes | None]:
        """Forward scan of entity keys in ``[lo, hi)`` (``hi`` None: to the end of the entities): the
        matching entities and the key to resume from (see :func:`~partition_server.store.range_scan.scan_span`).

        With ``wire`` each match is the bytes of its wire form ``[pk, rk, ts, props]``, spliced from
        the stored value when possible; ``needs_ts`` / ``needs_props`` then say what ``predicate`` reads.
        With ``points`` it reads those entity keys (the point spans of an ``or`` of point keys) by one multi-get.
        ``wanted``: the filter's prefilter (:mod:`partition_server.store.prefilter`). ``at``: read as of that cut of
        a secondary cluster (:mod:`partition_server.store.cut`).
        """
        return scan_span(self._db, lo, hi, predicate, select, limit, budget_s, wire=wire, needs_ts=needs_ts,
                         needs_props=needs_props, oldest=self.expiry.oldest(self.clock() if at is None else at),
                         points=points, wanted=wanted, at=at)

    def counts(self) -> Counts:
        """The entities this store holds and their bytes (key + stored value), exact, as of its last
        batch: read from ``META_COUNT``, so a follower's figure is the one its primary's last applied batch
        carried. Entities a TTL expired count until they are reclaimed."""
        return unpack_counts(self._db.get(META_COUNT)) or self._counts

    def stats(self) -> dict[str, int]:
        """``{"entities", "bytes", "feed_records", "feed_bytes", "compaction_pending", "pending_compaction_bytes"}``;
        cheap (one get and a DB property). ``entities`` and ``bytes`` are exact (:meth:`counts`; bytes: the
        uncompressed entity data, request records and other meta keys left out, so it is what size splits are
        about); so are the change feed's records and their bytes (as of this replica's last write or reload).
        ``pending_compaction_bytes`` is RocksDB's estimate of the bytes compaction must still rewrite to
        bring every level under its target.
        """
        c = self.counts()
        return {
            "entities": c.entities,
            "bytes": c.bytes,
            "feed_records": self.feed.records,
            "feed_bytes": self.feed.nbytes,
            "compaction_pending": self._drop_pending,
            "pending_compaction_bytes": self._property("rocksdb.estimate-pending-compaction-bytes"),
        }

    def _property(self, name: str) -> int:
        """RocksDB's integer property ``name`` summed over the store's column families (the feed's too)."""
        return sum(db.property_int_value(name) or 0 for db in (self._db, self.feed.db))

    def split_key(self) -> str | None:
        """A PartitionKey near the median entity that leaves both halves non-empty (None if < 2 pks).

        Taken from the SST files' metadata after a flush, so it costs no scan however large the
        range (see :func:`partition_server.store.range_split.choose_split_key`).
        """
        return choose_split_key(self._db)

    # --- writes ------------------------------------------------------------------------------

    def _next_ts(self) -> int:
        ts = self.clock()
        last = self._last_ts
        return ts if ts > last else last + 1

    def _cutoff(self) -> int:
        """The Timestamp before which request records have expired."""
        return self.clock() - int(self.request_window_s * 10_000_000)

    def _replay(self, request_id: str | None, kind: str) -> tuple[bytes | None, tuple[bytes, int] | None, Any]:
        """(encoded id, index key and size of an expired record to drop, stored answer or MISSING) for a
        request of ``kind`` ("w" or "b"); InvalidInput when the id answered the other kind."""
        if request_id is None:
            return None, None, MISSING
        rid = request_id.encode()
        prev, stale = lookup(self._db, rid, self._cutoff)
        if prev is not MISSING and prev[0] != kind:
            raise TableError("InvalidInput", "This request id was already used by a different kind of request.")
        return rid, stale, prev

    def _batch_change(self, ops: Ops, seen: dict[bytes, bytes | None], empty: bool) -> tuple[int, int]:
        """How a batch's ``ops`` change the counts: ``seen`` holds the stored values it read; an entity key
        it wrote without reading (a blind upsert) is read here, all in one multi-get, unless ``empty`` (its
        partition held no key)."""
        missing = [k for k, _ in ops if k < META_PREFIX and k not in seen]
        if missing:
            seen.update(zip(missing, [None] * len(missing) if empty else self._db.get(missing), strict=True))
        return delta(ops, seen.__getitem__)

    @staticmethod
    def _batch_changes(ops: Sequence[Mapping[str, Any]], written: Ops, seen: dict[bytes, bytes | None]) -> list[Change]:
        """The feed's view of a transaction: each op wrote (or deleted) one entity, in order, before any meta
        key of the batch; ``seen`` holds every entity's stored value before it (:meth:`_batch_change`)."""
        out = []
        for op, (key, value) in zip(ops, written, strict=False):  # the entity writes come first, one per op
            before = seen.get(key)
            after = value if type(value) is bytes else None
            out.append(Change(key, record_kind(op["op"], before is not None, after is None), after, before))
        return out

    def _commit(self, wb: Any, ts: int, rid: bytes | None, kind: bytes,
                answer: bytes, stale: tuple[bytes, int] | None, change: tuple[int, int]) -> None:
        """Add meta (the counts changed by ``change``, entities and bytes; the record of request ``rid``:
        ``kind`` and the packed ``answer``) to ``wb`` and write it atomically."""
        counts = self._counts.plus(*change)
        if counts != self._counts:
            wb.put(META_COUNT, pack_counts(counts))
        w = self._window
        if rid is not None:
            self._req_writes += 1
            w = add_record(self._db, wb, w, rid, ts, kind, answer, stale, self._cutoff,
                           (self.request_window_max, self.request_window_bytes), self._req_writes % PURGE_EVERY == 0)
        wb.put(META_TS, pack_meta(ts, w))
        self._tee.write(self._db, wb, self._wo)
        self._last_ts = ts
        self._window = w
        self._counts = counts

    def _refused(self, exc: TableError, ts: int, rid: bytes | None, kind: bytes,
                 stale: tuple[bytes, int] | None) -> None:
        """Record that request ``rid`` was refused with ``exc`` (a WriteBatch of its record alone), so that every
        retry gets this answer instead of a new decision (:func:`~partition_server.store.request_records.refusal`:
        retriable refusals are not recorded)."""
        answer = None if rid is None else refusal(exc)
        if answer is not None:
            self._commit(self._tee.new_batch(), ts, rid, kind, answer, stale, (0, 0))

    @overload
    def write(self, op: Mapping[str, Any], request_id: str | None = None, *,
              wire: Literal[False] = False) -> Entity | None: ...

    @overload
    def write(self, op: Mapping[str, Any], request_id: str | None = None, *,
              wire: Literal[True]) -> bytes: ...

    def write(self, op: Mapping[str, Any], request_id: str | None = None, *,
              wire: bool = False) -> Entity | None | bytes:
        """Apply one entity operation ``{"op", "pk", "rk", "props", "if_match"}``.

        ``op`` is insert | replace | merge | delete | insert_or_replace | insert_or_merge; ``props``
        are typed props (not for delete); ``if_match`` None | "*" | an ETag (replace, merge and
        delete only; None counts as "*"). Returns the entity as written (with its new Timestamp),
        None for a delete; with ``wire``, that answer packed: ``msgpack([pk, rk, ts, props])``
        spliced from the stored value, or nil. Raises TableError with Azure's code
        (EntityAlreadyExists, ResourceNotFound, UpdateConditionNotSatisfied, InvalidInput,
        validation codes). With ``request_id``, a repeated call returns the first call's answer
        without applying it again, or raises the final error the first call was refused with.
        """
        with self._lock:
            rid, stale, prev = self._replay(request_id, "w")
            if prev is not MISSING:
                answer = stored_answer(prev)
                return packed_answer(answer) if wire else answer
            ts = self._next_ts()
            seen: dict[bytes, bytes | None] = {}
            try:
                key, props = prepare_op(self._read(seen), op)
            except TableError as exc:
                self._refused(exc, ts, rid, WRITE, stale)
                raise
            wb = self._tee.new_batch()
            old = seen[key] if key in seen else self._db.get(key)  # a blind upsert reads it for the counts only
            change = (-1, -len(key) - len(old)) if old is not None else (0, 0)
            value: bytes | None = None
            if props is None:
                wb.delete(key)
                packed = fast_path.NIL
            else:
                value = fast_path.pack_value(ts, props)
                wb.put(key, value)
                self.expiry.note_write(wb, ts, [key])
                packed = fast_path.entity_bytes(key, value) if wire or rid is not None else b""
                change = (change[0] + 1, change[1] + len(key) + len(value))
            feed = self.feed
            if feed.want or feed.stored_on:
                before = seen[key] if key in seen else old
                feed.note(wb, ts, [Change(key, record_kind(op["op"], before is not None, value is None), value, before)],
                          self._last_ts)
            self._commit(wb, ts, rid, WRITE, packed, stale, change)
        if wire:
            return packed
        return None if props is None else Entity(op["pk"], op["rk"], ts, props)

    @overload
    def batch(self, ops: Sequence[Mapping[str, Any]], request_id: str | None = None, *,
              answer: Literal["entities"] = "entities") -> list[Entity | None]: ...

    @overload
    def batch(self, ops: Sequence[Mapping[str, Any]], request_id: str | None = None, *,
              answer: Literal["wire"]) -> list[bytes]: ...

    @overload
    def batch(self, ops: Sequence[Mapping[str, Any]], request_id: str | None = None, *,
              answer: Literal["timestamp"]) -> int: ...

    def batch(self, ops: Sequence[Mapping[str, Any]], request_id: str | None = None, *,
              answer: str = "entities") -> list[Entity | None] | list[bytes] | int:
        """Apply an entity group transaction atomically: every op or none.

        At most 100 ops, one PartitionKey, each row once, at most 4 MiB; all written entities share
        one Timestamp. A failure raises TableError with ``index`` set to the failing op (except
        RequestBodyTooLarge, which concerns the whole request). ``answer`` is the shape of the result:

        * ``"entities"``: each op's entity as written (None for a delete);
        * ``"wire"``: each op's answer packed, as :meth:`write` with ``wire`` gives it (``[]`` when a
          repeated request id was first answered with ``"timestamp"``);
        * ``"timestamp"``: only the Timestamp (ticks) every written entity got, from which each ETag
          follows (Azure's ``Prefer: return-no-content``; bulk imports). The request record then
          holds that number, not the entities: ~10 bytes instead of ~40 KiB for 100 entities of 400
          bytes.

        A repeated request id answers the first call's result in the asked shape (or its recorded refusal).
        """
        if answer not in BATCH_ANSWERS:
            raise ValueError(f"answer must be one of {BATCH_ANSWERS}, not {answer!r}")
        echo = answer != "timestamp"
        with self._lock:
            rid, stale, prev = self._replay(request_id, "b")
            if prev is not MISSING:
                return replayed_batch(stored_answer(prev), answer)
            ts = self._next_ts()
            wb = self._tee.new_batch(record=True)  # its operations give the counts
            db = self._db
            want_items = echo and (answer == "wire" or rid is not None)
            seen: dict[bytes, bytes | None] = {}
            held: list[bool] = []  # the probe's answers: [False] when the partition holds no key
            try:
                check_batch_shape(ops)
                items, written = fast_path.prepare_batch(self._read(seen), ops, ts, wb, want_items,
                                                         partial(_probe, db, held))
            except TableError as exc:
                self._refused(exc, ts, rid, BATCH, stale)
                raise
            if written:
                if self.expiry.indexing:
                    self.expiry.note_write(wb, ts, [encode_key(op["pk"], op["rk"])
                                                    for op, p in zip(ops, written, strict=True) if p is not None])
                if rid is None:
                    record = b""
                elif echo:
                    record = fast_path.array_header(len(items)) + b"".join(items)
                else:
                    record = protocol.pack(ts)
                change = self._batch_change(wb.ops, seen, held == [False])
                feed = self.feed
                if feed.want or feed.stored_on:
                    feed.note(wb, ts, self._batch_changes(ops, wb.ops, seen), self._last_ts)
                self._commit(wb, ts, rid, BATCH, record, stale, change)
        if answer == "wire":
            return items
        if answer == "timestamp":
            return ts
        return [None if p is None else Entity(op["pk"], op["rk"], ts, p) for op, p in zip(ops, written, strict=True)]

    # --- TTL (see expiry.py) -----------------------------------------------------------------

    def set_ttl(self, ttl_ticks: int) -> None:
        """Hide entities older than ``ttl_ticks`` from every read from now on (0: none), and keep
        the expiry index that reclaims them (started, or dropped when the TTL goes)."""
        with self._lock:
            wb = self._tee.new_batch()
            self.expiry.configure(wb, ttl_ticks, self._last_ts)
            if len(wb):
                self._tee.write(self._db, wb, self._wo)

    def expire_step(self, max_keys: int = 2000) -> tuple[int, int]:
        """One bounded step of the TTL's background work (see :meth:`Expiry.step`): (entities
        deleted, their bytes); (0, 0) without a TTL or once closed."""
        if not self.expiry.due or self._closing:
            return 0, 0
        with self._lock:
            if self._db is _CLOSED:
                return 0, 0
            wb = self._tee.new_batch()
            gone: list[tuple[bytes, bytes]] = []
            done = self.expiry.step(self._db, wb, self.clock(), max_keys, gone)
            counts = self._counts.plus(-done[0], -done[1])  # the entities it deleted and their bytes
            if counts != self._counts:
                wb.put(META_COUNT, pack_counts(counts))
            feed = self.feed
            ts = self._last_ts
            if gone and (feed.want or feed.stored_on):  # the expiries are changes: a Timestamp of their own
                ts = self._next_ts()
                feed.note(wb, ts, [Change(k, EXPIRE, None, v) for k, v in gone], self._last_ts)
                wb.put(META_TS, pack_meta(ts, self._window))
            if len(wb):
                self._tee.write(self._db, wb, self._wo)
            self._counts = counts
            self._last_ts = ts
            return done

    # --- an index's entries (see index_state.py) -----------------------------------------------

    def apply_index(self, entries: Sequence[tuple[bytes, dict | None]], claim: int,
                    pos: index_state.Position | None) -> bool:
        """Write an index's ``entries`` (entity key, kept properties or None to delete; each key once) in one
        batch with ``META_INDEX``, unless the range already applied ``pos`` (False). IndexFenced under a claim
        lower than the range's (:func:`~partition_server.store.index_state.admit`)."""
        with self._lock:
            stored = index_state.unpack(self._db.get(META_INDEX))
            if not index_state.admit(stored, claim, pos):
                return False
            ts = self._next_ts()
            wb = self._tee.new_batch()
            ops: Ops = []
            for key, props in entries:
                if props is None:
                    wb.delete(key)
                    ops.append((key, None))
                else:
                    value = fast_path.pack_value(ts, props)
                    wb.put(key, value)
                    ops.append((key, value))
            wb.put(META_INDEX, index_state.pack(*index_state.after(stored, claim, pos)))
            self._commit(wb, ts, None, WRITE, b"", None, self._batch_change(ops, {}, False))
        return True

    # --- a secondary cluster's range (see cut.py) ----------------------------------------------

    def apply_source(self, records: Sequence[Sequence[Any]], claim: int, pos: index_state.Position) -> int:
        """Apply the source cluster's change-feed records ``[ts, key, kind, value, before]`` (position order;
        ``value`` the source's stored value, None after a delete or an expiry) in one batch with an undo record
        each (:mod:`.cut`), this range's feed records (the source's, Timestamps kept) and ``META_SOURCE`` at
        ``pos``: the position through which the range now holds every change of its span (at or after the last
        record's; ``(R, b"\\xff")`` for all of Timestamp R). A record at or below the stored position was
        applied already and is skipped, so an applier that resumes from an older cursor, or regroups its
        batches, never applies a change twice. SourceFenced under a claim lower than the range's; a higher one is
        kept, so the applier it replaced is fenced from then on. Returns how many records were applied."""
        with self._lock:
            stored = index_state.unpack(self._db.get(META_SOURCE))
            index_state.admit(stored, claim, pos, "SourceFenced")
            state = index_state.after(stored, claim, pos)  # a higher claim is kept even when all is skipped
            last = stored[1]
            todo = [r for r in records if last is None or (r[0], r[1]) > last]
            if not todo and state == stored:
                return 0
            keys = list(dict.fromkeys(r[1] for r in todo))
            now = dict(zip(keys, self._db.get(keys) if keys else [], strict=True))  # raw: expired ones too
            first = dict(now)
            wb = self._tee.new_batch()
            changes: dict[int, list[Change]] = {}
            for ts, key, kind, value, _before in todo:
                before = now[key]
                wb.put(cut.undo_key(key, ts), cut.ABSENT if before is None else before)
                wb.put(cut.time_key(key, ts), b"")
                if value is None:
                    wb.delete(key)
                else:
                    wb.put(key, value)
                    self.expiry.note_write(wb, ts, [key])
                now[key] = value
                changes.setdefault(ts, []).append(Change(key, kind, value, before))
            feed = self.feed
            if feed.want or feed.stored_on:
                prev = self._last_ts
                for ts, group in changes.items():  # ascending: the records come in position order
                    feed.note(wb, ts, group, prev)
                    prev = ts
            wb.put(META_SOURCE, index_state.pack(*state))
            top = max([self._last_ts, pos[0], *changes])  # a promoted secondary stamps above all it applied
            self._commit(wb, top, None, WRITE, b"", None, delta(now.items(), first.__getitem__))
        return len(todo)

    def copy_source(self, values: Sequence[tuple[bytes, bytes | None]], claim: int, floor: int = 0) -> int:
        """Put entities of the source's table as its scan read them (``(key, stored value)``, the source's bytes;
        None deletes: a rejoining secondary's key its new source lacks) in one batch: a secondary table's first
        copy, before its applier replays the source's feed from the position noted before the scan, ``floor``.
        No undo record (no reader asks for a cut before the copy is done), no feed record — the feed's floor is
        raised to ``floor`` instead, so a reader of this range's feed from before it gets FeedTrimmed, never a
        silent gap —, no position; SourceFenced under a claim lower than the range's. Returns how many."""
        with self._lock:
            stored = index_state.unpack(self._db.get(META_SOURCE))
            index_state.admit(stored, claim, None, "SourceFenced")
            state = index_state.after(stored, claim, None)
            if not values and state == stored and floor <= self.feed.floor:
                return 0
            keys = [k for k, _ in values]
            before = dict(zip(keys, self._db.get(keys) if keys else [], strict=True))
            wb = self._tee.new_batch()
            for key, value in values:
                if value is None:  # a rejoining secondary's entity its new source no longer holds
                    wb.delete(key)
                    continue
                wb.put(key, value)
                self.expiry.note_write(wb, fast_path.stored_ts(value), [key])
            wb.put(META_SOURCE, index_state.pack(*state))
            self.feed.raise_floor(wb, floor)
            self._commit(wb, self._last_ts, None, WRITE, b"", None, delta(values, before.__getitem__))
        return len(values)

    def seal_at(self, at: int, lo: bytes, hi: bytes | None, claim: int | None = None) -> int:
        """Make this secondary range (entity keys ``[lo, hi)``) hold its table's state at cut ``at`` and nothing
        after, in one batch: every entity changed after the cut back to its value then (its undo records), those
        undo records and the range's feed records after the cut deleted, and the source's position set to the
        cut — a forced failover promotes the cluster at its cut (``docs/geo.md``). Returns how many entities went
        back. Later writes still stamp above every Timestamp applied here, so no reader sees time go back. With
        ``claim`` (a rejoining secondary's applier: its own records after the cut are changes that did not happen
        in the new primary's history) SourceFenced under a claim lower than the range's."""
        with self._lock:
            claimed, _ = index_state.unpack(self._db.get(META_SOURCE))
            if claim is not None:
                index_state.admit((claimed, None), claim, None, "SourceFenced")
                claimed = max(claimed, claim)
            restore, gone = cut.after(self._db, lo, hi, at)
            keys = list(restore)
            before = dict(zip(keys, self._db.get(keys) if keys else [], strict=True))
            wb = self._tee.new_batch()
            for key, value in restore.items():
                if value is None:
                    wb.delete(key)
                else:
                    wb.put(key, value)
                    self.expiry.note_write(wb, fast_path.stored_ts(value), [key])
            for k in gone:
                wb.delete(k)
            self.feed.drop_after(wb, at, lo, hi)
            wb.put(META_SOURCE, index_state.pack(claimed, (at, b"\xff")))
            self._commit(wb, self._last_ts, None, WRITE, b"", None, delta(restore.items(), before.__getitem__))
        return len(restore)

    def source_state(self) -> tuple[int, index_state.Position | None]:
        """(claim, position) of the source's feed this range applied (:meth:`apply_source`); (0, None) if none."""
        return index_state.unpack(self._db.get(META_SOURCE))

    def trim_undo(self, upto: int, limit: int = 10_000) -> int:
        """Delete up to ``limit`` undo records at or below Timestamp ``upto`` and raise the range's floor to it
        (no read asks for a cut below it any more; one below is refused), in one replicated batch; returns how
        many records went."""
        with self._lock:
            gone = cut.expired(self._db, upto, limit, self._trimmed)
            higher = upto > cut.floor(self._db)
            if gone or higher:
                wb = self._tee.new_batch()
                for k in gone:
                    wb.delete(k)
                if higher:
                    wb.put(cut.UNDO_FLOOR, cut.pack_floor(upto))
                self._tee.write(self._db, wb, self._wo)
            if gone:
                self._trimmed = gone[-2] + b"\x00"  # right after the last time key deleted: the next trim reads on
            return len(gone) // 2

    # --- the change feed (see feed.py) ---------------------------------------------------------

    def set_feed(self, on: bool, before_images: bool = False, retention_s: int | None = None) -> None:
        """Take the table's change-feed settings: records are written from the next write on while ``on``
        (the switch itself is recorded by that write, :meth:`Feed.note`)."""
        with self._lock:
            self.feed.configure(on, before_images, retention_s)

    def close_timestamp(self) -> int:
        """Move the range's resolved Timestamp to now: a batch that only advances the last Timestamp
        (replicated like any, so a new primary starts above it). Returns it."""
        with self._lock:
            ts = self._next_ts()
            wb = self._tee.new_batch()
            self.feed.note(wb, ts, [], self._last_ts)
            wb.put(META_TS, pack_meta(ts, self._window))
            self._tee.write(self._db, wb, self._wo)
            self._last_ts = ts
            return ts

    def read_changes(self, after: tuple[int, bytes | None] | None, lo: bytes, hi: bytes | None, limit: int,
                     close: bool = False, need: int | None = None, upto: int | None = None,
                     cut: int | None = None) -> FeedPage:
        """The feed's records of entity keys in ``[lo, hi)`` after position ``after`` (None: from the oldest
        kept), up to the range's last Timestamp (or ``upto`` when lower), at most about ``limit``: a
        :class:`~partition_server.store.feed.FeedPage`. With ``close`` the range first closes its last Timestamp
        when :func:`~partition_server.store.feed.should_close` says so (``need``: the highest frontier the reader
        saw elsewhere), so the table's resolved Timestamp keeps up. A secondary cluster's range is read at its
        table's ``cut`` instead (never closed: only the source stamps its Timestamps): up to the cut, which is
        then the frontier, whatever the range's own last Timestamp (it holds every change of the source at or
        below the cut, changed or not). FeedDisabled while the feed is off; FeedTrimmed below the floor."""
        feed = self.feed
        check_position(feed.want, feed.read_floor(self._last_ts), after)
        if cut is None and close and should_close(self._last_ts, self.clock(), need):
            self.close_timestamp()
        last = self._last_ts  # every record at or below it is written (it moves after the write)
        top = last if cut is None else cut  # a secondary range holds every change at or below its table's cut
        if upto is not None:
            top = min(top, upto)
        if after is not None and feed.nothing_after(after):  # fast path: no iterator (tested beside read)
            return FeedPage([], top, False, feed.read_floor(last))
        return read_feed(feed.db, after, feed.read_floor(last), top, lo, hi, limit)

    def trim_feed(self) -> int:
        """Delete the feed's records older than its retention (a replicated batch; none when no record aged out)
        and raise the floor; returns the floor. The records are counted before the write lock is taken (no new
        record falls below the cutoff)."""
        feed = self.feed
        cutoff = feed.cutoff(self.clock())
        if cutoff is None or self._db is _CLOSED:
            return feed.floor
        gone = count_feed(feed.db, record_key(cutoff + 1, b""))
        if not gone[0]:
            return feed.floor  # nothing aged out: no batch (an idle range writes nothing)
        with self._lock:
            if self._db is _CLOSED:
                return feed.floor
            wb = self._tee.new_batch()
            feed.trim(wb, cutoff, gone)
            self._tee.write(self._db, wb, self._wo)
            return cutoff

    def memory(self) -> dict[str, int]:
        """RocksDB memory this store holds outside the shared block cache, from its properties (cheap):
        ``memtables`` (active and immutable, pinned ones included) and ``table_readers`` (index and filter
        blocks not charged to the cache; near 0 while they are)."""
        return {"memtables": self._property("rocksdb.cur-size-all-mem-tables"),
                "table_readers": self._property("rocksdb.estimate-table-readers-mem")}

    def tombstones(self) -> int:
        """Deletions this store's files and memtables hold (point and range tombstones, RocksDB's table
        properties and memtable counts): what scans may step over until compaction drops them."""
        props = "".join(db.property_value("rocksdb.aggregated-table-properties") or "" for db in (self._db, self.feed.db))
        held = sum(int(m) for m in _DELETIONS.findall(props))
        return held + sum(self._property(p) for p in ("rocksdb.num-deletes-active-mem-table",
                                                      "rocksdb.num-deletes-imm-mem-tables"))

    # --- split / merge (see range_split.py) ---------------------------------------------------

    def split(self, split_pk: str, left_path: str | os.PathLike[str], right_path: str | os.PathLike[str], *,
              compact: bool = True, counts: tuple[Counts, Counts] | None = None) -> None:
        """Write two new stores: ``left_path`` holds pks < ``split_pk``, ``right_path`` the rest.

        Hard-linked checkpoints, then a delete_range of the other half in each, compacted away unless
        ``compact=False`` (then RocksDB's background compaction frees the space later). Meta (last
        Timestamp, request records) is kept in both; each half gets its exact counts: ``counts`` when
        given (a follower splitting where its primary did, which knows them), else counted
        (:func:`~partition_server.store.counts.half_counts`). This store stays open and unchanged. Safe to
        re-run after a crash (leftover outputs are removed first).
        """
        with self._lock:
            split_store(self._db, split_pk, os.fspath(left_path), os.fspath(right_path), compact=compact,
                        counts=counts)

    def count_half(self, split_key: bytes, left: bool, left_is_smaller: bool) -> None:
        """Set this store's counts to those of its ``left`` (or right) half of ``split_key``: it is a split's
        half, a checkpoint of the whole range before the other half is dropped (see
        :func:`~partition_server.store.counts.half_counts`)."""
        with self._lock:
            counts = half_counts(self._db, split_key, left, left_is_smaller)
            self._db.put(META_COUNT, pack_counts(counts), self._wo)
            self._counts = counts

    def left_share(self, split_key: bytes) -> float:
        """The share of this store's entity bytes below ``split_key``, from its SST files' metadata."""
        return left_share(self._db.live_files(), split_key)

    def limits(self) -> dict[str, Any]:
        """The keyword arguments of :meth:`open` this store was opened with (for its split halves)."""
        return {"sync": self.sync, "request_window_s": self.request_window_s,
                "request_window_max": self.request_window_max, "request_window_bytes": self.request_window_bytes}

    def begin_tee(self, left_path: str, right_path: str) -> None:
        """Record every write from now on (see :mod:`partition_server.split_job`), then checkpoint
        the store into both paths. Writes go on meanwhile: the record starts before the checkpoint,
        and replaying what the checkpoint already holds changes nothing."""
        with self._lock:
            self._tee.begin()
        checkpoint_halves(self._db, left_path, right_path)

    def take_tee(self) -> list[Ops]:
        """The writes recorded since the last call (recording goes on)."""
        with self._lock:
            return self._tee.take()

    def stop_tee(self) -> list[Ops]:
        """The writes recorded since the last take; recording stops."""
        with self._lock:
            return self._tee.stop()

    # --- replication (see replication.py) ----------------------------------------------------

    def replicate(self, shipper: Shipper | None) -> None:
        """As primary, stamp and ship every batch written from now on to ``shipper``; None: stop."""
        with self._lock:
            self._tee.log = shipper

    def position(self) -> tuple[int, int]:
        """(epoch, seq) of the last replicated batch this store holds; (0, 0) if none."""
        return unpack_position(self._db.get(META_REPL))

    def set_position(self, epoch: int, seq: int) -> None:
        """Record the log position a split half continues from."""
        with self._lock:
            self._db.put(META_REPL, pack_position(epoch, seq), self._wo)

    def apply_batch(self, ops: Ops, epoch: int, seq: int) -> None:
        """As follower, write a batch of the primary's log with its position, atomically."""
        with self._lock:
            write = self._db.write  # RangeBusy once closed (the feed's family handle is gone then too)
            wb = write_batch(ops, self.feed.family)
            wb.put(META_REPL, pack_position(epoch, seq))
            write(wb, self._wo)
            self.feed.top = None  # records may have come other than through Feed.note

    def write_raw(self, wb: rocksdict.WriteBatch, writes: list[tuple[bytes, bytes | None]] | None = None,
                  recount: bool = False) -> None:
        """Write a batch of raw keys as it is (a split replaying its parent's writes into a half), with the
        counts changed by its entity ``writes`` (key, value or None, in order; the batch must not put
        ``META_COUNT`` itself). ``recount``: the batch also deletes a span of entity keys, so the counts
        are taken afresh by a pass over the store (a rare case: no write of a range deletes entities)."""
        with self._lock:
            final = dict(writes or ())  # the last value each key gets is what the counts see
            counts = self._counts.plus(*delta(final.items(), self._db.get))
            if counts != self._counts and not recount:
                wb.put(META_COUNT, pack_counts(counts))
            self._db.write(wb, self._wo)
            self.feed.top = None  # records may have come other than through Feed.note
            if recount:
                counts = count_span(self._db)
                self._db.put(META_COUNT, pack_counts(counts), self._wo)
            self._counts = counts

    def reload_meta(self) -> None:
        """Read the last Timestamp, the request window and the counts again (after :meth:`write_raw`, or
        when a follower that applied its primary's batches becomes primary)."""
        with self._lock:
            self._last_ts, self._window = unpack_meta(self._db.get(META_TS))
            self._counts, _ = read_counts(self._db)
            self.feed.reload(self._db, self._last_ts)

    def drop_span(self, lo: bytes, hi: bytes) -> None:
        """Delete the entity keys ``[lo, hi)`` (one range tombstone, atomically with a note of the
        span), to be compacted away later by :meth:`compact_pending`."""
        if not lo < hi:
            return
        with self._lock:
            wb = rocksdict.WriteBatch(raw_mode=True)
            wb.delete_range(lo, hi)
            wb.put(DROP_KEY, protocol.pack([lo, hi]))
            self._db.write(wb, self._wo)
            self._drop_pending = True

    @staticmethod
    def merge(left_path: str | os.PathLike[str], right_path: str | os.PathLike[str],
              out_path: str | os.PathLike[str]) -> None:
        """Write ``out_path`` holding the union of two closed adjacent stores (left below right).

        Request records are united, the last Timestamp is the max of both. Re-runnable after a crash.
        """
        merge_stores(os.fspath(left_path), os.fspath(right_path), os.fspath(out_path))
