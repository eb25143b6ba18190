"""The key-space heatmap model: rows through splits and merges, buckets, heights, the state view."""

from __future__ import annotations

import math
import threading
import time

import pytest

from cli.cluster.supervisor import ClusterSpec, Supervisor
from cli.dashboard.heatmap import (
    History,
    covering,
    heatmap,
    hot_rows,
    layout_of,
    ops_per_second,
    row_heights,
    rows_of,
)
from cli.dashboard.ports import browser_refuses
from cli.dashboard.server import heatmap_params
from cli.dashboard.state import state_view
from rangetable.errors import TableError


def rng(rid: str, low: str, high: str | None, table: str = "t") -> dict:
    return {"id": rid, "table": table, "low": low, "high": high, "primary": "ps-1", "epoch": 1, "state": "serving"}


def load(ops: float, entities: int = 0) -> dict:
    return {"reads_s": ops / 2, "writes_s": ops / 2, "busy_s": 0.0, "entities": entities}


def test_ops_per_second_counts_reads_writes_and_refusals() -> None:
    assert ops_per_second({"reads_s": 1.5, "writes_s": 2, "busy_s": 0.5, "entities_s": 100}) == 4.0
    assert ops_per_second({}) == 0.0


def test_layout_orders_tables_case_insensitively_then_by_low() -> None:
    spans = layout_of([rng("r3", "m", None, "b"), rng("r1", "", "m", "b"), rng("r9", "", None, "A")])
    assert [(s.table, s.low) for s in spans] == [("A", ""), ("b", ""), ("b", "m")]


def test_rows_cut_at_every_boundary_seen() -> None:
    before = layout_of([rng("r1", "", None)])
    after = layout_of([rng("r2", "", "m"), rng("r3", "m", None)])
    rows = rows_of([before, after])
    assert [(r.low, r.high) for r in rows] == [("", "m"), ("m", None)]
    assert covering(before, rows) == [[0], [0]]  # before the split, one range holds both rows
    assert covering(after, rows) == [[0], [1]]


def test_covering_marks_rows_of_a_table_that_did_not_exist() -> None:
    one = layout_of([rng("r1", "", None, "a")])
    two = layout_of([rng("r1", "", None, "a"), rng("r2", "", None, "b")])
    rows = rows_of([one, two])
    assert [r.table for r in rows] == ["a", "b"]
    assert covering(one, rows) == [[0], []]


def test_split_then_merge_keeps_rows_and_values_in_place() -> None:
    h = History()
    h.add(0, [rng("r1", "", None)], {"r1": load(10)})  # one range, hot
    h.add(1, [rng("r2", "", "m"), rng("r3", "m", None)], {"r2": load(0), "r3": load(20)})  # split at m
    h.add(2, [rng("r4", "", None)], {"r4": load(4)})  # merged back
    res = heatmap(list(h.columns), h.sizes, 0, 2, width=10, mode="even")
    assert [(r["low"], r["high"]) for r in res["rows"]] == [("", "m"), ("m", None)]
    assert res["values"] == [[10.0, 10.0], [0.0, 20.0], [4.0, 4.0]]
    assert [res["layouts"][i] for i in res["column_layout"]] == [["r1", "r1"], ["r2", "r3"], ["r4", "r4"]]
    assert res["times"] == [0, 1, 2] and res["step"] == 1 and res["max"] == 20.0
    assert [r["y"] for r in res["rows"]] == [0.0, 0.5] and [r["h"] for r in res["rows"]] == [0.5, 0.5]


def test_window_leaves_out_older_columns_and_their_boundaries() -> None:
    h = History()
    h.add(0, [rng("r2", "", "m"), rng("r3", "m", None)], {"r2": load(1), "r3": load(1)})
    h.add(10, [rng("r4", "", None)], {"r4": load(3)})
    res = heatmap(list(h.columns), h.sizes, 5, 10, mode="even")
    assert [(r["low"], r["high"]) for r in res["rows"]] == [("", None)]
    assert res["values"] == [[3.0]]


