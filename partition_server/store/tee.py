"""The write batches of a store whose split is being prepared, recorded for its halves
(:mod:`partition_server.split_job`)."""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple, Protocol

import rocksdict

from partition_server.store.feed import FEED_PREFIX


class RangeEnd(NamedTuple):
    """The end (exclusive) of a recorded range delete: ``(begin, RangeEnd(end))``."""

    end: bytes


# one recorded batch: (key, value) puts, (key, None) deletes and (begin, RangeEnd(end)) range deletes
Ops = list[tuple[bytes, "bytes | None | RangeEnd"]]


class RecordingBatch:
    """A WriteBatch that also keeps its put and delete operations, to replay them into a split's halves."""

    __slots__ = ("wb", "ops")

    def __init__(self) -> None:
        self.wb = rocksdict.WriteBatch(raw_mode=True)
        self.ops: Ops = []

    def put(self, key: bytes, value: bytes, family: rocksdict.ColumnFamily | None = None) -> None:
        """Put ``key`` into column family ``family`` (None: the default one), and record it (the key says
        the family again on replay: :func:`add_op`)."""
        self.wb.put(key, value, family)
        self.ops.append((key, value))

    def put_all(self, keys: list[bytes], values: list[bytes]) -> None:
        """Put each key with its value (and record them), at C level."""
        deque(map(self.wb.put, keys, values), maxlen=0)
        self.ops.extend(zip(keys, values, strict=True))

    def delete(self, key: bytes, family: rocksdict.ColumnFamily | None = None) -> None:
        """Delete ``key`` from column family ``family`` (None: the default one), and record it."""
        self.wb.delete(key, family)
        self.ops.append((key, None))

    def delete_range(self, begin: bytes, end: bytes, family: rocksdict.ColumnFamily | None = None) -> None:
        """Delete the keys ``[begin, end)`` of column family ``family`` (None: the default one), and record it."""
        self.wb.delete_range(begin, end, family)
        self.ops.append((begin, RangeEnd(end)))

    def __len__(self) -> int:
        return len(self.wb)


class Shipper(Protocol):
    """Where a replicated range's primary sends each batch it writes (:class:`partition_server.replication.protocol.Outbox`)."""

    def stamp(self, wb: rocksdict.WriteBatch) -> None:
        """Add the batch's log position to ``wb`` (written atomically with it)."""

    def shipped(self, ops: Ops) -> None:
        """Take the operations of the batch just written, to send to the followers."""


class Tee:
    """The record of a store's write batches: on while a split is prepared (``records``), and always on
    a replicated range's primary (``log``). The store calls it under its write lock."""

    __slots__ = ("records", "log")

    def __init__(self) -> None:
        self.records: list[Ops] | None = None  # None: not recording
        self.log: Shipper | None = None  # None: not replicated (or not primary)

    def new_batch(self, record: bool = False) -> Any:
        """A batch for one write: a :class:`RecordingBatch` while recording or replicating, or when the caller
        wants its operations (``record``: an entity group transaction's, for the store's counts)."""
        if self.records is None and self.log is None and not record:
            return rocksdict.WriteBatch(raw_mode=True)
        return RecordingBatch()

    def write(self, db: rocksdict.Rdict, wb: Any, wo: rocksdict.WriteOptions) -> None:
        """Write ``wb`` (from :meth:`new_batch`) to ``db``; record it while recording, ship it while replicating."""
        if type(wb) is not RecordingBatch:
            db.write(wb, wo)
            return
        log = self.log
        if log is not None:
            log.stamp(wb.wb)
        db.write(wb.wb, wo)
        if self.records is not None:
            self.records.append(wb.ops)
        if log is not None:
            log.shipped(wb.ops)

    def begin(self) -> None:
        """Start recording."""
        self.records = []

    def take(self) -> list[Ops]:
        """The batches recorded since the last take (recording goes on)."""
        out, self.records = (self.records, []) if self.records is not None else ([], None)
        return out

    def stop(self) -> list[Ops]:
        """The batches recorded since the last take; recording stops."""
        out, self.records = self.records or [], None
        return out


def add_op(wb: rocksdict.WriteBatch, key: bytes, value: bytes | None | RangeEnd,
           family: rocksdict.ColumnFamily) -> None:
    """Add one recorded operation to ``wb`` (a follower's apply, a split's replay): a change-feed record's (a
    key under ``FEED_PREFIX``, the first of a range delete's keys for one) into ``family``, the store's feed
    family (:mod:`partition_server.store.feed`); any other into the default family."""
    cf = family if key.startswith(FEED_PREFIX) else None
    if value is None:
        wb.delete(key, cf)
    elif type(value) is RangeEnd:
        wb.delete_range(key, value.end, cf)
    else:
        wb.put(key, value, cf)  # type: ignore[arg-type]  # bytes here


def put_all(wb: Any, keys: list[bytes], values: list[bytes]) -> None:
    """Put each key with its value into ``wb``, a WriteBatch or a :class:`RecordingBatch`, at C level."""
    if type(wb) is RecordingBatch:
        wb.put_all(keys, values)
    else:
        deque(map(wb.put, keys, values), maxlen=0)
