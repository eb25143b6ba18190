"""Unit tests of the range store on a real RocksDB: the storage helper, ops, ETags, timestamps, batches and
request ids (scans and split/merge: ``test_range_store_scans_and_splits.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote

import pytest
import rocksdict

from partition_server.store import range_store
from partition_server.store.range_store import REQ_PREFIX, RangeStore
from rangetable.edm import BINARY, INT32, STRING, etag_from_ticks
from rangetable.errors import TableError
from rangetable.kernel.storage import StorageConfigError, open_range_db, repair_config
from tests.unit.range_store_helpers import P, ins, store_fixture  # noqa: F401  (the store fixture)

REPO = Path(__file__).resolve().parents[2]
OTHER_ETAG = etag_from_ticks(630000000000000000)
MALFORMED = ['"abc"', "W/\"datetime'not-a-date'\""]


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
            if f.endswith(".py") and p != REPO / "rangetable" / "kernel" / "storage.py":
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
IF_MATCH = ["none", "star", "right", "unescaped", "wrong", "malformed0", "malformed1"]


def expected_error(kind: str, exists: bool, im: str) -> str | None:
    if kind == "insert":
        return "EntityAlreadyExists" if exists else None
    if kind.startswith("insert_or_"):
        return None
    if im == "malformed0":  # not an ETag at all
        return "InvalidInput"
    if not exists:
        return "ResourceNotFound"
    # malformed1 is a weak ETag of an opaque value: compared, never equal (412, as Azure; Azurite #1229)
    return "UpdateConditionNotSatisfied" if im in ("wrong", "malformed1") else None


@pytest.mark.parametrize("kind", WRITE_OPS)
@pytest.mark.parametrize("exists", [True, False])
@pytest.mark.parametrize("im", IF_MATCH)
def test_op_matrix(store, kind, exists, im):
    old = store.write({"op": "insert", "pk": "p", "rk": "r", "props": P(a="old", b=1)}) if exists else None
    if_match = {
        "none": None,
        "star": "*",
        "right": etag_from_ticks(old.ts) if old else OTHER_ETAG,
        # the legacy JS SDK's nometadata ETag: the Timestamp with its colons unescaped, the same version
        "unescaped": unquote(etag_from_ticks(old.ts) if old else OTHER_ETAG),
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


def test_batch_with_an_unhashable_row_key_is_invalid_input(store):
    with pytest.raises(TableError) as e:
        store.batch([{"op": "insert", "pk": "p", "rk": "a", "props": {}},
                     {"op": "insert", "pk": "p", "rk": ["x"], "props": {}}])
    assert (e.value.error_code, e.value.index) == ("InvalidInput", 1)


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
    # the refused w2 was recorded: its retry is refused again, not decided anew (test_request_refusals.py)
    assert err(s.write, ins("p", "r"), request_id="w2").error_code == "EntityAlreadyExists"
    assert s.write(ins("p", "r"), request_id="w3").rk == "r"
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
    assert _request_records(s) == 2  # id5's and the refusal of id4's expired retry (a record of its own)
    s.close()
    s = RangeStore.open(tmp_path / "r")
    assert s.stats()["entities"] >= 0 and s._window.count == 2
    s.close()


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
