"""``bench soak``'s verdict (pure): throughput held, and memory less the block caches stayed flat."""

from __future__ import annotations

from cli.bench.soak import Tally, format_row, format_verdict, make_row, trend, verdict

MIB = 1 << 20


def row(t: float, ops_s: float, rss_mib: int, cache_mib: int) -> dict:
    tally = Tally(lat=[0.001] * int(ops_s * 60))
    return make_row(t, 60.0, tally, {"ps-1": rss_mib * MIB, "fe-1": 30 * MIB}, 0, 0, {"ps-1": cache_mib * MIB})


def test_a_block_cache_filling_to_its_capacity_is_warm_up() -> None:
    rows = [row(60 * i, 1000, 100 + 10 * i, 10 * i) for i in range(1, 11)]  # all growth is the cache
    v = verdict(rows, warmup_rows=2)
    assert v["ok"] and v["rss_growth"] == 0.0 and v["rss_growth_raw"] > 0.3
    assert v["block_cache_mib"] == [30, 90] and v["memory_rows"] == [[2, 4], [8, 10]]  # means of 3 rows each
    assert "PASS" in format_verdict(v) and "block caches 30 -> 90 MiB" in format_verdict(v)
    assert "intervals 8-10 against 2-4 on average" in format_verdict(v)


def test_growth_outside_the_block_cache_fails() -> None:
    rows = [row(60 * i, 1000, 100 + 10 * i, 0) for i in range(1, 11)]
    v = verdict(rows, warmup_rows=2)
    assert not v["ok"] and v["rss_growth"] > 0.1 and format_verdict(v).startswith("FAIL")


def test_memtables_filling_and_flushing_in_cycles_are_not_growth() -> None:
    """RSS less the caches swings with the memtables' cycle (a 60 MiB saw here): the verdict compares means
    over windows, so where the two end rows stand in the cycle decides nothing."""
    saw = [row(60 * i, 1000, 200 + (60 if i % 3 == 0 else 0), 0) for i in range(1, 61)]
    v = verdict(saw, 12)  # warm-up ends at row 12; a peak every third row
    assert v["memory_rows"] == [[12, 21], [51, 60]]
    assert v["ok"] and abs(v["rss_growth"]) < 0.01
    single = (saw[-1]["rss_total"] - saw[10]["rss_total"]) / saw[10]["rss_total"]
    assert single > 0.1  # two single rows, a trough (row 11) and a peak (row 60), would have failed it
    growing = [row(60 * i, 1000, 200 + 2 * i, 0) for i in range(1, 61)]  # +2 MiB a minute: real growth
    assert not verdict(growing, 12)["ok"] and verdict(growing, 12)["rss_growth"] > 0.1


def test_memory_windows_never_overlap_unless_the_run_is_too_short() -> None:
    from cli.bench.soak import memory_windows

    assert memory_windows(120, 24, 10) == (range(23, 33), range(110, 120))
    assert memory_windows(30, 6, 10) == (range(5, 15), range(20, 30))
    assert memory_windows(10, 2, 3) == (range(1, 4), range(7, 10))
    assert memory_windows(12, 8, 4) == (range(7, 8), range(8, 12))  # the after-warm-up window shrinks to a row
    assert memory_windows(2, 1, 1) == (range(0, 1), range(1, 2))
    assert memory_windows(6, 9, 2) == (range(4, 5), range(4, 6))  # warm-up past the end: its last row


def test_a_short_run_is_judged_from_its_first_interval() -> None:
    assert verdict([row(60, 1000, 100, 0), row(120, 905, 100, 0)], 1)["ok"]
    v = verdict([row(60, 1000, 100, 0), row(120, 895, 100, 0)], 1)
    assert not v["ok"] and v["hold"] == 0.895
    assert not verdict([row(60, 1000, 100, 0)], 1)["ok"]


def test_the_last_ten_minutes_are_judged_against_minute_two() -> None:
    """Issue 36's goal: the last 10 minutes hold on average >= 90% of minute 2's ops/s."""
    flat = [row(60 * i, 1000, 100, 0) for i in range(1, 31)]
    flat[0] = row(60, 1500, 100, 0)  # a lucky first minute (the caches warm, no compaction yet) decides nothing
    flat[-1] = row(1800, 700, 100, 0)  # nor does one slow last minute: the last ten average 970
    v = verdict(flat, 2)
    assert v["ok"] and v["hold"] == 0.97 and (v["from_row"], v["held_rows"], v["held_ops_s"]) == (2, 10, 970.0)
    assert "last 10 intervals 970.0 ops/s on average = 97.0% of interval 2's (1000.0" in format_verdict(v)
    sagging = flat[:20] + [row(60 * i, 880, 100, 0) for i in range(21, 31)]
    assert not verdict(sagging, 2)["ok"] and verdict(sagging, 2)["hold"] == 0.88
    short = [row(60 * i, 1000 - 10 * i, 100, 0) for i in range(1, 7)]  # 6 rows: the last third, 2 rows
    assert verdict(short, 2)["held_rows"] == 2 and verdict(short, 2)["from_row"] == 2


def test_the_fitted_trend_is_not_moved_much_by_one_noisy_end_interval() -> None:
    flat = [row(60 * i, 1000, 100, 0) for i in range(1, 21)]
    flat[0] = row(60, 1120, 100, 0)  # a lucky first interval
    v = verdict(flat, 2)
    assert v["hold"] == 1.0 and v["ok"]  # judged from the second interval on
    assert 0.96 < v["trend"] < 1.0 and "ops/s ended at" in format_verdict(v)
    falling = [row(60 * i, 1000 - 20 * i, 100, 0) for i in range(1, 11)]
    assert abs(trend(falling) - 800 / 980) < 1e-9  # a straight line is its own fit
    assert trend(falling[:1]) == 0.0


