"""Request-id records of a range store: the stored answers that make retried writes exactly-once.

Layout (meta keys, see :mod:`partition_server.store.range_store`):

* ``REQ_PREFIX + request_id`` → ``msgpack([ts, kind, result])``: the answer of a write (``kind``
  "w", ``result`` the wire entity or nil) or of a batch (``kind`` "b", a list of them), or the error it
  was refused with (``result`` ``{"error": {"code", "message", "index"}}``, as a reply carries it: :func:`refusal`);
* ``REQT_PREFIX + >Q ts + request_id`` → ``>I size``: the same records ordered oldest first, for
  purging, with the size of each record (``b""`` in stores written before sizes were kept: 0).

A range keeps at most ``request_window_max`` records, of at most ``request_window_bytes`` together,
none older than ``request_window_s`` (:class:`Window` counts them; the range store persists it).

Purging deletes index keys oldest first, so it is RocksDB's queue pattern: an iterator opened at the
start of the index would walk over the tombstone of every record purged before it until a compaction
drops them (a write rate 300x lower after the first 100,000 records). So every purge starts at a
cursor, the Timestamp of the last record it deleted (every older index key is already deleted); the
range store keeps it in its ``META_TS`` value, so the cursor survives restarts and moves. The index keys
a purge walked go in one range tombstone (a run of point tombstones in key order made every flushed SST a
candidate for the compact-on-deletion collector); each record key, in random order, gets its own.

A record is written in the same WriteBatch as the change it answers. Its value is spliced from the
answer's packed bytes (the bytes ``msgpack.packb([ts, kind, result])`` gives), so the answer is packed
once for the record and the reply alike.

A request the range *refused* with a final error (not found, already exists, a failed condition: any code
that is not retriable) gets a record too, in a WriteBatch of its own, replicated like any other: the range
decided that request against what it held then, and a retry must get that answer, not a new decision.
Without it, an attempt still on its way — a frontend retrying a request whose client had already been
answered through another attempt — would be decided again later: a delete answered "not found" could then
delete a row written after the client saw it done (the netsplit drill's lost write, docs/drills.md).
Retriable refusals (``ServerBusy``, ``RangeBusy``…) are not recorded: the request is meant to run again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, cast

import msgpack
import rocksdict

from partition_server.store.fast_path import request_record
from rangetable import protocol
from rangetable.edm import Entity
from rangetable.errors import TableError
from rangetable.keys import META_PREFIX
from rangetable.protocol import entity_to_wire

REQ_PREFIX = META_PREFIX + b"req/"
REQT_PREFIX = META_PREFIX + b"reqt/"
REQT_END = META_PREFIX + b"reqt0"  # b"/" + 1
PURGE_EVERY = 1000  # request-id writes between age-based purges
PURGE_MAX_DELETES = 5000  # records one purge deletes at most (bounds one write's WriteBatch)
PURGE_CHUNK = 1000  # a full window is purged this far below its bound, so not every write purges
WRITE = protocol.pack("w")  # the packed kinds
BATCH = protocol.pack("b")

_TS = struct.Struct(">Q")
_SIZE = struct.Struct(">I")
MISSING: Any = object()


class Window(NamedTuple):
    """The request records of a range: how many, their bytes, and the Timestamp the next purge starts
    at (every index key older than it is deleted already; 0 = walk the whole index)."""

    count: int = 0  # type: ignore[assignment]  # hides tuple.count, as meant; mypy flags any field so named
    nbytes: int = 0
    purge_from: int = 0


_META = struct.Struct(">QQQQ")
_META_V1 = struct.Struct(">QQ")  # before the purge cursor and the records' bytes
_META_V2 = struct.Struct(">QQQ")  # before the records' bytes
_NO_RECORDS = Window()


def pack_meta(last_ts: int, window: Window = _NO_RECORDS) -> bytes:
    """Encode a range store's ``META_TS`` value: its last Timestamp and its request-record window."""
    return _META.pack(last_ts, max(window.count, 0), window.purge_from, max(window.nbytes, 0))


def unpack_meta(v: bytes | None) -> tuple[int, Window]:
    """Decode a ``META_TS`` value into (last_ts, request-record window); zeros when absent, and zero
    cursor and bytes from the older 8-, 16- and 24-byte forms."""
    if not v:
        return 0, _NO_RECORDS
    if len(v) == 8:
        return _TS.unpack(v)[0], _NO_RECORDS
    if len(v) == 16:
        ts, count = _META_V1.unpack(v)
        return ts, Window(count)
    if len(v) == 24:
        ts, count, purge_from = _META_V2.unpack(v)
        return ts, Window(count, 0, purge_from)
    ts, count, purge_from, nbytes = _META.unpack(v)
    return ts, Window(count, nbytes, purge_from)


def record_puts(wb: rocksdict.WriteBatch, rid: bytes, ts: int, rec: bytes) -> None:
    """Add request ``rid``'s (UTF-8) record ``rec`` (see :func:`~partition_server.store.fast_path.request_record`) and its index key to ``wb``."""
    wb.put(REQ_PREFIX + rid, rec)
    wb.put(REQT_PREFIX + _TS.pack(ts) + rid, _SIZE.pack(len(rec)))


