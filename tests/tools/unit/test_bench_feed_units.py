"""The pure parts of `rangetable bench feed` (cli/bench/feed.py): the writes, the matching of acknowledgements
and sightings into lags, the figures, the costs against the issue's aims and the final table."""

from __future__ import annotations

import random

from cli.bench.feed import LagBook, Rows, format_row, format_table, lag_figures, summarize, write_figures


def test_rows_are_upserts_of_the_row_set_each_told_apart_by_its_seq():
    rows = Rows(50)
    rng = random.Random(1)
    writes = [rows.next(rng) for _ in range(1000)]
    assert len({(e["RowKey"], e["Seq"]) for e in writes}) == 1000
    assert [e["Seq"] for e in writes] == list(range(1000))
    assert len({e["RowKey"] for e in writes}) == 50  # rows are written again and again
    assert {e["PartitionKey"] for e in writes} <= {f"p{i:07d}" for i in range(60)}
    assert all(int(e["RowKey"][1:]) % 60 == int(e["PartitionKey"][1:]) for e in writes)


def test_a_lag_is_the_sighting_less_the_acknowledgement_whichever_came_first():
    book = LagBook()
    book.ack(("r1", 1), 10.0)
    book.saw([("r1", 1), ("r2", 2)], 10.25)  # r2: the reader before its writer's acknowledgement
    assert book.unseen() == 0
    book.ack(("r2", 2), 10.5)
    book.ack(("r3", 3), 11.0)
    assert book.unseen() == 1
    lags, read = book.take()
    assert lags == [0.25, 0.0] and read == 2
    assert book.take() == ([], 0)


def test_figures_of_an_interval():
    w = write_figures([0.001] * 99 + [0.1], 2, 0.05, 2.0)
    assert w == {"ops_per_s": 50.0, "p50_ms": 1.0, "p99_ms": w["p99_ms"], "errors": 2, "server_cpu_us": 500.0}
    assert 1.0 <= w["p99_ms"] <= 100.0
    assert lag_figures([0.01, 0.02, 0.03], 30, 3.0)["read_per_s"] == 10.0
    assert lag_figures([], 0, 0.0) == {"lag_p50_ms": 0.0, "lag_p99_ms": 0.0, "lag_max_ms": 0.0, "read_per_s": 0.0}
    row = {"t": 10, **w, **lag_figures([0.01, 0.03], 2, 1.0)}
    text = format_row("feed on", row)
    assert text.startswith("feed on      10 s ") and "lag p50" in text and "errors 2" in text
    assert "lag" not in format_row("feed off", {"t": 10, **w})


def _setting(on: bool, ops: float, p99: float, *, disk: float, bulk: float, catchup: float | None = None) -> dict:
    s: dict = {"feed": on, "writes": {"ops_per_s": ops, "p50_ms": 2.0, "p99_ms": p99, "server_cpu_us": 300.0,
                                      "errors": 0},
               "rows": [{"t": 10, "ops_per_s": ops, "p99_ms": p99}, {"t": 20, "ops_per_s": ops + 1, "p99_ms": p99}],
               "bulk": {"entities": 1000, "entities_s": bulk, "disk_bytes": int(disk * 1000) + 1,
                        "disk_mb_per_million": disk}}
    if on:
        s["lag"] = {"lag_p50_ms": 20.0, "lag_p99_ms": 80.0, "lag_max_ms": 120.0, "read_per_s": ops, "unseen": 0}
        for r in s["rows"]:
            r.update(lag_p50_ms=20.0, lag_p99_ms=80.0)
    if catchup is not None:
        s["bulk"]["catchup"] = {"changes": 1000, "seconds": 1000 / catchup, "changes_s": catchup}
    return s


def test_the_costs_are_judged_against_the_issues_aims():
    off = _setting(False, 1000, 10, disk=400, bulk=10_000)
    on = _setting(True, 920, 10.8, disk=600, bulk=9000, catchup=5000)
    c = summarize(off, on)
    assert c["throughput_cost"] == 0.08 and c["p99_cost"] == 0.08 and c["cost_met"]
    assert c["lag_met"] and c["catchup_x_writes"] == 5.43 and c["catchup_met"] and c["catchup_x_bulk"] == 0.56
    assert c["bulk_cost"] == 0.1 and c["disk_feed_mb_per_million"] == 200 and c["disk_growth"] == 0.5
    assert not summarize(off, _setting(True, 890, 10, disk=600, bulk=9000))["cost_met"]
    assert not summarize(off, _setting(True, 1000, 11.5, disk=600, bulk=9000))["cost_met"]
    slow = _setting(True, 1000, 10, disk=600, bulk=9000, catchup=4000)
    assert not summarize(off, slow)["catchup_met"]
    lagging = _setting(True, 1000, 10, disk=600, bulk=9000)
    lagging["lag"]["lag_p99_ms"] = 101.0
    assert not summarize(off, lagging)["lag_met"]
    lost = _setting(True, 1000, 10, disk=600, bulk=9000)
    lost["lag"]["unseen"] = 1
    assert not summarize(off, lost)["lag_met"]


def test_the_table_shows_both_settings_the_aims_and_the_intervals():
    off = _setting(False, 2000, 10, disk=400, bulk=10_000)
    on = _setting(True, 1900, 10.5, disk=600, bulk=9000, catchup=12_000)
    res = {"servers": 3, "replicas": 3, "cpus": 2, "threads": 8, "seconds": 120.0, "settings": [off, on],
           "cost": summarize(off, on), "load_average": {"min": 1.5, "median": 2.0, "max": 3.25}}
    text = format_table(res)
    assert "load average (1 min) during the run: 1.5 to 3.25, median 2.0" in text
    assert "2,000" in text and "1,900" in text and "10,000" in text and "400.0" in text and "600.0" in text
    assert "write throughput -5.0%, write p99 +5.0% (aim: a cost of at most 10% each): aim met; bulk ingest -10.0%" \
        in text
    assert "p50 20.0 ms, p99 80.0 ms, max 120.0 ms (aim p99 <= 100 ms): aim met; every acknowledged write read" in text
    assert "catch-up of 1,000 changes from the beginning: 0.1 s = 12,000 changes/s = 6.3x the feed-on write rate " \
           "(aim >= 5x): aim met; 1.3x the bulk ingest rate" in text
    assert "disk per 1M changes: feed off 400.0 MB, on 600.0 MB: the feed +200.0 MB (+50%)" in text
    assert "  write ops/s   feed off  2,000 2,001" in text and "  lag p99 ms    feed on   80.0 80.0" in text
