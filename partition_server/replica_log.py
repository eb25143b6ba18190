"""A replica's recent log: the write batches of a range by sequence number, encoded for the wire.

Every replica of a replicated range keeps the batches it wrote (as primary) or applied (as follower) in
a bounded ring, so that whichever of them is primary can bring a follower up to date after a gap, a
restart or a change of primary without copying the store (:mod:`partition_server.replication`). A
follower further behind than the ring reaches is rebuilt from a checkpoint instead.

A batch is the list of operations the store wrote in one RocksDB WriteBatch — the same record the split
tee keeps (:mod:`partition_server.tee`) — so replicas stay logically identical: same keys, values,
Timestamps, request records and expiry index, whatever their files look like. Its position is stored
in the replica's own store with it (``META_REPL``: the epoch it was applied in and its sequence), in
the same WriteBatch, so a replica's position survives a crash exactly as its data does.
"""

from __future__ import annotations

import struct
from collections import deque

import msgpack
import rocksdict

from partition_server.tee import Ops, RangeEnd

_REPL = struct.Struct(">QQ")
PIN_FACTOR = 4  # a pinned log may grow to this many times its byte bound before the pin is dropped  # META_REPL: (epoch, seq)


def pack_position(epoch: int, seq: int) -> bytes:
    """``META_REPL``'s value: the epoch a batch was applied in and its sequence number."""
    return _REPL.pack(epoch, seq)


def unpack_position(value: bytes | None) -> tuple[int, int]:
    """(epoch, seq) from ``META_REPL``; (0, 0) for a store that never held a replicated batch."""
    return _REPL.unpack(value) if value else (0, 0)


def encode_ops(ops: Ops) -> bytes:
    """One batch's operations as bytes: ``[[key, value | nil | [end]], …]`` (``[end]``: a range delete)."""
    return msgpack.packb([[k, [v.end] if isinstance(v, RangeEnd) else v] for k, v in ops], use_bin_type=True)


def decode_ops(blob: bytes) -> Ops:
    """The operations of :func:`encode_ops`; ValueError when ``blob`` is not such a batch."""
    try:
        items = msgpack.unpackb(blob, raw=False, use_list=True)
    except Exception as exc:  # msgpack raises several types for garbage
        raise ValueError(f"not a batch: {exc}") from None
    if not isinstance(items, list):
        raise ValueError("not a batch: expected a list of operations")
    ops: Ops = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], bytes)):
            raise ValueError("not a batch: an operation is not [key, value]")
        k, v = item
        if v is None or isinstance(v, bytes):
            ops.append((k, v))
        elif isinstance(v, list) and len(v) == 1 and isinstance(v[0], bytes):
            ops.append((k, RangeEnd(v[0])))
        else:
            raise ValueError("not a batch: a value is neither bytes, nil nor [end]")
    return ops


def write_batch(ops: Ops) -> rocksdict.WriteBatch:
    """A raw WriteBatch carrying ``ops``."""
    wb = rocksdict.WriteBatch(raw_mode=True)
    for k, v in ops:
        if v is None:
            wb.delete(k)
        elif isinstance(v, RangeEnd):
            wb.delete_range(k, v.end)
        else:
            wb.put(k, v)
    return wb


class ReplicaLog:
    """The last batches of one range, ``(seq, encoded batch)`` in order, bounded by count and bytes.

    Appended to by the thread that writes the store (under its lock) and read by the server's loop;
    ``deque`` appends and pops are atomic in CPython, and readers copy what they take.
    """

    def __init__(self, last_seq: int = 0, max_batches: int = 20_000, max_bytes: int = 8 << 20) -> None:
        self.entries: deque[tuple[int, bytes]] = deque()
        self.last_seq = last_seq  # the newest batch's seq (also when the ring is empty)
        self.max_batches = max_batches
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.pins: dict[str, int] = {}  # holder -> seq: batches after it are kept (a snapshot being pulled)

    def pin(self, holder: str, seq: int) -> None:
        """Keep every batch after ``seq`` until :meth:`unpin` (up to :data:`PIN_FACTOR` times the byte bound)."""
        self.pins[holder] = seq

    def unpin(self, holder: str) -> None:
        """Let the batches ``holder`` pinned go again."""
        self.pins.pop(holder, None)

    def append(self, seq: int, blob: bytes) -> None:
        """Keep batch ``seq`` (the one after :attr:`last_seq`); the oldest go beyond the bounds."""
        if seq != self.last_seq + 1:
            raise ValueError(f"batch {seq} does not follow {self.last_seq}")
        self.entries.append((seq, blob))
        self.last_seq = seq
        self.nbytes += len(blob)
        floor = min(self.pins.values()) if self.pins else None
        while self.entries and (len(self.entries) > self.max_batches or self.nbytes > self.max_bytes):
            if floor is not None and self.entries[0][0] > floor:
                if self.nbytes <= PIN_FACTOR * self.max_bytes:
                    break
                self.pins.clear()  # a snapshot that takes this long is given up: its follower is rebuilt again
                floor = None
            _, old = self.entries.popleft()
            self.nbytes -= len(old)

    def reaches(self, seq: int) -> bool:
        """True when every batch after ``seq`` is still here (a follower at ``seq`` can catch up)."""
        if seq >= self.last_seq:
            return True
        return bool(self.entries) and self.entries[0][0] <= seq + 1

    def since(self, seq: int, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
        """The batches after ``seq``, oldest first, up to about ``max_bytes`` (at least one)."""
        entries = self.entries
        if not entries or seq >= self.last_seq:
            return []
        first = entries[0][0]
        start = max(0, seq + 1 - first)
        out: list[tuple[int, bytes]] = []
        size = 0
        for i in range(start, len(entries)):
            s, blob = entries[i]
            out.append((s, blob))
            size += len(blob)
            if size >= max_bytes:
                break
        return out
