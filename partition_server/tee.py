"""The write batches of a store whose split is being prepared, recorded for its halves
(:mod:`partition_server.split_job`)."""

from __future__ import annotations

import rocksdict


class RecordingBatch:
    """A WriteBatch that also keeps its put and delete operations, to replay them into a split's halves."""

    __slots__ = ("wb", "ops")

    def __init__(self) -> None:
        self.wb = rocksdict.WriteBatch(raw_mode=True)
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        """Put ``key`` (and record it)."""
        self.wb.put(key, value)
        self.ops.append((key, value))

    def delete(self, key: bytes) -> None:
        """Delete ``key`` (and record it)."""
        self.wb.delete(key)
        self.ops.append((key, None))

    def __len__(self) -> int:
        return len(self.wb)