def test_missing_report_is_none_and_not_averaged_as_zero() -> None:
    h = History()
    h.add(0, [rng("r1", "", None)], {})
    h.add(1, [rng("r1", "", None)], {"r1": load(8)})
    assert math.isnan(h.columns[0].ops[0])
    assert heatmap(list(h.columns), h.sizes, 0, 1)["values"] == [[None], [8.0]]
    # Bucketed into one: the mean is over the reports that exist.
    assert heatmap(list(h.columns), h.sizes, 0, 1, width=1)["values"] == [[8.0]]


def test_buckets_average_columns_when_more_than_width() -> None:
    h = History()
    for t in range(100):
        h.add(t, [rng("r1", "", None)], {"r1": load(t % 2 * 10)})  # 0, 10, 0, 10 …
    res = heatmap(list(h.columns), h.sizes, 0, 100, width=10)
    assert len(res["times"]) == 10 and res["step"] == 10.0
    assert res["values"] == [[5.0]] * 10
    assert res["column_layout"] == [0] * 10 and res["layouts"] == [["r1"]]


def test_empty_bucket_is_a_gap() -> None:
    h = History()
    h.add(0, [rng("r1", "", None)], {"r1": load(2)})
    h.add(99, [rng("r1", "", None)], {"r1": load(2)})
    res = heatmap(list(h.columns) * 1, h.sizes, 0, 100, width=1)
    assert res["values"] == [[2.0]]
    res = heatmap([*h.columns, *h.columns], h.sizes, 0, 100, width=3)  # 4 columns > 3 buckets
    assert res["values"][1] == [None] and res["layouts"][res["column_layout"][1]] == [None]


def test_history_is_bounded_and_shares_layouts() -> None:
    h = History(max_columns=5)
    ranges = [rng("r1", "", "m"), rng("r2", "m", None)]
    for t in range(20):
        h.add(t, ranges, {"r1": load(1), "r2": load(2)})
    assert len(h.columns) == 5 and h.columns[0].t == 15
    assert len({id(c.layout) for c in h.columns}) == 1
    assert h.approx_bytes() < 5 * (120 + 8) + 2 * 200 + 64 + 1


def test_history_forgets_sizes_of_ranges_no_column_holds() -> None:
    h = History(max_columns=2)
    for i in range(200):
        h.add(i, [rng(f"r{i}", "", None)], {f"r{i}": load(1, entities=i)})
    assert set(h.sizes) <= {f"r{i}" for i in range(100, 200)} and "r199" in h.sizes
    assert len(h.sizes) <= 2 + 64 + 2


def test_heights_by_size_keep_empty_ranges_visible() -> None:
    rows = rows_of([layout_of([rng("r1", "", "m"), rng("r2", "m", None)])])
    placed = row_heights(rows, [["r1"], ["r2"]], {"r1": 0, "r2": 300})
    assert [r.h for r in placed] == [0.25, 0.75] and [r.y for r in placed] == [0.0, 0.25]
    assert [r.h for r in row_heights(rows, [["r1"], ["r2"]], {})] == [0.5, 0.5]  # no sizes yet: even
    # A range split into two rows shares its entities between them.
    placed = row_heights(rows, [["r1"], ["r1"]], {"r1": 100})
    assert [r.h for r in placed] == [0.5, 0.5]
    with pytest.raises(ValueError):
        row_heights(rows, [["r1"], ["r2"]], {}, mode="keys")


def test_heights_by_size_in_the_heatmap_use_the_latest_sizes() -> None:
    h = History()
    h.add(0, [rng("r1", "", "m"), rng("r2", "m", None)], {"r1": load(0, 10), "r2": load(0, 10)})
    h.add(1, [rng("r1", "", "m"), rng("r2", "m", None)], {"r1": load(0, 0), "r2": load(0, 90)})
    res = heatmap(list(h.columns), h.sizes, 0, 1)
    assert [r["h"] for r in res["rows"]] == [0.25, 0.75]
    assert sum(r["h"] for r in res["rows"]) == pytest.approx(1.0)


