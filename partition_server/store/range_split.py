"""Split and merge of range stores (the disk side; the coordinator commits the map change).

Split: hard-linked checkpoints of the live store, then in each copy a ``delete_range`` of the other
half plus a compaction of that span, so the deleted data really goes, and each half's exact counts
(:mod:`partition_server.store.counts`). Merge: a checkpoint of the left store, then the right store's
entities and request records copied in; the counts are the sum of both. Both only ever write their output directories and remove leftovers of an earlier attempt first,
so a crash at any step is repaired by running the step again.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import cast

import msgpack
import rocksdict

from partition_server.store import cut, index_state
from partition_server.store.counts import Counts, half_counts, left_share, pack_counts, read_counts
from partition_server.store.expiry import MARK_KEY, merged_mark
from partition_server.store.feed import FAMILY as FEED_FAMILY
from partition_server.store.feed import count as count_feed
from partition_server.store.feed import merged_state
from partition_server.store.keys import DROP_KEY, META_COUNT, META_FEED, META_INDEX, META_SOURCE, META_TS
from partition_server.store.request_records import REQT_END, REQT_PREFIX, Window, pack_meta, unpack_meta
from rangetable.kernel.checkpoint import create_checkpoint
from rangetable.kernel.storage import column_family, open_range_db
from rangetable.keys import META_PREFIX

COPY_BATCH_BYTES = 1 << 20
SLICE_BYTES = 64 << 20  # a dropped span is compacted this much at a time (close waits for one slice)
SCAN_SPLIT_MAX_ENTRIES = 200_000  # a range this small may be scanned for its median (~0.5 s at most)


def _remove(path: str) -> None:
    """Remove a leftover output of an earlier (crashed) attempt."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _prepare_output(path: str) -> None:
    _remove(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


def _drop_span(path: str, lo: bytes, hi: bytes, compact: bool, counts: Callable[[rocksdict.Rdict], Counts]) -> None:
    """Delete the keys ``[lo, hi)`` from the store at ``path`` and compact that span away, or
    (``compact=False``) note it under ``DROP_KEY`` for a later ``RangeStore.compact_pending``; the store's
    ``META_COUNT`` becomes ``counts(db)``, taken before the delete."""
    db = open_range_db(path, create=False)
    try:
        db.put(META_COUNT, pack_counts(counts(db)))
        if lo < hi:
            db.delete_range(lo, hi)
            if compact:
                db.compact_range(lo or None, hi)
            else:
                db.put(DROP_KEY, msgpack.packb([lo, hi]))
        if compact:
            db.flush(True)  # without compaction the WAL already holds the delete durably
    finally:
        db.close()


def checkpoint_halves(db: rocksdict.Rdict, left_path: str, right_path: str) -> None:
    """Two hard-linked checkpoints of ``db`` (leftovers of an earlier attempt removed first)."""
    paths = {os.path.realpath(p) for p in (left_path, right_path, db.path())}
    if len(paths) != 3:
        raise ValueError("split outputs must be two new directories, distinct from the store's own")
    _prepare_output(left_path)
    _prepare_output(right_path)
    db.flush(True)  # memtables to SSTs, so both checkpoints are hard links only
    create_checkpoint(db, left_path)
    create_checkpoint(db, right_path)


def split_store(
    db: rocksdict.Rdict, split_pk: str, left_path: str, right_path: str, *, compact: bool = True,
    counts: tuple[Counts, Counts] | None = None,
) -> None:
    """Checkpoint ``db`` into ``left_path`` (pks < split_pk) and ``right_path`` (pks >= split_pk).

    Meta keys (last Timestamp, request records) stay in both halves; each half's ``META_COUNT`` is its
    own: ``counts`` (left, right) when given, else counted in each copy (the smaller side scanned).
    ``db`` itself is not changed.
    """
    checkpoint_halves(db, left_path, right_path)
    spk = split_pk.encode("utf-8")
    smaller = left_share(db.live_files(), spk) <= 0.5
    for path, lo, hi, left in ((left_path, spk, META_PREFIX, True), (right_path, b"", spk, False)):
        given = None if counts is None else Counts(*counts[0 if left else 1])

        def half(d: rocksdict.Rdict, g: Counts | None = given, le: bool = left) -> Counts:
            return g if g is not None else half_counts(d, spk, le, smaller)

        _drop_span(path, lo, hi, compact, half)


def _request_window(db: rocksdict.Rdict) -> Window:
    """The request records of ``db`` counted afresh (the next purge walks the whole index)."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(REQT_END)
    it: Iterator[bytes] | None
    it = db.values(from_key=REQT_PREFIX, read_opt=ro)
    count = nbytes = 0
    try:
        for v in it:
            count += 1
            nbytes += int.from_bytes(v, "big")
    finally:
        it = None
    return Window(count, nbytes, 0)


def merge_stores(left_path: str, right_path: str, out_path: str) -> None:
    """Write ``out_path`` = left ∪ right (entities, request records, change-feed records and a secondary
    cluster's undo records; last Timestamp = max; the feed's state: :func:`~partition_server.store.feed.merged_state`;
    what an index's or a source's applier wrote: :func:`~partition_server.store.index_state.merged`)."""
    if not os.path.isdir(left_path) or not os.path.isdir(right_path):
        raise FileNotFoundError(f"merge inputs missing: {left_path}, {right_path}")
    if len({os.path.realpath(p) for p in (left_path, right_path, out_path)}) != 3:
        raise ValueError("merge output must be a new directory, distinct from both inputs")
    _prepare_output(out_path)
    ldb = open_range_db(left_path, create=False)
    try:
        left_counts = read_counts(ldb)[0]
        left_ts = unpack_meta(ldb.get(META_TS))[0]
        left_mark = ldb.get(MARK_KEY)
        left_feed = ldb.get(META_FEED)
        left_index = ldb.get(META_INDEX)
        left_source = ldb.get(META_SOURCE)
        left_floor = cut.floor(ldb)
        create_checkpoint(ldb, out_path)
    finally:
        ldb.close()
    odb = open_range_db(out_path, create=False)
    records: rocksdict.Rdict | None = None
    family: rocksdict.ColumnFamily | None = None
    try:
        # flushed below; a crash before that is repaired by re-running.  rocksdict's stub has a disable_wal
        # method; at run time it is a settable property
        wo = rocksdict.WriteOptions()
        wo.disable_wal = True  # type: ignore[method-assign, assignment]
        rdb = open_range_db(right_path, create=False)
        try:
            right_ts = unpack_meta(rdb.get(META_TS))[0]
            counts = left_counts.plus(*read_counts(rdb)[0])
            mark = merged_mark(left_mark, rdb.get(MARK_KEY))
            right_feed = rdb.get(META_FEED)
            index = index_state.merged(left_index, rdb.get(META_INDEX))
            source = index_state.merged(left_source, rdb.get(META_SOURCE))
            floor = max(left_floor, cut.floor(rdb))
            _copy(rdb, odb, None, wo,
                  skip=(META_TS, MARK_KEY, META_COUNT, META_FEED, META_INDEX, META_SOURCE, cut.UNDO_FLOOR))
            records, family = column_family(odb, FEED_FAMILY)
            _copy(column_family(rdb, FEED_FAMILY)[0], odb, family, wo, skip=())
        finally:
            rdb.close()
        odb.put(META_TS, pack_meta(max(left_ts, right_ts), _request_window(odb)), wo)
        odb.put(META_COUNT, pack_counts(counts), wo)
        odb.put(META_FEED, merged_state(left_feed, right_feed, left_ts, right_ts, *count_feed(records)), wo)
        if mark is not None:
            odb.put(MARK_KEY, mark, wo)
        if index is not None:
            odb.put(META_INDEX, index, wo)
        if source is not None:
            odb.put(META_SOURCE, source, wo)
        if floor:
            odb.put(cut.UNDO_FLOOR, cut.pack_floor(floor), wo)
        odb.flush(True)
        records.flush(True)
    finally:
        records = family = None  # they hold the DB: dropped before it closes
        odb.close()


def _copy(src: rocksdict.Rdict, odb: rocksdict.Rdict, family: rocksdict.ColumnFamily | None,
          wo: rocksdict.WriteOptions, skip: tuple[bytes, ...]) -> None:
    """Put every key of ``src`` (a store or one of its column families) but ``skip`` into ``odb``'s column
    family ``family`` (None: the default one), in WriteBatches of about :data:`COPY_BATCH_BYTES`."""
    wb = rocksdict.WriteBatch(raw_mode=True)
    size = 0
    it: Iterator[tuple[bytes, bytes]] | None
    # raw mode: bytes keys and values (rocksdict's stub types the keys every mode allows)
    it = cast("Iterator[tuple[bytes, bytes]]", src.items())
    try:
        for k, v in it:
            if k in skip:
                continue
            wb.put(k, v, family)
            size += len(k) + len(v)
            if size >= COPY_BATCH_BYTES:
                odb.write(wb, wo)
                wb = rocksdict.WriteBatch(raw_mode=True)
                size = 0
    finally:
        it = None
    if len(wb):
        odb.write(wb, wo)


# --- the split key --------------------------------------------------------------------------


def _pk(key: bytes) -> bytes:
    return key[: key.find(b"\x00")] if b"\x00" in key else key


def pick_split_pk(files: list[dict], first_pk: bytes, last_pk: bytes) -> bytes | None:
    """The PartitionKey at the SST boundary nearest the median byte, from ``live_files()`` metadata.

    Only a file's first key can be a split point (as HBase takes the mid-key of a store file's
    index); it must lie in ``(first_pk, last_pk]`` so both halves keep entities. None when no file
    boundary qualifies. Files are weighted by ``size``: rocksdict reports ``num_entries`` 0 for files
    whose properties RocksDB has not loaded (most of the bottom level). Pure: ``files`` are dicts with
    ``start_key`` and ``size``.
    """
    ents = sorted((f for f in files if f["start_key"] < META_PREFIX), key=lambda f: f["start_key"])
    total = sum(f["size"] for f in ents)
    best: tuple[float, bytes] | None = None
    before = 0
    for f in ents:
        pk = _pk(f["start_key"])
        if first_pk < pk <= last_pk:
            off = abs(before - total / 2)
            if best is None or off < best[0]:
                best = (off, pk)
        before += f["size"]
    return None if best is None else best[1]


def _edge_pks(db: rocksdict.Rdict) -> tuple[bytes, bytes] | None:
    """The first and the last PartitionKey of the entities (None when there are none)."""
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(META_PREFIX)
    first = next(iter(db.keys(read_opt=ro)), None)
    if first is None:
        return None
    last = next(iter(db.keys(backwards=True, from_key=META_PREFIX)), None)  # the last key <= META_PREFIX
    assert isinstance(first, bytes) and (last is None or isinstance(last, bytes))  # a raw-mode store's keys
    return _pk(first), _pk(last if last is not None and last < META_PREFIX else first)


def choose_split_key(db: rocksdict.Rdict) -> str | None:
    """A PartitionKey near the median entity of ``db`` leaving both halves non-empty; None if the range
    holds fewer than two PartitionKeys. A range of at most :data:`SCAN_SPLIT_MAX_ENTRIES` entries is
    scanned (exact); a larger one is flushed and split at an SST boundary (no scan, so a multi-GB
    range does not hold the partition server's loop past its lease)."""
    edges = _edge_pks(db)
    if edges is None or edges[0] == edges[1]:
        return None
    if (db.property_int_value("rocksdb.estimate-num-keys") or 0) <= SCAN_SPLIT_MAX_ENTRIES:
        return scan_split_key(db)
    db.flush(True)
    pk = pick_split_pk(db.live_files(), *edges)
    return (pk if pk is not None else edges[1]).decode()  # no boundary inside: split off the last partition


def scan_split_key(db: rocksdict.Rdict) -> str | None:
    """The median PartitionKey by one pass over the keys (for small ranges); remembers at most ~2k
    partition starts (thinned evenly), so memory stays bounded."""
    starts: list[tuple[int, bytes]] = []  # (index of first key, pk bytes), excluding the first pk
    stride = 1
    last_idx = 0
    first: bytes | None = None
    prefix = b""
    n = 0
    ro = rocksdict.ReadOptions()
    ro.set_iterate_upper_bound(META_PREFIX)
    it: Iterator[bytes] | None
    # raw mode: bytes keys (rocksdict's stub types the keys every mode allows)
    it = cast("Iterator[bytes]", db.keys(read_opt=ro))
    try:
        for k in it:
            if not k.startswith(prefix) or first is None:
                pkb = k[: k.find(b"\x00")]
                prefix = pkb + b"\x00"
                if first is None:
                    first = pkb
                elif n - last_idx >= stride:
                    starts.append((n, pkb))
                    last_idx = n
                    if len(starts) > 2048:
                        starts = starts[::2]
                        stride *= 2
            n += 1
    finally:
        it = None
    if not starts:
        return None
    half = n / 2
    _, best = min(starts, key=lambda s: abs(s[0] - half))
    return best.decode()


def compaction_slices(files: list[dict], lo: bytes, hi: bytes, slice_bytes: int = SLICE_BYTES) -> list[tuple[bytes, bytes]]:
    """Cut ``[lo, hi)`` at SST start keys into consecutive spans of about ``slice_bytes`` of files each
    (pure: ``files`` as ``live_files()`` gives them). Together they cover ``[lo, hi)`` exactly."""
    inside = sorted((f["start_key"], f["size"]) for f in files if lo < f["start_key"] < hi)
    cuts, acc = [lo], 0
    for start, size in inside:
        if acc >= slice_bytes:
            cuts.append(start)
            acc = 0
        acc += size
    cuts.append(hi)
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if a < b]
