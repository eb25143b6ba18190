"""The request-id window under sustained writes: purging never walks what earlier purges deleted.

Before the purge cursor, every write past a full window opened an iterator at the start of the index
and stepped over the tombstone of every record purged before it (RocksDB's queue anti-pattern): one
range fell from ~60k to ~200 writes/s after 100,000 writes with request ids. These tests drive the
purge path tens of thousands of times and count what RocksDB's iterators skip (its
``rocksdb.number.iter.skip`` ticker), which is deterministic; wall time is printed, not asserted.
"""

from __future__ import annotations

import re
import time

import pytest

from partition_server.store.range_store import META_TS, REQ_PREFIX, RangeStore, pack_meta, unpack_meta
from partition_server.store.request_records import REQT_END, REQT_PREFIX, Window
from rangetable.edm import INT32, STRING
from rangetable.kernel.storage import db_options, open_range_db

WINDOW = 200
WRITES = 20_000
PART = 1000


class CountedStore:
    """A RangeStore on a DB with RocksDB statistics, to read how many keys its iterators skipped."""

    def __init__(self, path, **kw) -> None:
        self.options = db_options()
        self.options.enable_statistics()
        self.store = RangeStore(open_range_db(path, options=self.options), str(path), **kw)

    def skipped(self) -> int:
        """Internal keys (tombstones, overwritten versions) iterators stepped over so far."""
        m = re.search(r"rocksdb\.number\.iter\.skip COUNT : (\d+)", self.options.get_statistics())
        assert m, "statistics lack the iter.skip ticker"
        return int(m.group(1))


def upsert(i: int, rk: str | None = None) -> dict:
    return {"op": "insert_or_replace", "pk": "p1", "rk": rk or f"r{i % 300}",
            "props": {"n": [INT32, i], "s": [STRING, "x" * 50]}, "if_match": None}


def index_keys(s: RangeStore) -> list[bytes]:
    return [k for k in s._db.keys(from_key=REQT_PREFIX) if k < REQT_END]


def request_records(s: RangeStore) -> int:
    return sum(1 for k in s._db.keys(from_key=REQ_PREFIX) if k.startswith(REQ_PREFIX))


