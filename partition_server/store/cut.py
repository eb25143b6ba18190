"""Reads at a cut: what a range of a secondary cluster answers while it applies its source's change feed.

A secondary cluster applies another cluster's feed (``../shared/DESIGN.md``, "A secondary cluster"; issue 35)
and answers every read as of one cut ``T`` across all ranges of a table: never a state the source did not pass
through, never part of an entity group transaction (whose records share one Timestamp). Its ranges apply
the source's records as they come, past ``T`` too, so each change also writes an **undo record** in the same
WriteBatch, the entity's stored value just before that change::

    UNDO_PREFIX + entity key + b"\\x00" + >Q Timestamp  ->  the stored value before (b"": it was absent)

(MVCC's undo log, as Oracle's and InnoDB's consistent reads use it.) The version of an entity at ``T`` is then
the undo record of its first change after ``T``, or, when it changed at or before ``T`` only, the current
one. Undo records sort by entity key and then Timestamp, so a scan merges them into the entities' own order
(:func:`versions_at`) and a point read takes one seek (:func:`version_at`).

Once no reader asks for a cut below ``F`` the records at or below it are deleted (:func:`expired`), found in
time order through one more key written with each::

    UNDO_TIME_PREFIX + >Q Timestamp + entity key  ->  b""

and ``F`` is kept as the range's **floor** (:data:`UNDO_FLOOR`): a read at a cut below it is refused
(:func:`check_floor`), never answered from the records that are left.

Entity keys never contain ``b"\\x00"`` after their RowKey nor ``b"\\xff"`` (:mod:`rangetable.keys`), so
``key + b"\\x00"`` sorts right after ``key`` and before every longer key: the undo records of one entity are
contiguous, in the entities' order. They sit under :data:`~rangetable.keys.META_PREFIX`, past every entity,
so no entity scan meets them; a split's halves keep all of them and each reads only its own span, as they do
the change feed's records.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import rocksdict

from rangetable.errors import TableError
from rangetable.keys import META_PREFIX

UNDO_PREFIX = META_PREFIX + b"u/"
UNDO_END = META_PREFIX + b"u0"  # the byte after "/": the end of the undo records' span
UNDO_TIME_PREFIX = META_PREFIX + b"ut/"  # the undo records in time order (past UNDO_END: outside their span)
UNDO_FLOOR = META_PREFIX + b"ufloor"  # >Q: no read at a cut below it is answered (past UNDO_END too)
ABSENT = b""  # an undo record's value when the entity did not exist before the change
_TS = struct.Struct(">Q")
_TAIL = 1 + _TS.size  # b"\x00" + Timestamp after the entity key


def undo_key(key: bytes, ts: int) -> bytes:
    """The undo record's key of the change of entity ``key`` at Timestamp ``ts``."""
    return UNDO_PREFIX + key + b"\x00" + _TS.pack(ts)


def time_key(key: bytes, ts: int) -> bytes:
    """The key that finds, in time order, the undo record of the change of ``key`` at ``ts``."""
    return UNDO_TIME_PREFIX + _TS.pack(ts) + key


def parse_undo_key(ukey: bytes) -> tuple[bytes, int]:
    """(entity key, Timestamp) of an undo record's key."""
    return ukey[len(UNDO_PREFIX):-_TAIL], _TS.unpack_from(ukey, len(ukey) - _TS.size)[0]


def span(lo: bytes, hi: bytes | None) -> tuple[bytes, bytes]:
    """The undo records' key span of the entity keys ``[lo, hi)`` (``hi`` None: to the end)."""
    return UNDO_PREFIX + lo, UNDO_END if hi is None or hi >= META_PREFIX else UNDO_PREFIX + hi


def _first_after(undo: Iterator[tuple[bytes, bytes]], cut: int) -> Iterator[tuple[bytes, bytes | None]]:
    """Per entity key with a change after ``cut``, in key order: (key, its stored value at ``cut``, None when it
    was absent), from undo records in key order."""
    key = b""
    done = True  # the current key's version at the cut is found (or it has no record after the cut)
    for ukey, before in undo:
        k, ts = parse_undo_key(ukey)
        if k != key:
            key, done = k, False
        if not done and ts > cut:
            done = True
            yield k, (before if before != ABSENT else None)


