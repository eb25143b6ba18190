"""The copies a range store makes of itself: split halves, merges and replicas.

A mixin of :class:`partition_server.store.range_store.RangeStore` (which provides the attributes declared below
for the type checker): the split's hard-linked halves and the record of the writes made while they are
built (:mod:`partition_server.store.range_split`, :mod:`partition_server.split_job`), merges, and the
replication side of the store — a primary's writes stamped and shipped, a follower's batches applied
with their log position (``META_REPL``; Vertical Paxos II's primary-backup, :mod:`partition_server.replication.protocol`).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import rocksdict

from partition_server.store.counts import (
    Counts,
    count_span,
    delta,
    half_counts,
    left_share,
    pack_counts,
    read_counts,
)
from partition_server.store.keys import DROP_KEY, META_COUNT, META_REPL, META_TS
from partition_server.store.range_split import checkpoint_halves, merge_stores, split_store
from partition_server.store.replica_log import pack_position, unpack_position, write_batch
from partition_server.store.request_records import Window, unpack_meta
from partition_server.store.tee import Ops, Shipper, Tee
from rangetable import protocol


class StoreCopies:
    """Splits, merges and replication of a range store, mixed into :class:`~partition_server.store.range_store.RangeStore`."""

    if TYPE_CHECKING:
        _db: Any
        _lock: threading.Lock
        _tee: Tee
        _wo: rocksdict.WriteOptions
        _last_ts: int
        _window: Window
        _counts: Counts
        _drop_pending: bool
        sync: bool
        request_window_s: float
        request_window_max: int
        request_window_bytes: int

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
        wb = write_batch(ops)
        wb.put(META_REPL, pack_position(epoch, seq))
        with self._lock:
            self._db.write(wb, self._wo)

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