def test_hot_rows_finds_the_hot_key_range() -> None:
    h = History()
    for t in range(5):
        h.add(t, [rng("r1", "", "k"), rng("r2", "k", "p"), rng("r3", "p", None)],
              {"r1": load(1), "r2": load(500), "r3": load(2)})
    res = heatmap(list(h.columns), h.sizes, 0, 5)
    assert [(r["low"], r["high"]) for r in hot_rows(res, 100)] == [("k", "p")]


def test_an_append_only_pattern_is_the_last_row_of_its_table() -> None:
    h = History()
    h.add(0, [rng("r1", "", None)], {"r1": load(100)})
    h.add(1, [rng("r2", "", "k5"), rng("r3", "k5", None)], {"r2": load(0), "r3": load(100)})
    h.add(2, [rng("r2", "", "k5"), rng("r4", "k5", "k9"), rng("r5", "k9", None)],
          {"r2": load(0), "r4": load(0), "r5": load(100)})
    res = heatmap(list(h.columns), h.sizes, 0, 2, mode="even")
    assert [v[-1] for v in res["values"]] == [100.0, 100.0, 100.0]  # the newest keys are always hot
    assert res["values"][-1] == [0.0, 0.0, 100.0]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        heatmap([], {}, 0, 1, width=0)
    assert heatmap([], {}, 0, 1)["rows"] == []


def test_heatmap_params() -> None:
    assert heatmap_params("", 3600) == (900.0, 600, "size")
    assert heatmap_params("window=60&width=10&height=even", 3600) == (60.0, 10, "even")
    assert heatmap_params("", 300)[0] == 300.0
    for bad in ("window=x", "window=0", "window=7200", "width=0", "width=5000", "width=1.5", "height=keys"):
        with pytest.raises(TableError) as exc:
            heatmap_params(bad, 3600)
        assert exc.value.error_code == "InvalidQueryParameterValue" and exc.value.status_code == 400


def test_state_view_servers_and_ranges() -> None:
    status = {
        "version": 7, "tables": ["t"],
        "ranges": [rng("r1", "", "m"), {**rng("r2", "m", None), "primary": "ps-2", "state": "moving"}],
        "servers": [
            {"id": "ps-1", "endpoint": "tcp://a", "alive": True, "pid": 1, "last_seen_s": 0.3, "ranges": 1,
             "pending": 0, "load": {"r1": {"reads_s": 3, "writes_s": 4, "busy_s": 1, "entities": 5, "bytes": 50}},
             "holds": {"primary": {"ranges": 1, "entities": 5, "bytes": 50},
                       "follower": {"ranges": 2, "entities": 7, "bytes": 70}}},
            {"id": "ps-2", "endpoint": "tcp://b", "alive": False, "pid": 2, "last_seen_s": 9.0, "ranges": 1,
             "pending": 0, "load": {}},
        ],
    }
    v = state_view(status, lease_s=2.0)
    assert v["version"] == 7
    s1, s2 = v["servers"]
    assert (s1["lease"], s1["ops_s"]) == ("held", 8.0)
    assert s1["primary"] == {"ranges": 1, "entities": 5, "bytes": 50}  # as the coordinator's status says
    assert s1["follower"] == {"ranges": 2, "entities": 7, "bytes": 70}
    assert (s2["alive"], s2["lease"], s2["ops_s"]) == (False, "lapsed", 0.0)
    assert s2["primary"] == s2["follower"] == {"ranges": 0, "entities": 0, "bytes": 0}  # no holds: nothing shown
    r1, r2 = v["ranges"]
    assert (r1["ops_s"], r1["entities"], r1["reported"]) == (8.0, 5, True)
    assert (r2["state"], r2["primary"], r2["reported"], r2["ops_s"]) == ("moving", "ps-2", False, 0.0)
    assert state_view({}, 2.0) == {"version": None, "tables": [], "servers": [], "ranges": [], "replication": {
        "replicas": 1, "replicated": 0, "under_replicated": 0, "not_in_sync": 0, "rebuilding": []}, "geo": None}
    geo = {"tables": [{"table": "t", "cut": 5, "lag_s": 0.1, "alarm": False}], "last_sync": 5, "alarm_s": 60.0}
    assert state_view({"geo": geo}, 2.0)["geo"] == geo  # a secondary cluster's section, as the coordinator said