def lookup(db: rocksdict.Rdict, rid: bytes, cutoff: Callable[[], int]) -> tuple[Any, tuple[bytes, int] | None]:
    """(the stored ``(kind, result)``, decoded, or :data:`MISSING`; the index key and size of an expired
    record to drop). A record older than ``cutoff()`` (ticks, asked only when a record exists) counts
    as missing.
    """
    rec = db.get(REQ_PREFIX + rid)
    if rec is None:
        return MISSING, None
    rts, kind, payload = msgpack.unpackb(rec)
    if rts >= cutoff():
        return (kind, payload), None
    return MISSING, (REQT_PREFIX + _TS.pack(rts) + rid, len(rec))


def purge(db: rocksdict.Rdict, wb: rocksdict.WriteBatch, w: Window, cutoff: int, max_count: int,
          max_bytes: int, skip: bytes | None = None) -> Window:
    """Add deletes of records older than ``cutoff``, or beyond ``max_count`` records or ``max_bytes``
    (oldest first), to ``wb``; returns the window after them.

    The walk starts at the index keys of Timestamp ``w.purge_from``, so it never steps over what earlier
    purges deleted. ``skip`` is an index key ``wb`` already deletes (and ``w`` no longer counts).
    """
    plen = len(REQT_PREFIX)
    count, nbytes, start_ts = w
    first = REQT_PREFIX + _TS.pack(start_ts)
    last = None
    deleted = 0
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(REQT_END)
    it: Iterator[tuple[bytes, bytes]] | None
    # raw mode: bytes keys and values (rocksdict's stub types the keys every mode allows)
    it = cast("Iterator[tuple[bytes, bytes]]", db.items(from_key=first, read_opt=ro))
    try:
        for k, v in it:
            if deleted >= PURGE_MAX_DELETES:
                break
            ts = _TS.unpack_from(k, plen)[0]
            if count <= max_count and nbytes <= max_bytes and ts >= cutoff:
                break
            start_ts, last = ts, k
            if k == skip:
                continue
            wb.delete(REQ_PREFIX + k[plen + 8 :])
            count -= 1
            nbytes -= _SIZE.unpack(v)[0] if len(v) == 4 else 0
            deleted += 1
    finally:
        it = None
    if last is not None:
        # every index key walked goes in one range tombstone, not one tombstone each: a run of point
        # tombstones in key order would mark each flushed SST for the compact-on-deletion collector
        wb.delete_range(first, last + b"\x00")
    return Window(max(count, 0), max(nbytes, 0), start_ts)


def add_record(db: rocksdict.Rdict, wb: rocksdict.WriteBatch, w: Window, rid: bytes, ts: int, kind: bytes,
               answer: bytes, stale: tuple[bytes, int] | None, cutoff: Callable[[], int], bounds: tuple[int, int],
               purge_now: bool) -> Window:
    """Add request ``rid``'s record (see :func:`~partition_server.store.fast_path.request_record`) to ``wb``, with the delete of its ``stale``
    expired record (see :func:`lookup`) and a purge when the window overflows ``bounds`` (records,
    bytes) or ``purge_now`` (the periodic age purge: records older than ``cutoff()``, asked only
    then); returns the window after the batch."""
    count, nbytes, purge_from = w
    if stale is not None:
        wb.delete(stale[0])
        count, nbytes = count - 1, nbytes - stale[1]
    rec = request_record(ts, kind, answer)
    count, nbytes = count + 1, nbytes + len(rec)
    max_count, max_bytes = bounds
    full = count > max_count or nbytes > max_bytes
    if full or purge_now:
        # a full window is purged a chunk below its bounds; deletes go before the new record's puts
        count, nbytes, purge_from = purge(
            db, wb, Window(count, nbytes, purge_from), cutoff(),
            max_count - min(PURGE_CHUNK, max_count // 64) if full else max_count,
            max_bytes - max_bytes // 64 if full else max_bytes, stale and stale[0])
    record_puts(wb, rid, ts, rec)
    return Window(count, nbytes, purge_from)


# --- stored answers -----------------------------------------------------------------------------


def _from_wire(x: list | None) -> Entity | None:
    return None if x is None else Entity(x[0], x[1], x[2], x[3])


def packed_answer(e: Entity | None) -> bytes:
    """A stored answer (an entity, or None for a delete) packed in wire form."""
    return protocol.pack(None if e is None else entity_to_wire(e))


def refusal(exc: TableError) -> bytes | None:
    """The packed ``result`` recording that a request was refused with ``exc``; None when the refusal is
    retriable (the request is meant to run again, so nothing is recorded)."""
    if exc.code.retriable:
        return None
    wire = exc.to_wire()  # the error as a reply carries it; a message quoting a lone surrogate is escaped
    wire["message"] = wire["message"].encode("utf-8", "backslashreplace").decode("utf-8")
    return protocol.pack({"error": wire})


def stored_answer(prev: tuple[str, Any]) -> Any:
    """A request record's ``(kind, result)`` (see :func:`lookup`) as ``RangeStore.write`` / ``RangeStore.batch``
    answer; raises the recorded TableError of a request that was refused (:func:`refusal`)."""
    kind, payload = prev
    if isinstance(payload, dict):
        raise TableError.from_wire(payload["error"])
    if kind == "b":  # a batch answered with its Timestamp alone stored only that
        return payload if isinstance(payload, int) else [_from_wire(x) for x in payload]
    return _from_wire(payload)


BATCH_ANSWERS = ("entities", "wire", "timestamp")


def replayed_batch(first: Any, answer: str) -> Any:
    """A batch's stored answer (entities, or a Timestamp) in the shape ``answer`` asks for."""
    if answer == "wire":
        return [] if isinstance(first, int) else [packed_answer(e) for e in first]  # [] : the first call was quiet
    return first
