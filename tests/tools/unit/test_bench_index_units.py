"""The pure parts of `rangetable bench index` (cli/bench/index.py): the loaded rows (100 per PartitionKey and per
value of Cat), the writes, the figures, the plan checks, the comparison that verifies an index and the table."""

from __future__ import annotations

import functools
import random
from collections import Counter

from cli.bench.index import (
    MATCH,
    IndexedRows,
    ProbeTally,
    compare,
    format_table,
    lag_figures,
    load_split_keys,
    loaded_entity,
    net_cpu_ms,
    query_figures,
    ratio,
    summarize_writes,
    through,
    verdict_lines,
)
from rangetable.values import entity_to_typed


def test_loaded_rows_match_100_per_partition_and_per_value_spread_over_the_table():
    rows = 20_000
    ents = [loaded_entity(i, rows) for i in range(rows)]
    assert len({(pk, rk) for pk, rk, _ in ents}) == rows
    assert set(Counter(pk for pk, _, _ in ents).values()) == {MATCH}
    cats = Counter(p["Cat"][1] for _, _, p in ents)
    assert len(cats) == rows // MATCH and set(cats.values()) == {MATCH}
    c0 = {pk for pk, _, p in ents if p["Cat"][1] == "c0000000"}
    assert len(c0) == MATCH  # each of a value's rows in a partition of its own, all over the table
    assert len(Counter(p["Tag"][1] for _, _, p in ents)) == rows // MATCH
    pk, rk, props = ents[12_345]
    size = len(pk) + len(rk) + sum(len(k) + (len(v) if isinstance(v, str) else 8) for k, (_, v) in props.items())
    assert 250 <= size <= 350
    entity_to_typed({"PartitionKey": pk, "RowKey": rk, "Cat": props["Cat"][1]})  # plain types the client takes
    assert functools.partial(loaded_entity, rows=rows)(7) == loaded_entity(7, rows)  # what parallel_load pickles


def test_split_keys_cut_whole_partitions():
    keys = load_split_keys(1_000_000)
    assert keys == [f"p{10_000 * i // 6:07d}" for i in range(1, 6)]
    assert load_split_keys(100) == [f"p{i:07d}" for i in range(1, 6)]  # at least a partition per range


def test_indexed_writes_move_every_indexed_property():
    rows = IndexedRows(10_000)
    rng = random.Random(3)
    writes = [rows.next(rng) for _ in range(500)]
    assert len({e["Seq"] for e in writes}) == 500
    assert all(e["Cat"].startswith("c") and e["Tag"].startswith("t") and 0 <= e["Qty"] < 1000 for e in writes)
    assert len({e["Cat"] for e in writes}) > 50 and all(int(e["Cat"][1:]) < 100 for e in writes)


def test_query_figures_and_net_cpu():
    f = query_figures([0.01] * 9 + [0.1], 1, 0.5, 0.2, 2.0, 10)
    assert f["queries"] == 10 and f["qps"] == 5.0 and f["p50_ms"] == 10.0 and f["wrong"] == 1
    assert f["server_cpu_ms"] == 50.0 and f["frontend_cpu_ms"] == 20.0 and f["via_index"] == 10
    assert query_figures([], 0, 1.0, 1.0, 0.0, 0)["server_cpu_ms"] == 0.0
    assert net_cpu_ms(1.0, 0.1, 5.0, 10) == 50.0  # 1 s less 0.5 s idle over 10 queries
    assert net_cpu_ms(0.1, 0.1, 5.0, 10) == 0.0 and net_cpu_ms(1.0, 0.0, 1.0, 0) == 0.0
    assert ratio(1, 4) == 0.25 and ratio(1, 0) == 0.0


def test_plans_through_an_index_or_not():
    assert through({"index": "ByCat", "plan": "Cat = 'x'", "fallback": None}, "bycat")
    assert not through({"index": "ByCat", "fallback": "the index is being built"}, "ByCat")
    assert not through(None, "ByCat") and not through({"index": "ByTag", "fallback": None}, "ByCat")


