"""Request-id records of a range store: the stored answers that make retried writes exactly-once.

Layout (meta keys, see :mod:`partition_server.range_store`):

* ``REQ_PREFIX + request_id`` → ``msgpack([ts, kind, result])``: the answer of a write (``kind``
  "w", ``result`` the wire entity or nil) or of a batch (``kind`` "b", a list of them);
* ``REQT_PREFIX + >Q ts + request_id`` → ``b""``: the same records ordered oldest first, for purging.

Purging deletes index keys oldest first, so it is RocksDB's queue pattern: an iterator opened at the
start of the index would walk over the tombstone of every record purged before it until a compaction
drops them (a write rate 300x lower after the first 100,000 records). So every purge starts at a
cursor, the Timestamp of the last record it deleted (every older index key is already deleted); the
range store keeps it in its ``META_TS`` value, so the cursor survives restarts and moves.

A record is written in the same WriteBatch as the change it answers. Its value is spliced from the
answer's packed bytes (the bytes ``msgpack.packb([ts, kind, result])`` gives), so the answer is packed
once for the record and the reply alike.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import msgpack
import rocksdict

from rangetable import protocol
from rangetable.keys import META_PREFIX

REQ_PREFIX = META_PREFIX + b"req/"
REQT_PREFIX = META_PREFIX + b"reqt/"
REQT_END = META_PREFIX + b"reqt0"  # b"/" + 1
PURGE_EVERY = 1000  # request-id writes between age-based purges
PURGE_MAX_DELETES = 5000  # records one purge deletes at most (bounds one write's WriteBatch)
PURGE_CHUNK = 1000  # a full window is purged this far below its bound, so not every write purges
WRITE = b"\xa1w"  # the packed kinds
BATCH = b"\xa1b"

_TS = struct.Struct(">Q")
_pack = protocol.pack
_unpackb = msgpack.unpackb
MISSING: Any = object()


def record_puts(wb: rocksdict.WriteBatch, rid: bytes, ts: int, kind: bytes, answer: bytes) -> None:
    """Add the record of request ``rid`` (UTF-8) and its index key to ``wb``: ``kind`` is :data:`WRITE`
    or :data:`BATCH`, ``answer`` the packed result."""
    wb.put(REQ_PREFIX + rid, b"\x93" + _pack(ts) + kind + answer)
    wb.put(REQT_PREFIX + _TS.pack(ts) + rid, b"")


def lookup(db: rocksdict.Rdict, rid: bytes, cutoff: Callable[[], int]) -> tuple[Any, bytes | None]:
    """(the stored ``(kind, result)``, decoded, or :data:`MISSING`; the index key of an expired record
    to drop). A record older than ``cutoff()`` (ticks, asked only when a record exists) counts as missing.
    """
    rec = db.get(REQ_PREFIX + rid)
    if rec is None:
        return MISSING, None
    rts, kind, payload = _unpackb(rec)
    if rts >= cutoff():
        return (kind, payload), None
    return MISSING, REQT_PREFIX + _TS.pack(rts) + rid


def purge(db: rocksdict.Rdict, wb: rocksdict.WriteBatch, count: int, cutoff: int, limit: int,
          start_ts: int = 0) -> tuple[int, int]:
    """Add deletes of records older than ``cutoff`` or beyond ``limit`` (oldest first) to ``wb``.

    The walk starts at the index keys of Timestamp ``start_ts``: the caller vouches that every older
    index key is deleted already (0 walks the whole index). Returns (the new record count, the
    ``start_ts`` for the next purge).
    """
    plen = len(REQT_PREFIX)
    deleted = 0
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(REQT_END)
    it = db.keys(from_key=REQT_PREFIX + _TS.pack(start_ts), read_opt=ro)
    try:
        for k in it:
            if deleted >= PURGE_MAX_DELETES:
                break
            ts = _TS.unpack_from(k, plen)[0]
            if count <= limit and ts >= cutoff:
                break
            wb.delete(k)
            wb.delete(REQ_PREFIX + k[plen + 8 :])
            count -= 1
            deleted += 1
            start_ts = ts
    finally:
        it = None
    return count, start_ts
