"""A replica's recent log: the write batches of a range by sequence number, encoded for the wire.

Every replica of a replicated range keeps the batches it wrote (as primary) or applied (as follower) in
a bounded ring, so that whichever of them is primary can bring a follower up to date after a gap, a
restart or a change of primary without copying the store (:mod:`partition_server.replication.protocol`). A
follower further behind than the ring reaches is rebuilt from a checkpoint instead.

A batch is the list of operations the store wrote in one RocksDB WriteBatch — the same record the split
tee keeps (:mod:`partition_server.store.tee`) — so replicas stay logically identical: same keys, values,
Timestamps, request records and expiry index, whatever their files look like. Its position is stored
in the replica's own store with it (``META_REPL``: the epoch it was applied in and its sequence), in
the same WriteBatch, so a replica's position survives a crash exactly as its data does.
"""

from __future__ import annotations

import struct
import threading
import weakref
from collections import deque
from typing import Any

import msgpack
import rocksdict

from partition_server.store.feed import FEED_PREFIX, shared_tail
from partition_server.store.tee import Ops, RangeEnd, add_op
from rangetable.keys import META_PREFIX

_REPL = struct.Struct(">QQ")
PIN_FACTOR = 4  # a pinned log may grow to this many times its byte bound before the pin is dropped  # META_REPL: (epoch, seq)


def pack_position(epoch: int, seq: int) -> bytes:
    """``META_REPL``'s value: the epoch a batch was applied in and its sequence number."""
    return _REPL.pack(epoch, seq)


def unpack_position(value: bytes | None) -> tuple[int, int]:
    """(epoch, seq) from ``META_REPL``; (0, 0) for a store that never held a replicated batch."""
    return _REPL.unpack(value) if value else (0, 0)


def encode_ops(ops: Ops) -> bytes:
    """One batch's operations as bytes: ``[[key, value | nil | [end] | [head, n]], …]`` (``[end]``: a range
    delete; ``[head, n]``: a change-feed record whose last ``n`` bytes are the value the batch puts at its
    entity key, sent once: :func:`partition_server.store.feed.shared_tail`)."""
    out: list[list[Any]] = [[k, [v.end] if type(v) is RangeEnd else v] for k, v in ops]
    records = [o for o in out if o[0].startswith(FEED_PREFIX) and type(o[1]) is bytes]
    if records:  # a batch without feed records is sent as it is, at one comprehension's cost
        puts = {k: v for k, v in ops if type(v) is bytes and k < META_PREFIX}
        for o in records:
            n = shared_tail(o[0], o[1], puts)
            if n:
                o[1] = [o[1][:-n], n]
    return msgpack.packb(out, use_bin_type=True)


def decode_ops(blob: bytes) -> Ops:
    """The operations of :func:`encode_ops`; ValueError when ``blob`` is not such a batch."""
    try:
        items = msgpack.unpackb(blob, raw=False, use_list=True)
    except Exception as exc:  # msgpack raises several types for garbage
        raise ValueError(f"not a batch: {exc}") from None
    if not isinstance(items, list):
        raise ValueError("not a batch: expected a list of operations")
    ops: Ops = []
    puts: dict[bytes, bytes] | None = None  # the batch's puts, gathered at its first feed record that refers to one
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], bytes)):
            raise ValueError("not a batch: an operation is not [key, value]")
        k, v = item
        if v is None or isinstance(v, bytes):
            ops.append((k, v))
        elif isinstance(v, list) and len(v) == 1 and isinstance(v[0], bytes):
            ops.append((k, RangeEnd(v[0])))
        elif (isinstance(v, list) and len(v) == 2 and isinstance(v[0], bytes) and type(v[1]) is int
              and k.startswith(FEED_PREFIX)):
            if puts is None:  # the entity puts come before the records in a batch
                puts = {pk: pv for pk, pv in ops if type(pv) is bytes}
            value = puts.get(k[len(FEED_PREFIX) + 8:])
            if value is None or len(value) != v[1]:
                raise ValueError("not a batch: a feed record refers to a value the batch does not put")
            ops.append((k, v[0] + value))
        else:
            raise ValueError("not a batch: a value is neither bytes, nil, [end] nor [head, n]")
    return ops


