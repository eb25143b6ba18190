"""A split's offline window holds only what it must: the parent store closes in the background."""
from __future__ import annotations

import os
import threading
import time

from partition_server.range_store import RangeStore
from partition_server.ranges import RangeSet
from rangetable.edm import INT32

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
    assert set(out["steps"]) == {"flush", "checkpoint", "open", "drop", "retire"}
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