@pytest.mark.slow
def test_purge_cost_stays_flat_over_tens_of_thousands_of_purges(tmp_path):
    c = CountedStore(tmp_path / "r", request_window_max=WINDOW)
    s = c.store
    cost: list[tuple[int, float]] = []  # (keys skipped, seconds) per part of PART writes
    for part in range(WRITES // PART):
        skip0, t0 = c.skipped(), time.perf_counter()
        for i in range(part * PART, (part + 1) * PART):
            s.write(upsert(i), request_id=f"id-{i}")
        cost.append((c.skipped() - skip0, time.perf_counter() - t0))
    first, last = cost[1], cost[-1]  # part 0 fills the window and purges only at its end
    print(f"\nper {PART} writes, window {WINDOW}: first full part skipped {first[0]} keys in "
          f"{first[1] * 1e3:.1f} ms, last skipped {last[0]} keys in {last[1] * 1e3:.1f} ms "
          f"(time ratio {last[1] / first[1]:.2f})")
    # without the cursor the last part would step over ~28,000 tombstones per purge
    assert last[0] <= max(2 * first[0], 2 * PART), cost
    assert s._window.count <= WINDOW and request_records(s) == s._window.count == len(index_keys(s))
    s.close()


def test_purge_cursor_survives_reopen(tmp_path):
    path = tmp_path / "r"
    s = RangeStore.open(path, request_window_max=WINDOW)
    for i in range(5_000):
        s.write(upsert(i), request_id=f"id-{i}")
    cursor = unpack_meta(s._db.get(META_TS))[1].purge_from
    oldest = int.from_bytes(index_keys(s)[0][len(REQT_PREFIX):len(REQT_PREFIX) + 8], "big")
    assert 0 < cursor <= oldest  # every index key older than the cursor is deleted
    s.close()
    c = CountedStore(path, request_window_max=WINDOW)
    before = c.skipped()
    for i in range(5_000, 5_000 + 4 * PART):  # purges run: the window is full
        c.store.write(upsert(i), request_id=f"id-{i}")
    assert c.skipped() - before < 4 * PART  # the 4,800 tombstones before the cursor were never walked
    assert c.store._window.count == request_records(c.store) <= WINDOW
    c.store.close()


def test_old_meta_without_cursor_still_purges_everything(tmp_path):
    path = tmp_path / "r"
    s = RangeStore.open(path, request_window_max=WINDOW)
    for i in range(WINDOW):
        s.write(upsert(i), request_id=f"id-{i}")
    last_ts, w = unpack_meta(s._db.get(META_TS))
    s._db.put(META_TS, pack_meta(last_ts, w)[:16])  # the 16-byte form written before the cursor
    s.close()
    s = RangeStore.open(path, request_window_max=WINDOW)
    assert s._window.purge_from == 0 and s._window.count == WINDOW
    for i in range(WINDOW, 3 * WINDOW):
        s.write(upsert(i), request_id=f"id-{i}")
    assert s._window.count == request_records(s) == len(index_keys(s)) <= WINDOW
    assert s.write(upsert(0, "r0"), request_id=f"id-{3 * WINDOW - 1}") is not None  # newest kept
    s.close()


def test_merged_store_purges_records_of_both_halves(tmp_path):
    left = RangeStore.open(tmp_path / "l", request_window_max=WINDOW)
    right = RangeStore.open(tmp_path / "r", request_window_max=WINDOW)
    for i in range(3 * WINDOW):  # both halves purge, so both have cursors
        left.write({**upsert(i), "pk": "a"}, request_id=f"l-{i}")
        right.write({**upsert(i), "pk": "z"}, request_id=f"r-{i}")
    left.close()
    right.close()
    RangeStore.merge(tmp_path / "l", tmp_path / "r", tmp_path / "m")
    m = RangeStore.open(tmp_path / "m", request_window_max=WINDOW)
    assert m._window.count == request_records(m)
    m.write(upsert(0), request_id="after-merge")
    assert m._window.count == request_records(m) == len(index_keys(m)) <= WINDOW  # none left behind
    m.close()


def record_bytes(s: RangeStore) -> int:
    return sum(len(v) for k, v in s._db.items(from_key=REQ_PREFIX) if k.startswith(REQ_PREFIX))


def test_request_records_are_bounded_by_bytes(tmp_path):
    bound = 200_000
    s = RangeStore.open(tmp_path / "r", request_window_bytes=bound)
    batch = [upsert(j, f"b{j}") for j in range(100)]  # answers of ~10 KB each
    for i in range(100):
        s.batch([{**op, "props": {**op["props"], "n": [INT32, i]}} for op in batch], request_id=f"b-{i}")
    s.write(upsert(0), request_id="w-last")
    held = record_bytes(s)
    assert held == s._window.nbytes <= bound and s._window.count == request_records(s) < 30
    assert s.batch(batch, request_id="b-99")[0].props["n"] == [INT32, 99]  # the newest is still answered
    s.close()
    s = RangeStore.open(tmp_path / "r", request_window_bytes=bound)
    assert s._window == unpack_meta(s._db.get(META_TS))[1] and s._window.nbytes == held
    s.close()


def test_an_expired_record_dropped_by_its_retry_is_counted_once(tmp_path):
    now = [10**17]
    s = RangeStore.open(tmp_path / "r", request_window_max=3, request_window_s=60, clock=lambda: now[0])
    for i in range(3):
        s.write(upsert(i), request_id=f"id{i}")
    now[0] += 61 * 10**7  # all three expire; a retry of id0 drops its own record, the purge the rest
    s.write(upsert(9), request_id="id0")
    s.write(upsert(10), request_id="id3")
    s.write(upsert(11), request_id="id4")  # the window is full again: a purge runs
    assert s._window.count == request_records(s) == len(index_keys(s)) == 3
    assert s._window == Window(3, record_bytes(s), s._window.purge_from)
    s.close()


def test_a_quiet_batch_answers_its_timestamp_and_keeps_a_small_record(tmp_path) -> None:
    store = RangeStore.open(tmp_path / "quiet")
    ops = [{"op": "insert_or_replace", "pk": "p", "rk": f"r{i:03d}", "props": {"s": [STRING, "x" * 300]},
            "if_match": None} for i in range(100)]
    ts = store.batch(ops, request_id="bulk-1", answer="timestamp")
    assert isinstance(ts, int) and ts == store.last_ts
    assert store.get("p", "r099").ts == ts
    again = store.batch([{**ops[0], "props": {"s": [STRING, "changed"]}}], request_id="bulk-1", answer="timestamp")
    assert again == ts and store.get("p", "r000").props["s"] == [STRING, "x" * 300]  # applied once
    assert store.batch(ops, request_id="bulk-1", answer="wire") == []  # the first call was quiet: no entities kept
    records = [v for k, v in store._db.items(from_key=REQ_PREFIX) if k.startswith(REQ_PREFIX)]
    assert len(records) == 1 and len(records[0]) < 64  # the echoed form would hold ~31 KiB

    loud = store.batch([{**op, "pk": "q"} for op in ops], request_id="bulk-2", answer="wire")
    assert len(loud) == 100
    records = [v for k, v in store._db.items(from_key=REQ_PREFIX) if k.startswith(REQ_PREFIX)]
    assert max(map(len, records)) > 30_000
    store.close()


def table_properties(s: RangeStore) -> dict[str, int]:
    """Counts from RocksDB's aggregated table properties of the store's SSTs."""
    text = s._db.property_value("rocksdb.aggregated-table-properties")
    return {k: int(v) for k, v in re.findall(r"# (entries|deletions|range deletions)=(\d+)", text)}


def test_a_purge_deletes_the_index_with_one_range_tombstone(tmp_path):
    # point tombstones for the index keys, in key order, made every flushed SST a candidate for the
    # compact-on-deletion collector, and compaction CPU per write doubled under a full window
    s = RangeStore.open(tmp_path / "r", request_window_max=WINDOW)
    n = 5_000
    for i in range(n):
        s.write(upsert(i, rk=f"k{i:06d}"), request_id=f"id-{i}")
    s.flush()
    props = table_properties(s)
    purged = n - s._window.count
    assert purged >= n - WINDOW
    assert props["range deletions"] >= 1
    # one point tombstone per purged record (its record key), none for its index key
    point = props["deletions"] - props["range deletions"]  # RocksDB counts range tombstones in both
    assert purged <= point < purged + purged // 10
    assert len(index_keys(s)) == request_records(s) == s._window.count
    assert s.write(upsert(0, rk="k000000"), request_id="id-0").props["n"] == [INT32, 0]  # purged: applied again
    s.close()