def test_rows_are_capped_and_a_coarse_row_shows_its_hottest_range() -> None:
    ranges = [rng(f"r{i}", "" if i == 0 else f"k{i:02d}", f"k{i + 1:02d}" if i < 9 else None) for i in range(10)]
    rows = rows_of([layout_of(ranges), layout_of([rng("x", "", None, "other")])], max_rows=4)
    assert [(r.table, r.low, r.high) for r in rows] == [
        ("other", "", None), ("t", "", "k04"), ("t", "k04", "k07"), ("t", "k07", None)]
    assert covering(layout_of(ranges), rows) == [[], [0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    h = History()
    h.add(0, ranges, {f"r{i}": load(100 if i == 4 else 1, entities=10) for i in range(10)})
    res = heatmap(list(h.columns), h.sizes, 0, 0, max_rows=3)
    assert [(r["low"], r["high"]) for r in res["rows"]] == [("", "k04"), ("k04", "k07"), ("k07", None)]
    assert res["values"] == [[1.0, 100.0, 1.0]]
    assert res["layouts"] == [["r0", "r4", "r7"]]
    assert [r["h"] for r in res["rows"]] == pytest.approx([1 / 6 + 0.5 * 0.4, 1 / 6 + 0.5 * 0.3, 1 / 6 + 0.5 * 0.3], abs=1e-5)
    # More tables than rows: every table keeps its one row.
    assert len(rows_of([layout_of([rng(f"r{i}", "", None, f"t{i}") for i in range(5)])], max_rows=2)) == 5


def test_the_dashboard_never_lands_on_a_port_browsers_refuse(tmp_path, monkeypatch) -> None:
    assert browser_refuses(10080) and browser_refuses(6000) and not browser_refuses(10081)
    from cli.cluster import supervisor

    taken = iter([11001, 11002, 10080, 6666, 23456])  # what the port reservation hands out, in order
    monkeypatch.setattr(supervisor.PortReservation, "take", lambda self: next(taken))
    sup = Supervisor(ClusterSpec(data_dir=str(tmp_path), servers=0, frontends=0, http_port=11003, dashboard_port=0,
                                 metrics=False))
    sup.plan()  # the coordinator's two ports, then the dashboard's: 10080 and 6666 are passed over
    assert sup.coordinator.endswith(":11001") and sup.dashboard == "http://127.0.0.1:23456/"


def test_a_silent_coordinator_is_shown_not_fatal() -> None:
    from cli.coordinator_client import call
    from cli.dashboard.state import Watch
    from rangetable import curve

    curve.remember("tcp://127.0.0.1:1", curve.KeyPair.generate().public, curve.KeyPair.generate())
    watch = Watch("tcp://127.0.0.1:1", call, interval_s=0.5, history_s=10)  # nothing listens there
    assert watch.poll(now=1.0) is False
    st = watch.state()
    assert st["error"].startswith("OperationTimedOut") and st["history"]["columns"] == 0 and st["servers"] == []
    assert watch.heatmap(10, 100, "size", now=2.0)["rows"] == []

    def broken(endpoint: str, body: dict, timeout: float) -> dict:
        return {"ranges": [{"id": "r1"}]}  # no table, no bounds

    watch = Watch("tcp://x", broken, interval_s=0.01, history_s=1)
    stop = threading.Event()
    t = threading.Thread(target=watch.run, args=(stop,))
    t.start()
    time.sleep(0.1)
    stop.set()
    t.join(5)
    assert watch.poll_errors >= 2 and watch.error.startswith("InternalError") and not t.is_alive()
