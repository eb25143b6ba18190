"""A split's offline window holds only what it must: the halves are prepared while the parent
serves (its writes meanwhile replayed into them), and the parent store closes in the background."""
from __future__ import annotations

import os
import threading
import time

from partition_server.ranges import RangeSet
from partition_server.store.range_store import RangeStore
from rangetable.edm import INT32
from rangetable.errors import TableError

PARENT = {"id": "r1", "table": "t", "low": "", "high": None, "epoch": 1, "path": "ranges/r1"}


def half(rid: str, low: str, high: str | None) -> dict:
    return {"id": rid, "table": "t", "low": low, "high": high, "epoch": 2, "path": f"ranges/{rid}"}


def filled(tmp_path) -> RangeSet:
    rs = RangeSet(str(tmp_path))
    rs.load(PARENT)
    store = rs.open["r1"].store
    for p in range(20):
        store.batch([{"op": "insert_or_replace", "pk": f"p{p:02d}", "rk": f"r{i}", "props": {"n": [INT32, i]}}
                     for i in range(10)])
    return rs


def test_split_does_not_wait_for_the_parent_to_close(tmp_path, monkeypatch) -> None:
    rs = filled(tmp_path)
    released = threading.Event()
    real_close = RangeStore.close

    def slow_close(self: RangeStore) -> None:  # a close stuck behind a compaction slice
        if self.path.endswith("r1"):
            released.wait(10)
        real_close(self)

    monkeypatch.setattr(RangeStore, "close", slow_close)
    t0 = time.monotonic()
    out = rs.split("r1", 1, "p10", half("r2", "", "p10"), half("r3", "p10", None))
    assert time.monotonic() - t0 < 5  # returned while the parent still closes
    assert set(out["steps"]) == {"checkpoint", "open", "count", "drop", "catch_up", "switch", "retire"}
    assert out["offline_ms"] == round(out["steps"]["switch"] + out["steps"]["retire"], 2)
    assert "r1" not in rs.open and "r1" in rs.closing
    assert sorted(rs.open) == ["r2", "r3"]
    assert rs.open["r2"].store.get("p05", "r3") is not None
    assert rs.open["r3"].store.get("p05", "r3") is None

    rs.destroy(PARENT)  # the coordinator drops the parent: deleted once it has closed
    assert os.path.isdir(tmp_path / "ranges" / "r1")
    released.set()
    rs.unload_all()
    assert not os.path.exists(tmp_path / "ranges" / "r1")
    assert rs.closing == {}


def test_loading_a_range_that_is_still_closing_waits_for_its_close(tmp_path) -> None:
    rs = filled(tmp_path)
    rs.split("r1", 1, "p10", half("r2", "", "p10"), half("r3", "p10", None))
    rs.load(PARENT)  # a retried split finds its parent again: it reopens once the close is done
    assert rs.open["r1"].store.get("p15", "r1") is not None
    assert "r1" not in rs.closing
    rs.unload_all()


def put(rs: RangeSet, pk: str, rk: str, n: int, rid: str | None = None) -> None:
    req = {"range": "r1", "epoch": 1, "write": {"op": "insert_or_replace", "pk": pk, "rk": rk,
                                                 "props": {"n": [INT32, n]}, "if_match": None}}
    if rid:
        req["rid"] = rid
    rs.data("write", req)