def test_a_row_shows_each_partition_servers_block_cache() -> None:
    line = format_row(row(60, 1000, 150, 64))
    assert "ps-1 150/c64" in line and "fe-1 30" in line and "fe-1 30/" not in line


def test_a_row_shows_memtables_rings_and_table_readers_from_the_metrics() -> None:
    from cli.bench.soak import parse_memory

    text = "\n".join([
        '# HELP rangetable_server_memory_bytes x',
        'rangetable_server_rocksdb_memory_bytes{kind="block_cache",server="ps-1"} 6.7108864e+07',
        'rangetable_server_rocksdb_memory_bytes{kind="memtables",server="ps-1"} 1.0e+09',  # the WBM's: not shown
        'rangetable_server_memory_bytes{kind="replica_logs",server="ps-1"} 2.097152e+07',
        'rangetable_server_memory_bytes{kind="memtables",server="ps-1"} 1.048576e+07',
        'rangetable_server_memory_bytes{kind="table_readers",server="ps-1"} 1024.0',
    ])
    mem = parse_memory(text)
    assert mem == {"c": 64 * MIB, "r": 20 * MIB, "m": 10 * MIB, "t": 1024}
    r = make_row(60, 60.0, Tally(lat=[0.001]), {"ps-1": 150 * MIB, "fe-1": 30 * MIB}, 0, 0, {"ps-1": mem["c"]},
                 {"ps-1": mem}, load=3.25)
    line = format_row(r)
    assert "ps-1 150/c64/m10/r20/t0 fe-1 30" in line and r["load"] == 3.25
    assert " 3.2 " in line or " 3.3 " in line


def test_the_verdict_also_shows_growth_less_every_bounded_pool() -> None:
    def r(t: float, rss: int, rings: int, mem: int) -> dict:
        return make_row(t, 60.0, Tally(lat=[0.001] * 60), {"ps-1": rss * MIB}, 0, 0, {"ps-1": 10 * MIB},
                        {"ps-1": {"c": 10 * MIB, "r": rings * MIB, "m": mem * MIB, "t": 0}})

    rows = [r(60, 100, 10, 10), r(120, 130, 30, 20)]  # all growth is rings and memtables
    v = verdict(rows, 1)
    assert v["rss_growth"] > 0.3 and not v["ok"]  # judged as before: RSS less the block cache
    assert v["rest_growth"] == 0.0 and v["held_mib"] == [20, 50]
    assert "rings and table readers too (20 -> 50 MiB), RSS grew +0.0%" in format_verdict(v)
    assert "rings" not in format_verdict(verdict([row(60, 1000, 100, 10), row(120, 1000, 100, 10)], 1))


def test_a_row_shows_what_rocksdb_counted_over_the_servers_and_each_process_cpu() -> None:
    from cli.bench.soak import cpu_shares, parse_rocksdb, rocksdb_interval

    def text(seeks: int, skips: int, hits: int, misses: int, stall: int, cmp: int, tomb: int) -> str:
        events = {"seeks": seeks, "iter_skips": skips, "block_cache_hits": hits, "block_cache_misses": misses,
                  "stall_micros": stall, "compaction_write_bytes": cmp}
        return "\n".join([f'rangetable_server_rocksdb_events_total{{event="{k}",server="ps-1"}} {float(v)}'
                          for k, v in events.items()] + [f'rangetable_server_rocksdb_tombstones{{server="ps-1"}} {tomb}'])

    before = {"ps-1": parse_rocksdb(text(100, 50, 900, 100, 0, 0, 10)), "ps-2": parse_rocksdb(text(500, 300, 0, 0, 0, 0, 0))}
    assert before["ps-1"]["seeks"] == 100 and before["ps-1"]["tombstones"] == 10
    after = {"ps-1": parse_rocksdb(text(300, 450, 1800, 200, 2500, 3 * MIB, 4000)),
             "ps-2": parse_rocksdb(text(100, 100, 0, 0, 0, 0, 0))}  # ps-2 restarted: its counters went back
    r = rocksdb_interval(before, after)
    assert r == {"skip_per_seek": round((400 + 100) / (200 + 100), 2), "cache_hit": 0.9, "stall_ms": 2.5,
                 "compaction_mib": 3.0, "tombstones": 4000.0}
    cpu = cpu_shares({"ps-1": 10.0, "client": 5.0}, {"ps-1": 40.0, "client": 65.0, "fe-1": 3.0}, 60.0)
    assert cpu == {"ps-1": 50.0, "client": 100.0, "fe-1": 5.0}
    row_ = make_row(60, 60.0, Tally(lat=[0.001]), {"ps-1": 150 * MIB}, 0, 0, cpu=cpu, rocksdb=r)
    line = format_row(row_)
    assert "ps-1 150@50%" in line and "client @100%" in line and " 1.7  90.0     4.0      2     3.0 " in line
    assert row_["rocksdb"] == r and row_["cpu"] == cpu
    assert rocksdb_interval({}, {}) == {"skip_per_seek": 0.0, "cache_hit": 0.0, "stall_ms": 0.0,
                                        "compaction_mib": 0.0, "tombstones": 0}