def test_lag_figures_and_probe_tallies():
    t = ProbeTally([0.01, 0.02], [1.5], [0.003], 1, 0, 0)
    t.add(ProbeTally([0.03], [], [2.1], 0, 1, 1))
    f = t.figures()
    assert f["probes"] == 3 and f["lag_p50_ms"] == 20.0 and f["lag_max_ms"] == 30.0
    assert f["fresh_wait_p50_ms"] == 1.5 and f["ryw_queries"] == 2 and f["ryw_fallbacks"] == 1
    assert f["unseen"] == 1 and f["ryw_missed"] == 1
    assert lag_figures([], [], [], 0, 0)["lag_p99_ms"] == 0.0


def test_compare_counts_values_whose_answer_differs():
    expected = {"t1": {("p1", "r1"), ("p2", "r2")}, "t2": {("p3", "r3")}}
    assert compare({"t1": {("p2", "r2"), ("p1", "r1")}, "t2": {("p3", "r3")}}, expected) == 0
    assert compare({"t1": {("p1", "r1")}, "t3": set()}, expected) == 1  # a row missing; t3 matches nothing
    assert compare({"t3": {("p9", "r9")}}, expected) == 1


def _setting(props: list[str], ops: float, cpu: float) -> dict:
    row = {"t": 10, "ops_per_s": ops, "p50_ms": 5.0, "p99_ms": 20.0, "errors": 0, "server_cpu_us": cpu,
           "frontend_cpu_us": 300.0}
    return {"indexes": props, "rows": [row], "writes": dict(row)}


def test_write_costs_and_the_final_table():
    settings = [_setting([], 1000, 1000), _setting(["Cat"], 700, 1300), _setting(["Cat", "Tag", "Qty"], 400, 1600)]
    costs = summarize_writes(settings)
    assert costs == {"0": {"ops_share": 1.0, "cpu_x": 1.0}, "1": {"ops_share": 0.7, "cpu_x": 1.3},
                     "3": {"ops_share": 0.4, "cpu_x": 1.6}}
    steady = {"queries": 10, "qps": 5.0, "p50_ms": 4.0, "p99_ms": 9.0, "server_cpu_ms": 1.0, "server_cpu_net_ms": 0.5,
              "frontend_cpu_ms": 0.2, "wrong": 0, "via_index": 10}
    queries = {"idle_server_cpu_ms_s": 100.0, "idle_frontend_cpu_ms_s": 50.0, "index_plan_ok": True,
               "scan_plan_ok": True, "cpu_ratio": 0.005, "cpu_ratio_raw": 0.01, "latency_ratio": 2.5,
               "latency_ratio_p99": 1.5,
               **{k: {"steady": dict(steady)} for k in ("index", "scan", "pk", "sdk", "sdk_scan")}}
    queries["scan"]["steady"]["via_index"] = 0
    queries["scan"]["steady"]["server_us_per_row"] = 1.9
    queries["sdk_scan"]["steady"]["server_us_per_row"] = 2.45
    lines = verdict_lines(queries)
    assert "aim met" in lines[0] and "aim MISSED" in lines[1]
    res = {"servers": 3, "replicas": 3, "cpus": 2, "rows": 1000, "threads": 8, "seconds": 10.0,
           "load_average": {"min": 1.0, "median": 2.0, "max": 3.0}, "writes": settings, "write_costs": costs,
           "loaded": {"build": {"rows": 1000, "seconds": 2.0, "rows_s": 500.0}, "queries": queries,
                      "online": {"build": {"rows": 1000, "seconds": 3.0, "rows_s": 333.3},
                                 "split": {"range": "r000002", "at_s": 1.0, "during_build": True, "offline_ms": 99},
                                 "kill": {"server": "ps-1", "at_s": 2.0, "during_build": False, "served_again_s": 0.8},
                                 "verify": {"queries": 300, "mismatches": 0, "fallbacks": 0, "literal_scans": 5,
                                            "literal_mismatches": 0}}}}
    text = format_table(res)
    assert "(b) Cat eq, base scan" in text and "(e) Cat eq, SDK base scan" in text and "as intended" in text
    assert "server CPU per row scanned (net): (b) native 1.90 µs, (e) REST 2.45 µs" in text
    assert "3 indexes (Cat,Tag,Qty)" in text and "0.40" in text
    assert "split r000002 at 1.0 s (during the build)" in text and "(AFTER the build)" in text
    assert "300 queries through ByTag against a base scan: 0 mismatches" in text
