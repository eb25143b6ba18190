"""The copies a range store makes of itself: split halves, merges and replicas.

A mixin of :class:`partition_server.range_store.RangeStore` (which provides the attributes declared below
for the type checker): the split's hard-linked halves and the record of the writes made while they are
built (:mod:`partition_server.range_split`, :mod:`partition_server.split_job`), merges, and the
replication side of the store — a primary's writes stamped and shipped, a follower's batches applied
with their log position (``META_REPL``; Vertical Paxos II's primary-backup, :mod:`partition_server.replication`).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import rocksdict

from partition_server.range_split import checkpoint_halves, merge_stores, split_store
from partition_server.replica_log import pack_position, unpack_position, write_batch
from partition_server.request_records import Window, unpack_meta
from partition_server.store_keys import DROP_KEY, META_REPL, META_TS
from partition_server.tee import Ops, Shipper, Tee
from rangetable import protocol


class StoreCopies:
    """Splits, merges and replication of a range store, mixed into :class:`~partition_server.range_store.RangeStore`."""

    if TYPE_CHECKING:
        _db: Any
        _lock: threading.Lock
        _tee: Tee
        _wo: rocksdict.WriteOptions
        _last_ts: int
        _window: Window
        _drop_pending: bool
        sync: bool
        request_window_s: float
        request_window_max: int
        request_window_bytes: int

    # --- split / merge (see range_split.py) ---------------------------------------------------

    def split(self, split_pk: str, left_path: str | os.PathLike[str], right_path: str | os.PathLike[str], *,
              compact: bool = True) -> None:
        """Write two new stores: ``left_path`` holds pks < ``split_pk``, ``right_path`` the rest.

        Hard-linked checkpoints, then a delete_range of the other half in each, compacted away unless
        ``compact=False`` (then RocksDB's background compaction reclaims it later and entity estimates
        stay high until then). Meta (last Timestamp, request records) is kept in both. This store
        stays open and unchanged. Safe to re-run after a crash (leftover outputs are removed first).
        """
        with self._lock:
            split_store(self._db, split_pk, os.fspath(left_path), os.fspath(right_path), compact=compact)

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

    def write_raw(self, wb: rocksdict.WriteBatch) -> None:
        """Write a batch of raw keys as it is (a split replaying its parent's writes)."""
        with self._lock:
            self._db.write(wb, self._wo)

    def reload_meta(self) -> None:
        """Read the last Timestamp and the request window again (after :meth:`write_raw`)."""
        with self._lock:
            self._last_ts, self._window = unpack_meta(self._db.get(META_TS))

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