def versions_at(entities: Iterator[tuple[bytes, bytes]], undo: Iterator[tuple[bytes, bytes]],
                cut: int) -> Iterator[tuple[bytes, bytes]]:
    """Each entity as it stood at ``cut``, in key order: the current ``entities`` (key, stored value) merged
    with the ``undo`` records of the same span (key, value). An entity changed after the cut is answered by the
    undo record of its first change after it: absent there, it is left out; deleted since, it is answered."""
    changed = _first_after(undo, cut)
    m = next(entities, None)
    u = next(changed, None)
    while m is not None or u is not None:
        if u is None or (m is not None and m[0] < u[0]):
            assert m is not None
            yield m
            m = next(entities, None)
            continue
        if m is not None and m[0] == u[0]:
            m = next(entities, None)
        if u[1] is not None:
            yield u[0], u[1]
        u = next(changed, None)


def version_at(db: Any, key: bytes, cut: int, current: bytes | None) -> bytes | None:
    """The stored value of entity ``key`` at ``cut`` (None: absent then), ``current`` being its value now: one
    seek to its first undo record after the cut."""
    it = db.iter()
    try:
        it.seek(undo_key(key, cut + 1))
        if it.valid():
            ukey = it.key()
            if len(ukey) == len(UNDO_PREFIX) + len(key) + _TAIL and ukey.startswith(UNDO_PREFIX + key):
                before = it.value()
                return before if before != ABSENT else None
        return current
    finally:
        it = None  # a live iterator would keep the DB LOCK after close()


def items(db: Any, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """The undo records of entity keys ``[lo, hi)``, in order."""
    start, end = span(lo, hi)
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(end)
    it = db.items(from_key=start, read_opt=ro)
    try:
        yield from it
    finally:
        it = None  # a live iterator would keep the DB LOCK after close()


def after(db: Any, lo: bytes, hi: bytes | None, at: int) -> tuple[dict[bytes, bytes | None], list[bytes]]:
    """What sealing the entity keys ``[lo, hi)`` at cut ``at`` takes: each entity changed after it with its
    stored value at ``at`` (None: absent then), and the keys of the undo records after it (each record's key and
    time key) to delete."""
    restore: dict[bytes, bytes | None] = {}
    gone: list[bytes] = []
    for ukey, before in items(db, lo, hi):  # one pass: an entity's records come in Timestamp order
        key, ts = parse_undo_key(ukey)
        if ts > at:
            gone += [ukey, time_key(key, ts)]
            if key not in restore:  # its first change after the cut: the value then
                restore[key] = before if before != ABSENT else None
    return restore, gone


def expired(db: Any, upto: int, limit: int, start: bytes = UNDO_TIME_PREFIX) -> list[bytes]:
    """The keys to delete of the undo records at or below ``upto`` (no reader needs them once every cut asked is
    at or above it), at most ``limit`` records: each one's time key and record key. ``start``: the time key to
    read from — past those deleted before, whose tombstones a read from the beginning would step over one by one
    until a compaction drops them (a queue's deletes: the cost grew with every trim)."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(UNDO_TIME_PREFIX + _TS.pack(upto + 1))
    it = db.keys(from_key=max(start, UNDO_TIME_PREFIX), read_opt=ro)
    out: list[bytes] = []
    try:
        for tkey in it:
            at = len(UNDO_TIME_PREFIX)
            out += [tkey, undo_key(tkey[at + _TS.size:], _TS.unpack_from(tkey, at)[0])]
            if len(out) >= 2 * limit:
                break
    finally:
        it = None  # a live iterator would keep the DB LOCK after close()
    return out


def floor(db: Any) -> int:
    """The range's floor: the lowest cut it answers reads at (0: nothing trimmed)."""
    raw = db.get(UNDO_FLOOR)
    return 0 if raw is None else _TS.unpack(raw)[0]


def pack_floor(ts: int) -> bytes:
    """The stored form of a floor."""
    return _TS.pack(ts)


def check_floor(db: Any, at: int) -> None:
    """ServerBusy for a read at a cut below the range's floor: the undo records it needs are gone (a reader whose
    cut is far older than the secondary's: it asks again with a newer one)."""
    low = floor(db)
    if at < low:
        raise TableError("ServerBusy", f"a read at a cut older than this range keeps (below {low}): the "
                         "secondary's cuts moved on, ask again")