def test_writes_during_the_preparation_reach_the_half_that_holds_them(tmp_path, monkeypatch) -> None:
    rs = filled(tmp_path)
    opening = threading.Event()
    go_on = threading.Event()
    real_open = RangeStore.open.__func__

    def slow_open(cls, path, **kw):  # a busy disk: opening a half takes long
        if str(path).endswith(("r2", "r3")):
            opening.set()
            go_on.wait(10)
        return real_open(cls, path, **kw)

    monkeypatch.setattr(RangeStore, "open", classmethod(slow_open))
    job = rs.split_start("r1", 1, "p10", half("r2", "", "p10"), half("r3", "p10", None))
    assert opening.wait(10)
    # the parent keeps serving meanwhile: new rows, changed rows, deleted rows, a request id
    put(rs, "p03", "new", 1)
    put(rs, "p15", "new", 2, rid="req-15")
    put(rs, "p04", "r1", 99)
    rs.data("write", {"range": "r1", "epoch": 1, "write": {"op": "delete", "pk": "p16", "rk": "r2", "if_match": "*"}})
    go_on.set()
    assert job.done.wait(10)
    put(rs, "p05", "late", 3)  # after the background catch-up, before the switch-over
    out = rs.split_finish("r1", 1, half("r2", "", "p10"), half("r3", "p10", None))
    assert out["offline_ms"] < 1000
    left, right = rs.open["r2"].store, rs.open["r3"].store
    assert left.get("p03", "new").props["n"] == [INT32, 1] and right.get("p03", "new") is None
    assert right.get("p15", "new").props["n"] == [INT32, 2] and left.get("p15", "new") is None
    assert left.get("p04", "r1").props["n"] == [INT32, 99]
    assert left.get("p05", "late").props["n"] == [INT32, 3]
    assert right.get("p16", "r2") is None and right.get("p16", "r3") is not None
    assert left.last_ts == right.last_ts == rs_last_ts(left)
    # a retry of the request made during the preparation is answered, not applied again
    again = right.write({"op": "insert_or_replace", "pk": "p15", "rk": "new", "props": {"n": [INT32, 7]},
                         "if_match": None}, request_id="req-15")
    assert again.props["n"] == [INT32, 2] and right.get("p15", "new").props["n"] == [INT32, 2]
    rs.unload_all()


def rs_last_ts(store: RangeStore) -> int:
    from partition_server.store.range_store import META_TS, unpack_meta

    return unpack_meta(store._db.get(META_TS))[0]


def test_a_range_unloaded_during_its_preparation_gives_the_split_up(tmp_path) -> None:
    rs = filled(tmp_path)
    job = rs.split_start("r1", 1, "p10", half("r2", "", "p10"), half("r3", "p10", None))
    rs.unload("r1")  # e.g. the lease lapsed
    job.done.wait(10)
    try:
        rs.split_finish("r1", 1, half("r2", "", "p10"), half("r3", "p10", None))
    except TableError as exc:
        assert exc.error_code in ("NotPrimary", "RangeBusy")
    else:
        raise AssertionError("the split of an unloaded range went through")
    assert "r2" not in rs.open and "r3" not in rs.open and rs.splits == {}
    assert not os.path.exists(tmp_path / "ranges" / "r2")
    rs.unload_all()


def test_frontends_route_a_splitting_range_to_its_primary_but_not_a_moving_one() -> None:
    from frontend.routing import MapCache

    cache = MapCache()
    ranges = [{"id": "r1", "table": "t", "low": "", "high": "m", "primary": "ps-1", "epoch": 1, "state": "splitting"},
              {"id": "r2", "table": "t", "low": "m", "high": None, "primary": "ps-1", "epoch": 1, "state": "moving"}]
    cache.apply({"version": 1, "tables": ["t"], "ranges": ranges, "servers": {"ps-1": "tcp://a:1"}})
    assert cache.route("t", "a").endpoint == "tcp://a:1"  # serves until the primary's switch-over
    assert cache.route("t", "x").endpoint is None  # waits for the next map


def test_a_recorded_range_delete_reaches_each_half_clipped_to_its_span(tmp_path) -> None:
    from partition_server.split_job import replay
    from partition_server.store.tee import RangeEnd
    from rangetable.keys import META_PREFIX

    left, right = (RangeStore.open(tmp_path / name) for name in ("l", "r"))
    keys = [b"a1", b"a2", b"m1", b"m2", META_PREFIX + b"x1", META_PREFIX + b"x2"]
    for store in (left, right):
        for k in keys:
            store._db.put(k, b"v")
    # one range delete from the left's entities across the split key, one of meta keys only
    replay([[(b"a2", RangeEnd(b"m2")), (META_PREFIX + b"x1", RangeEnd(META_PREFIX + b"x2"))]], b"m", left, right)
    assert [k for k in keys if left._db.get(k) is not None] == [b"a1", b"m1", b"m2", META_PREFIX + b"x2"]
    assert [k for k in keys if right._db.get(k) is not None] == [b"a1", b"a2", b"m2", META_PREFIX + b"x2"]
    left.close()
    right.close()
