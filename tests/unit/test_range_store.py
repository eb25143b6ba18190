"""Unit tests of the range store on a real RocksDB: ops, ETags, batches, request ids, scans, split/merge."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import rocksdict

from partition_server import range_store
from partition_server.range_store import REQ_PREFIX, RangeStore
from rangetable.edm import BINARY, INT32, STRING, etag_from_ticks
from rangetable.errors import TableError
from rangetable.keys import encode_key
from rangetable.storage import StorageConfigError, open_range_db, repair_config

REPO = Path(__file__).resolve().parents[2]
OTHER_ETAG = etag_from_ticks(630000000000000000)
MALFORMED = ['"abc"', "W/\"datetime'not-a-date'\""]


@pytest.fixture
def store(tmp_path):
    s = RangeStore.open(tmp_path / "r")
    yield s
    s.close()


def P(**kw: object) -> dict:
    """Typed props from plain values (str → String, int → Int32)."""
    return {k: [STRING if isinstance(v, str) else INT32, v] for k, v in kw.items()}


def err(fn, *a, **kw) -> TableError:
    with pytest.raises(TableError) as ei:
        fn(*a, **kw)
    return ei.value


# --- storage helper ---------------------------------------------------------------------------


def test_nothing_else_opens_rocksdb_directly():
    needle = "Rdict" + "("
    offenders = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
        for f in files:
            p = Path(root, f)
            if f.endswith(".py") and p != REPO / "rangetable" / "storage.py":
                if needle in p.read_text(encoding="utf-8", errors="replace"):
                    offenders.append(str(p.relative_to(REPO)))
    assert offenders == []


def test_stray_non_raw_open_is_repaired(tmp_path):
    path = str(tmp_path / "db")
    db = open_range_db(path)
    db.put(b"k", b"v")
    db.close()
    stray = rocksdict.Rdict  # what a debug shell would do: open without raw options
    s = stray(path, rocksdict.Options())
    s.close()
    assert json.loads(Path(path, "rocksdict-config.json").read_text())["raw_mode"] is False
    db = open_range_db(path)
    assert db.get(b"k") == b"v"
    db.close()
    assert repair_config(path) is False


def test_genuinely_non_raw_db_is_refused(tmp_path):
    path = str(tmp_path / "pickled")
    stray = rocksdict.Rdict
    s = stray(path)
    s["x"] = 1
    s.close()
    with pytest.raises(StorageConfigError):
        open_range_db(path)


def test_open_without_create(tmp_path):
    with pytest.raises(FileNotFoundError):
        RangeStore.open(tmp_path / "missing", create=False)


# --- single operations ------------------------------------------------------------------------

WRITE_OPS = ["insert", "replace", "merge", "delete", "insert_or_replace", "insert_or_merge"]
IF_MATCH = ["none", "star", "right", "wrong", "malformed0", "malformed1"]


def expected_error(kind: str, exists: bool, im: str) -> str | None:
    if kind == "insert":
        return "EntityAlreadyExists" if exists else None
    if kind.startswith("insert_or_"):
        return None
    if im.startswith("malformed"):
        return "InvalidInput"
    if not exists:
        return "ResourceNotFound"
    return "UpdateConditionNotSatisfied" if im == "wrong" else None


@pytest.mark.parametrize("kind", WRITE_OPS)
@pytest.mark.parametrize("exists", [True, False])
@pytest.mark.parametrize("im", IF_MATCH)
def test_op_matrix(store, kind, exists, im):
    old = store.write({"op": "insert", "pk": "p", "rk": "r", "props": P(a="old", b=1)}) if exists else None
    if_match = {
        "none": None,
        "star": "*",
        "right": etag_from_ticks(old.ts) if old else OTHER_ETAG,
        "wrong": OTHER_ETAG,
        "malformed0": MALFORMED[0],
        "malformed1": MALFORMED[1],
    }[im]
    op = {"op": kind, "pk": "p", "rk": "r", "if_match": if_match}
    if kind != "delete":
        op["props"] = P(b=2, c="new")
    want = expected_error(kind, exists, im)
    if want:
        assert err(store.write, op).error_code == want
        assert store.get("p", "r") == old
        return
    res = store.write(op)
    got = store.get("p", "r")
    if kind == "delete":
        assert res is None and got is None
        return
    merged = kind in ("merge", "insert_or_merge") and exists
    assert res.props == (P(a="old", b=2, c="new") if merged else P(b=2, c="new"))
    assert got == res
    assert old is None or res.ts > old.ts


def test_merge_keeps_unmentioned_and_replace_drops_them(store):
    store.write({"op": "insert", "pk": "p", "rk": "r", "props": P(a="x", b=1)})
    e = store.write({"op": "merge", "pk": "p", "rk": "r", "props": P(b=2, c="y")})
    assert e.props == P(a="x", b=2, c="y") == store.get("p", "r").props
    e = store.write({"op": "replace", "pk": "p", "rk": "r", "props": P(z=9)})
    assert store.get("p", "r").props == P(z=9)


def test_merge_result_is_validated(store):
    store.write({"op": "insert", "pk": "p", "rk": "r", "props": P(**{f"a{i}": i for i in range(200)})})
    more = P(**{f"b{i}": i for i in range(60)})
    assert (
        err(store.write, {"op": "merge", "pk": "p", "rk": "r", "props": more}).error_code
        == "TooManyProperties"
    )
    assert len(store.get("p", "r").props) == 200


def test_bad_ops(store):
    assert err(store.write, {"op": "upsert", "pk": "p", "rk": "r", "props": {}}).error_code == "InvalidInput"
    assert err(store.write, {"op": "insert", "rk": "r"}).error_code == "InvalidInput"
    assert (
        err(store.write, {"op": "insert", "pk": "a/b", "rk": "r", "props": {}}).error_code == "InvalidInput"
    )
    bad = {"op": "insert", "pk": "p", "rk": "r", "props": {"x": [INT32, "nope"]}}
    assert err(store.write, bad).error_code == "InvalidValueType"
    assert store.get("p", "r") is None


def test_types_round_trip(store, tmp_path):
    props = {
        "s": [STRING, "é"],
        "b": [BINARY, b"\x00\xff"],
        "g": [6, "0" * 8 + "-0000-0000-0000-" + "0" * 12],
    }
    store.write({"op": "insert", "pk": "p", "rk": "r", "props": props})
    e = store.get("p", "r")
    assert e.props == props and type(e.props["b"][1]) is bytes and type(e.props["g"][1]) is str


# --- timestamps -------------------------------------------------------------------------------


def test_timestamps_strictly_increase_across_reopen_and_clock_going_back(tmp_path):
    path = tmp_path / "r"
    s = RangeStore.open(path)
    ts = [s.write({"op": "insert_or_replace", "pk": "p", "rk": str(i), "props": {}}).ts for i in range(50)]
    s.clock = lambda: 1  # clock far in the past
    ts += [s.write({"op": "insert_or_replace", "pk": "p", "rk": "x", "props": {}}).ts for _ in range(5)]
    last = s.last_ts
    s.close()
    s = RangeStore.open(path, clock=lambda: 1)
    assert s.last_ts == last
    ts.append(s.write({"op": "delete", "pk": "p", "rk": "0"}) or s.last_ts)
    ts += [e.ts for e in s.batch([{"op": "insert", "pk": "p", "rk": "0", "props": {}}])]
    s.clock = lambda: last + 1000
    ts.append(s.write({"op": "insert", "pk": "q", "rk": "q", "props": {}}).ts)
    assert ts[-1] == last + 1000
    assert all(a < b for a, b in zip(ts, ts[1:], strict=False))
    s.close()


# --- batches ----------------------------------------------------------------------------------


def ins(pk: str, rk: str, **props: object) -> dict:
    return {"op": "insert", "pk": pk, "rk": rk, "props": P(**props)}


def test_batch_success_shares_one_timestamp(store):
    store.write(ins("p", "d"))
    res = store.batch([ins("p", "a", x=1), {"op": "delete", "pk": "p", "rk": "d"}, ins("p", "b")])
    assert res[1] is None and res[0].ts == res[2].ts == store.last_ts
    assert store.get("p", "d") is None and store.get("p", "a").props == P(x=1)
    assert store.batch([]) == []


def test_batch_shape_rules(store):
    e = err(store.batch, [ins("p", str(i)) for i in range(101)])
    assert (e.error_code, e.index) == ("InvalidInput", 0)
    e = err(store.batch, [ins("p", "1"), ins("p", "2"), ins("q", "3")])
    assert (e.error_code, e.index) == ("CommandsInBatchActOnDifferentPartitions", 2)
    e = err(store.batch, [ins("p", "1"), ins("p", "2"), ins("p", "1")])
    assert (e.error_code, e.index) == ("InvalidDuplicateRow", 2)
    big = {f"b{i}": [BINARY, bytes(60_000)] for i in range(15)}
    e = err(store.batch, [{"op": "insert", "pk": "p", "rk": str(i), "props": big} for i in range(5)])
    assert e.error_code == "RequestBodyTooLarge"
    assert store.scan(b"", None)[0] == []
    assert len(store.batch([ins("p", str(i)) for i in range(100)])) == 100


def test_batch_failure_names_index_and_writes_nothing(store):
    before = store.write(ins("p", "r37", v=1))
    last = store.last_ts
    ops = [ins("p", f"r{i:02d}") for i in range(50)]
    e = err(store.batch, ops)
    assert (e.error_code, e.index) == ("EntityAlreadyExists", 37)
    assert [x.rk for x in store.scan(b"", None)[0]] == ["r37"] and store.get("p", "r37") == before
    assert store.last_ts == last
    ops[37] = {"op": "replace", "pk": "p", "rk": "r37", "props": {}, "if_match": OTHER_ETAG}
    assert err(store.batch, ops).index == 37
    ops[37] = {"op": "merge", "pk": "p", "rk": "r37", "props": {"bad name": [0, "x"]}}
    assert (err(store.batch, ops).index, err(store.batch, ops).error_code) == (37, "PropertyNameInvalid")
    ops[37] = {"op": "delete", "pk": "p", "rk": "r37", "if_match": etag_from_ticks(before.ts)}
    assert len(store.batch(ops)) == 50 and store.get("p", "r37") is None


# --- request ids ------------------------------------------------------------------------------


def test_request_id_retry_returns_original_result(tmp_path):
    path = tmp_path / "r"
    s = RangeStore.open(path)
    first = s.write(ins("p", "r", v=1), request_id="w1")
    assert s.write(ins("p", "r", v=1), request_id="w1") == first  # no EntityAlreadyExists
    b = s.batch([ins("q", "1"), ins("q", "2")], request_id="b1")
    assert s.batch([ins("q", "1"), ins("q", "2")], request_id="b1") == b
    assert err(s.write, ins("p", "r"), request_id="w2").error_code == "EntityAlreadyExists"
    s.close()
    s = RangeStore.open(path)
    assert s.write(ins("p", "r", v=1), request_id="w1") == first
    assert s.batch([ins("q", "1")], request_id="b1") == b
    s.write({"op": "delete", "pk": "p", "rk": "r"}, request_id="del")
    assert s.write({"op": "delete", "pk": "p", "rk": "r"}, request_id="del") is None
    assert s.write(ins("p", "r"), request_id="w2").rk == "r"  # the failed w2 was not recorded
    s.close()


def _request_records(s: RangeStore) -> int:
    return sum(1 for k in s._db.keys(from_key=REQ_PREFIX) if k.startswith(REQ_PREFIX))


def test_request_window_is_bounded(tmp_path, monkeypatch):
    now = [10**17]
    s = RangeStore.open(tmp_path / "r", request_window_max=3, request_window_s=60, clock=lambda: now[0])
    for i in range(5):
        s.write(ins("p", str(i)), request_id=f"id{i}")
    assert _request_records(s) == 3
    assert err(s.write, ins("p", "0"), request_id="id0").error_code == "EntityAlreadyExists"  # evicted
    assert s.write(ins("p", "4"), request_id="id4").rk == "4"
    now[0] += 61 * 10**7
    assert err(s.write, ins("p", "4"), request_id="id4").error_code == "EntityAlreadyExists"  # expired
    monkeypatch.setattr(range_store, "PURGE_EVERY", 1)
    s.write(ins("p", "5"), request_id="id5")  # the age-based purge drops every expired record
    assert _request_records(s) == 1
    s.close()
    s = RangeStore.open(tmp_path / "r")
    assert s.stats()["entities"] >= 0 and s._window.count == 1
    s.close()


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
    assert 1000 <= st["entities"] <= 1300 and st["bytes"] > 100_000
    store.flush()
    st = store.stats()
    assert st["entities"] == 1100 and st["bytes"] > 100_000


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
    assert L.stats() == {"entities": 100, "bytes": L.stats()["bytes"], "compaction_pending": False,
                         "pending_compaction_bytes": L.stats()["pending_compaction_bytes"]}
    assert L.compact_pending() is False
    L.close()
    L = RangeStore.open(tmp_path / "L")
    assert not L.compaction_pending and {e.pk for e in L.scan(b"", None)[0]} == {"a", "b"}
    L.close()


# --- close releases the LOCK ------------------------------------------------------------------


def test_batch_with_an_unhashable_row_key_is_invalid_input(store):
    with pytest.raises(TableError) as e:
        store.batch([{"op": "insert", "pk": "p", "rk": "a", "props": {}},
                     {"op": "insert", "pk": "p", "rk": ["x"], "props": {}}])
    assert (e.value.error_code, e.value.index) == ("InvalidInput", 1)


def test_a_request_id_answers_only_its_own_kind_of_request(store):
    op = {"op": "insert_or_replace", "pk": "p", "rk": "r", "props": {"A": [INT32, 1]}}
    store.batch([op], request_id="b-1")
    store.write(op, request_id="w-1")
    for call in (lambda: store.write(op, request_id="b-1", wire=True), lambda: store.write(op, request_id="b-1"),
                 lambda: store.batch([op], request_id="w-1", answer="wire"), lambda: store.batch([op], request_id="w-1")):
        with pytest.raises(TableError) as e:
            call()
        assert e.value.error_code == "InvalidInput"
    assert store.batch([op], request_id="b-1")[0].props == {"A": [INT32, 1]}  # the same kind: replayed


def test_only_scans_within_one_partition_fill_the_block_cache() -> None:
    from partition_server.range_scan import fills_cache
    from rangetable.keys import encode_key, partition_bounds

    lo, hi = partition_bounds("p1")
    assert fills_cache(lo, hi)  # a partition query
    assert fills_cache(encode_key("p1", "r5"), hi)  # its next page
    assert not fills_cache(lo, partition_bounds("p2")[1])  # two partitions
    assert not fills_cache(b"", None)  # a table scan
    assert not fills_cache(encode_key("p1", "r5"), None)


def test_a_table_scan_leaves_the_block_cache_to_partition_reads(store) -> None:
    from rangetable import storage
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
