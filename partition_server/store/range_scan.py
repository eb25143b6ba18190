"""Forward scans over a range store's entity keys (used by :meth:`RangeStore.scan`).

One loop serves both forms of a page: decoded :class:`~rangetable.edm.Entity` tuples, or each
entity already in wire form (``msgpack([pk, rk, ts, props])``, see :mod:`partition_server.store.fast_path`).
The wire form decodes a stored value only as far as the filter and ``$select`` need: nothing for
no filter or a filter on PartitionKey/RowKey, the Timestamp alone for a filter on it, everything
otherwise, and it splices the stored bytes into the reply unless ``$select`` changes them.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import rocksdict

from partition_server.store import cut
from partition_server.store.fast_path import entity as wire_entity
from partition_server.store.fast_path import key_prefix, stored_ts
from partition_server.store.prefilter import Needles, matcher
from rangetable import protocol
from rangetable.edm import Entity
from rangetable.filter import Predicate
from rangetable.keys import META_PREFIX

_PROBE_SKIP = 256  # deleted (or overwritten) versions span_may_hold skips before giving up
_NOTHING, _TS, _FULL = 0, 1, 2  # how much of a stored value to decode
_ENTITY, _SPLICE, _PACK = 0, 1, 2  # what to append per match


def fills_cache(lo: bytes, hi: bytes | None) -> bool:
    """Whether a scan of ``[lo, hi)`` should keep the blocks it reads in the block cache: only when
    it stays within one PartitionKey (a partition query, likely to be asked again). A scan across
    partitions (a table scan, a paged export) reads each block once; caching its blocks would evict
    the hot set that point reads and partition queries use (as HBase's ``Scan.setCacheBlocks(false)``
    for full scans)."""
    if hi is None:
        return False
    return hi <= lo.partition(b"\x00")[0] + b"\x01"


def is_point_span(lo: bytes, hi: bytes | None) -> bool:
    """Whether ``[lo, hi)`` holds exactly one entity key, ``lo`` (PartitionKey and RowKey both fixed,
    as the planner makes for ``PartitionKey eq … and RowKey eq …``): read it with a get, not an iterator."""
    return hi is not None and hi == lo + b"\x00" and b"\x00" in lo and lo < META_PREFIX


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC paused for one bounded page. Its loop allocates many short-lived containers; the
    GC would walk the whole heap again and again (halving scan speed in a big process). Nothing here
    forms cycles."""
    gc_was_on = gc.isenabled()
    if gc_was_on:
        gc.disable()
    try:
        yield
    finally:
        if gc_was_on:
            gc.enable()


def _collect(
    pairs: Iterator[tuple[bytes, bytes]],
    predicate: Predicate | None,
    select: list[str] | None,
    limit: int,
    budget_s: float | None,
    wire: bool,
    needs_ts: bool,
    needs_props: bool,
    oldest: int,
    wanted: Needles = (),
) -> tuple[list[Any], int, bool]:
    """The matches among stored ``(key, value)`` pairs in key order (see :func:`scan_span` for the
    arguments), how many pairs were examined, and whether ``limit`` or ``budget_s`` stopped it before
    ``pairs`` ran out."""
    may_match = matcher(wanted) if wanted else None
    limit = max(1, limit)
    sel = tuple(select) if select is not None else None
    decode = _FULL if not wire or needs_props or sel is not None else _TS if needs_ts or oldest else _NOTHING
    emit = _ENTITY if not wire else _SPLICE if sel is None else _PACK
    want_rk = not wire or predicate is not None or sel is not None
    deadline = time.perf_counter() + budget_s if budget_s is not None else None
    perf = time.perf_counter
    unpack = msgpack.unpackb
    pack = protocol.pack
    out: list[Any] = []
    append = out.append
    n = 0
    last_pkb = b""  # the PartitionKey bytes that pk and prefix belong to
    pk = rk = ""
    prefix = key_prefix(last_pkb)
    ts: Any = None
    props: Any = None
    for k, v in pairs:
        n += 1
        if may_match is not None and not may_match(v):  # fast path: prefilter.py
            if not n & 63 and deadline is not None and perf() >= deadline:
                break
            continue
        pkb, _, rkb = k.partition(b"\x00")
        if pkb != last_pkb:
            last_pkb = pkb
            pk = pkb.decode()
            prefix = key_prefix(pkb)
        if want_rk:
            rk = rkb.decode()
        if decode:
            if decode == _FULL:
                ts, props = unpack(v)
            else:
                ts = stored_ts(v)
        if oldest and ts < oldest:  # expired: invisible (oldest is 0 without a TTL)
            pass
        elif predicate is None or predicate(pk, rk, ts, props):
            if emit == _SPLICE:
                append(wire_entity(prefix, rkb, v))
            else:
                if sel is not None:
                    props = {name: props[name] for name in sel if name in props}
                append(Entity(pk, rk, ts, props) if emit == _ENTITY else pack([pk, rk, ts, props]))
            if len(out) >= limit:
                break
        if not n & 63 and deadline is not None and perf() >= deadline:
            break
    else:
        return out, n, False
    return out, n, True