def write_batch(ops: Ops, family: rocksdict.ColumnFamily) -> rocksdict.WriteBatch:
    """A raw WriteBatch carrying ``ops``, the change-feed records into ``family`` (:func:`add_op`)."""
    wb = rocksdict.WriteBatch(raw_mode=True)
    for k, v in ops:
        add_op(wb, k, v, family)
    return wb


RING_BUDGET_BYTES = 16 << 20  # every ring of the process together (--ring-budget-mb): seconds to minutes of writes


def budget_limit(last_seq: int, needed_after: int | None, pin_floor: int | None) -> int:
    """The newest batch the server-wide budget may drop from a ring: batches after ``needed_after``
    (what an in-sync follower still lacks: the primary's commit point; None for a follower's ring, whose
    batches its own store holds) and after ``pin_floor`` (a snapshot being pulled) are kept."""
    limit = last_seq if needed_after is None else min(needed_after, last_seq)
    return limit if pin_floor is None else min(limit, pin_floor)


def budget_share(budget: int, rings: int) -> int:
    """What one of ``rings`` rings may keep once their total is over ``budget``: an equal share."""
    return budget // max(1, rings)


class RingBudget:
    """The bytes every replica-log ring of one partition server may hold together — the shape of
    CockroachDB's Raft entry cache: one memory bound per store (16 MiB there too) shared by the recent log
    entries of all its ranges. Past the bound CockroachDB reads entries back from its on-disk log; we keep
    none, so a follower beyond its ring is rebuilt from a checkpoint (:mod:`partition_server.replication.snapshot`).

    Each ring keeps its own bounds; once the rings together hold more than :attr:`max_bytes`, the ring that
    grew, then every other ring beyond its share (the budget over the number of rings), drops its oldest
    batches — first those every replica acknowledged, then those only an out-of-sync follower still lacks (it
    is rebuilt from a snapshot, as when it falls behind any ring) — but never a batch an in-sync follower
    still lacks, nor one a snapshot being pulled has pinned. A ring may so use the room others leave. Every ring's changes happen under :attr:`lock` (stores are written by
    the server's loop and by background threads)."""

    def __init__(self, max_bytes: int = RING_BUDGET_BYTES) -> None:
        self.max_bytes = max_bytes
        self.lock = threading.RLock()  # re-entrant: a ring collected while it is held releases its bytes
        self.rings: weakref.WeakSet[ReplicaLog] = weakref.WeakSet()
        self.used = 0  # bytes every live ring holds

    def total(self) -> int:
        """Bytes held by every live ring."""
        return self.used

    def _release(self, held: _Held) -> None:
        """A ring was collected: its bytes are free."""
        with self.lock:
            self.used -= held.n
            held.n = 0

    def settle(self, grown: ReplicaLog) -> None:
        """Bring the rings back under the budget after ``grown`` grew (under :attr:`lock`): ``grown`` first gives
        back what it holds beyond its share, then every other ring beyond its share does — a ring that no longer
        grows (a range gone cold) keeps no more than its share while the others need the room."""
        over = self.used - self.max_bytes
        if over <= 0:
            return
        share = budget_share(self.max_bytes, len(self.rings))
        over -= grown.trim(share, over)
        if over <= 0:  # the usual case: the ring that grew gave back enough (no walk over every ring)
            return
        for ring in list(self.rings):
            if over <= 0:
                return
            if ring is not grown and ring.nbytes > share:
                over -= ring.trim(share, over)

    def usage(self) -> dict[str, int]:
        """``{"bytes", "batches", "rings"}`` held by every live ring now."""
        with self.lock:
            rings = list(self.rings)
            return {"bytes": sum(r.nbytes for r in rings), "batches": sum(len(r.entries) for r in rings),
                    "rings": len(rings)}


