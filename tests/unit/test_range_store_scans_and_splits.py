"""Unit tests of the range store on a real RocksDB: scans (bounds, predicates, pages, the block cache),
stats, split_key, split and merge."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from partition_server.store.range_store import RangeStore
from rangetable.edm import BINARY
from rangetable.keys import encode_key
from tests.unit.range_store_helpers import ins, store_fixture  # noqa: F401  (the store fixture)

# --- scans ------------------------------------------------------------------------------------


@pytest.fixture
def filled(store):
    for p in range(10):
        store.batch([ins(f"p{p}", f"r{r:02d}", n=p * 100 + r, s="x" * r) for r in range(30)])
    store.write(ins("z", "z"), request_id="meta-present")
    return store


def test_scan_bounds_predicate_select_limit(filled):
    s = filled
    all_, nxt = s.scan(b"", None)
    assert len(all_) == 301 and nxt is None
    lo, hi = encode_key("p3", "r10"), encode_key("p5", "")
    got, nxt = s.scan(lo, hi)
    assert nxt is None and (got[0].pk, got[0].rk) == ("p3", "r10") and got[-1].pk == "p4" and len(got) == 50
    pred = lambda pk, rk, ts, props: props.get("n", [0, -1])[1] % 7 == 0  # noqa: E731
    got, _ = s.scan(b"", None, pred, select=["n", "missing"])
    assert [e.props["n"][1] for e in got] == [
        n for n in (p * 100 + r for p in range(10) for r in range(30)) if n % 7 == 0
    ]
    assert all(set(e.props) == {"n"} and e.ts > 0 for e in got)
    page, nxt = s.scan(b"", None, limit=10)
    assert len(page) == 10 and nxt == encode_key("p0", "r10")
    page, nxt = s.scan(encode_key("p9", "r20"), encode_key("p9", "r30"), limit=10)
    assert len(page) == 10 and nxt is None
    assert s.scan(b"q", b"q") == ([], None) and s.scan(b"\xff", None) == ([], None)


@pytest.mark.parametrize("kw", [{"budget_s": 0.0}, {"limit": 7}, {"budget_s": 0.0, "limit": 50}])
def test_scan_resumes_without_gaps_or_duplicates(filled, kw):
    pred = lambda pk, rk, ts, props: props.get("n", [0, 0])[1] % 3 == 0  # noqa: E731
    want = filled.scan(b"", None, pred)[0]
    got, nxt, pages = [], b"", 0
    while nxt is not None:
        page, nxt = filled.scan(nxt, None, pred, **kw)
        got += page
        pages += 1
    assert got == want and pages > 2


def test_only_scans_within_one_partition_fill_the_block_cache() -> None:
    from partition_server.store.range_scan import fills_cache
    from rangetable.keys import encode_key, partition_bounds

    lo, hi = partition_bounds("p1")
    assert fills_cache(lo, hi)  # a partition query
    assert fills_cache(encode_key("p1", "r5"), hi)  # its next page
    assert not fills_cache(lo, partition_bounds("p2")[1])  # two partitions
    assert not fills_cache(b"", None)  # a table scan
    assert not fills_cache(encode_key("p1", "r5"), None)


def test_a_table_scan_leaves_the_block_cache_to_partition_reads(store) -> None:
    from rangetable.kernel import storage
    from rangetable.keys import partition_bounds

    for p in range(20):
        store.batch([ins(f"p{p:03d}", f"r{i:04d}", note="x" * 200 + str(i)) for i in range(100)])
    store.flush()

    def cache_growth(scan) -> int:
        before = storage.memory_usage()["block_cache"]
        scan()
        return storage.memory_usage()["block_cache"] - before

    table = cache_growth(lambda: store.scan(b"", None, limit=5000))
    assert len(store.scan(b"", None, limit=5000)[0]) == 2000
    partition = cache_growth(lambda: store.scan(*partition_bounds("p007")))
    assert table < 16 << 10 < partition  # 2000 rows of ~230 B read, none cached; one partition's blocks cached


def test_stats(store):
    assert store.stats()["entities"] == 0
    for i in range(20):
        ops = [
            {"op": "insert", "pk": f"p{i}", "rk": str(r), "props": {"b": [BINARY, os.urandom(100)]}}
            for r in range(50)
        ]
        store.batch(ops)
    for i in range(100):
        store.write(ins("q", str(i)), request_id=str(i))
    st = store.stats()
    assert st["entities"] == 1100 and st["bytes"] > 100_000  # exact in memtables already
    store.flush()
    assert store.stats() == st


def test_stats_count_entities_written_with_request_records(store):
    # each write keeps a request record (its answer: the entity again); the records are not entity bytes
    for i in range(5000):
        store.write(ins(f"p{i % 20}", f"r{i}", a="x" * 100), request_id=f"rid{i}")
    st = store.stats()
    assert st["entities"] == 5000 and 5000 * 100 < st["bytes"] < 5000 * 200, st


# --- split_key, split, merge ------------------------------------------------------------------


def test_split_key(store):
    assert store.split_key() is None
    store.batch([ins("a", str(i)) for i in range(100)])
    assert store.split_key() is None
    store.write(ins("b", "1"))
    assert store.split_key() == "b"
    for p in range(1, 40):
        store.batch([ins(f"k{p:02d}", str(i)) for i in range(10)])
    assert "k10" <= store.split_key() <= "k30"


def _sst_files(path) -> list[Path]:
    return sorted(Path(path).glob("*.sst"))


def test_split_and_merge(tmp_path, store):
    for p in "abcdef":
        store.batch([ins(p, str(i), v=i) for i in range(20)])
    r0 = store.write(ins("a", "req"), request_id="R")
    store.flush()
    last = store.last_ts
    left, right, out = tmp_path / "L", tmp_path / "R", tmp_path / "M"
    (left / "junk").mkdir(parents=True)  # leftovers of a crashed attempt are removed
    store.split("d", left, right)
    assert len(store.scan(b"", None)[0]) == 121  # the source is unchanged and still open
    L, R = RangeStore.open(left), RangeStore.open(right)
    assert {e.pk for e in L.scan(b"", None)[0]} == set("abc")
    assert {e.pk for e in R.scan(b"", None)[0]} == set("def")
    assert L.last_ts == R.last_ts == last
    assert L.stats()["entities"] == 61 and R.stats()["entities"] == 60
    assert L.write(ins("a", "req"), request_id="R") == R.write(ins("a", "req"), request_id="R") == r0
    e1 = L.write(ins("b", "new"))
    R.write(ins("e", "new"))
    e2 = R.write(ins("f", "new"))
    assert L.get("e", "new") is None and R.get("b", "new") is None and e1.ts > last
    L.close()
    R.close()
    RangeStore.merge(left, right, out)
    RangeStore.merge(left, right, out)  # re-runnable
    M = RangeStore.open(out)
    assert len(M.scan(b"", None)[0]) == 124
    assert M.last_ts == max(e1.ts, e2.ts)
    assert M.write(ins("a", "req"), request_id="R") == r0
    assert M.write(ins("x", "y")).ts > max(e1.ts, e2.ts)
    M.close()


def test_split_checkpoints_are_hard_links(tmp_path, store):
    for p in "abcd":
        store.batch([ins(p, str(i)) for i in range(50)])
    with pytest.raises(ValueError):
        store.split("c", tmp_path / "L", store.path)
    store.split("c", tmp_path / "L", tmp_path / "R", compact=False)
    source = _sst_files(store.path)
    assert source and all(f.stat().st_nlink == 3 for f in source)
    for half in ("L", "R"):
        for f in source:
            assert (tmp_path / half / f.name).stat().st_ino == f.stat().st_ino
    L = RangeStore.open(tmp_path / "L")
    assert {e.pk for e in L.scan(b"", None)[0]} == {"a", "b"}
    assert L.compaction_pending and L.stats()["compaction_pending"]
    assert L.compact_pending() is True
    assert L.stats() == {"entities": 100, "bytes": L.counts().bytes, "feed_records": 0, "feed_bytes": 0,
                         "compaction_pending": False, "pending_compaction_bytes": L.stats()["pending_compaction_bytes"]}
    assert L.compact_pending() is False
    L.close()
    L = RangeStore.open(tmp_path / "L")
    assert not L.compaction_pending and {e.pk for e in L.scan(b"", None)[0]} == {"a", "b"}
    L.close()