def scan_span(
    db: Any,
    lo: bytes,
    hi: bytes | None,
    predicate: Predicate | None = None,
    select: list[str] | None = None,
    limit: int = 1000,
    budget_s: float | None = None,
    *,
    wire: bool = False,
    needs_ts: bool = True,
    needs_props: bool = True,
    oldest: int = 0,
    points: list[bytes] | None = None,
    wanted: Needles = (),
    at: int | None = None,
) -> tuple[list[Any], bytes | None]:
    """Scan entity keys in ``[lo, hi)`` of ``db`` (``hi`` None: to the end of the entities).

    Returns the matches of ``predicate(pk, rk, ts, props)`` (all if None), props projected to
    ``select``, stopping after ``limit`` matches or once ``budget_s`` seconds have passed (checked
    every 64 entities), and the key of the first entity not examined (None when the span is
    exhausted). Matches are Entity tuples, or with ``wire=True`` the bytes of each entity's wire
    form; then ``needs_ts`` / ``needs_props`` say what the predicate reads (it gets None for the
    rest). Entities with a Timestamp below ``oldest`` (expired under the table's TTL) are skipped.
    ``wanted`` (:func:`partition_server.store.prefilter.needles` of the filter ``predicate`` was compiled
    from) skips, undecoded, values that cannot match.

    With ``points`` (entity keys, ascending: the point spans ``[key, key\\x00)`` of an ``or`` of point
    keys, in place of ``[lo, hi)``) the page is the one a scan of each of those spans in turn would
    give, read with one RocksDB multi-get instead of an iterator per key; a stopped page then goes on
    after the last key examined, found or not.

    With ``at`` every entity is read as it stood at that cut of a secondary cluster (:mod:`.cut`): the
    entities merged with their undo records.
    """
    if points is not None:
        return _read_points(db, points, at, predicate, select, limit, budget_s, wire, needs_ts, needs_props, oldest,
                            wanted)
    upper = META_PREFIX if hi is None or hi > META_PREFIX else hi
    if lo >= upper:
        return [], None
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(upper)  # never set_iterate_lower_bound (rocksdict bug)
    ro.fill_cache(fills_cache(lo, hi))  # type: ignore[call-arg]  # the stub is wrong: it takes a bool
    it = db.items(from_key=lo, read_opt=ro)
    pairs = it
    if at is not None:  # a secondary cluster's read at a cut
        cut.check_floor(db, at)
        pairs = cut.versions_at(it, cut.items(db, lo, hi), at)
    try:
        with _gc_paused():
            out, _, stopped = _collect(pairs, predicate, select, limit, budget_s, wire, needs_ts, needs_props,
                                       oldest, wanted)
        after = next(pairs, None) if stopped else None  # the first entity not examined
        return out, None if after is None else after[0]
    finally:
        it = pairs = None  # drop the iterators now: a live one keeps the DB LOCK after close()


def _read_points(db: Any, keys: list[bytes], at: int | None, *args: Any) -> tuple[list[Any], bytes | None]:
    """:func:`scan_span` over point spans: ``keys`` read by one multi-get (each as of the cut ``at`` when
    given), then ``_collect(*args)``."""
    values = db.get(keys)  # batched_multi_get; releases the GIL
    if at is not None:
        values = [cut.version_at(db, k, at, v) for k, v in zip(keys, values, strict=True)]
    found = [i for i, v in enumerate(values) if v is not None]
    with _gc_paused():
        out, n, stopped = _collect(((keys[i], values[i]) for i in found), *args)
    after = found[n - 1] + 1 if stopped else len(keys)  # go on after the last key examined, as a scan per span would
    return out, keys[after] if after < len(keys) else None


def span_may_hold(db: rocksdict.Rdict, lo: bytes, hi: bytes) -> bool:
    """False only when no key lies in ``[lo, hi)`` of ``db`` (one seek: cheaper than reading the rows of
    a batch into a new partition). Many uncompacted deletes there count as keys: the seek gives up."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(hi)  # never set_iterate_lower_bound: it sets the upper bound
    ro.set_max_skippable_internal_keys(_PROBE_SKIP)
    it = db.iter(ro)  # dropped on return, so that close() can release the LOCK
    try:
        it.seek(lo)
        if it.valid():
            return True
        it.status()  # raises after too many deletes (or an I/O error): then the rows are read
        return False
    except Exception:
        return True
