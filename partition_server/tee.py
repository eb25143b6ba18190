"""The write batches of a store whose split is being prepared, recorded for its halves
(:mod:`partition_server.split_job`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import rocksdict


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

    def put(self, key: bytes, value: bytes) -> None:
        """Put ``key`` (and record it)."""
        self.wb.put(key, value)
        self.ops.append((key, value))

    def delete(self, key: bytes) -> None:
        """Delete ``key`` (and record it)."""
        self.wb.delete(key)
        self.ops.append((key, None))

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete the keys ``[begin, end)`` (and record it)."""
        self.wb.delete_range(begin, end)
        self.ops.append((begin, RangeEnd(end)))

    def __len__(self) -> int:
        return len(self.wb)


class Tee:
    """The record of a store's write batches, on while a split is prepared. The store calls it under
    its write lock."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[Ops] | None = None  # None: not recording

    def new_batch(self) -> Any:
        """A batch for one write: a :class:`RecordingBatch` while recording."""
        return rocksdict.WriteBatch(raw_mode=True) if self.records is None else RecordingBatch()

    def write(self, db: rocksdict.Rdict, wb: Any, wo: rocksdict.WriteOptions) -> None:
        """Write ``wb`` (from :meth:`new_batch`) to ``db``, and record it while recording."""
        if self.records is None:
            db.write(wb, wo)
        else:
            db.write(wb.wb, wo)
            self.records.append(wb.ops)

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