class _Held:
    """The bytes one ring holds, apart from the ring, so that the budget gets them back once it is collected."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


SERVER_BUDGET = RingBudget()  # one partition server per process: its rings share this unless given another


def configure_budget(max_bytes: int) -> None:
    """Size the process-wide ring budget (:data:`SERVER_BUDGET`); ValueError under 1 MiB."""
    if max_bytes < 1 << 20:
        raise ValueError("the replica-log budget needs at least 1 MiB")
    SERVER_BUDGET.max_bytes = max_bytes


class ReplicaLog:
    """The last batches of one range, ``(seq, encoded batch)`` in order, bounded by count and bytes, and with
    every other ring of the server by a :class:`RingBudget`.

    Appended to by the thread that writes the store (under its lock) and read by the server's loop;
    ``deque`` appends and pops are atomic in CPython, and readers copy what they take.
    """

    def __init__(self, last_seq: int = 0, max_batches: int = 20_000, max_bytes: int = 8 << 20,
                 budget: RingBudget | None = None) -> None:
        self.entries: deque[tuple[int, bytes]] = deque()
        self.last_seq = last_seq  # the newest batch's seq (also when the ring is empty)
        self.max_batches = max_batches
        self.max_bytes = max_bytes
        self._held = _Held()
        self.pins: dict[str, int] = {}  # holder -> seq: batches after it are kept (a snapshot being pulled)
        self.needed_after: int | None = None  # a primary's commit point: later batches an in-sync follower lacks
        self.budget = SERVER_BUDGET if budget is None else budget
        with self.budget.lock:
            self.budget.rings.add(self)
        weakref.finalize(self, self.budget._release, self._held)

    @property
    def nbytes(self) -> int:
        """Bytes of the batches held."""
        return self._held.n

    def pin(self, holder: str, seq: int) -> None:
        """Keep every batch after ``seq`` until :meth:`unpin` (up to :data:`PIN_FACTOR` times the byte bound)."""
        with self.budget.lock:  # appends in other threads read the pins
            self.pins[holder] = seq

    def unpin(self, holder: str) -> None:
        """Let the batches ``holder`` pinned go again."""
        with self.budget.lock:
            self.pins.pop(holder, None)

    def append(self, seq: int, blob: bytes) -> None:
        """Keep batch ``seq`` (the one after :attr:`last_seq`); the oldest go beyond this ring's bounds, or
        beyond its share of the server's budget (see :class:`RingBudget`)."""
        if seq != self.last_seq + 1:
            raise ValueError(f"batch {seq} does not follow {self.last_seq}")
        budget = self.budget
        with budget.lock:
            self.entries.append((seq, blob))
            self.last_seq = seq
            self._held.n += len(blob)
            budget.used += len(blob)
            floor = min(self.pins.values()) if self.pins else None
            while self.entries and (len(self.entries) > self.max_batches or self.nbytes > self.max_bytes):
                if floor is not None and self.entries[0][0] > floor:
                    if self.nbytes <= PIN_FACTOR * self.max_bytes:
                        break
                    self.pins.clear()  # a snapshot that takes this long is given up: its follower is rebuilt again
                    floor = None
                self._drop_oldest()
            if budget.used > budget.max_bytes:
                budget.settle(self)

    def trim(self, share: int, over: int) -> int:
        """Drop the oldest batches the budget may drop while this ring holds more than ``share`` and the
        rings more than the budget (by ``over`` bytes); returns the bytes dropped. Under the budget's lock."""
        floor = min(self.pins.values()) if self.pins else None
        limit = budget_limit(self.last_seq, self.needed_after, floor)
        entries = self.entries
        dropped = 0
        while entries and self.nbytes > share and dropped < over and entries[0][0] <= limit:
            dropped += self._drop_oldest()
        return dropped

    def _drop_oldest(self) -> int:
        _, old = self.entries.popleft()
        self._held.n -= len(old)
        self.budget.used -= len(old)
        return len(old)

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
            try:
                s, blob = entries[i]
            except IndexError:  # another thread trimmed the ring meanwhile: the next call goes on
                break
            if s != (out[-1][0] if out else seq) + 1:
                break  # trimmed meanwhile (only the first can be): reaches() tells the caller
            out.append((s, blob))
            size += len(blob)
            if size >= max_bytes:
                break
        return out
