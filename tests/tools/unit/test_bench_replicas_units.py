"""The pure parts of `rangetable bench replicas` (cli/bench/replicas.py): layout keys, steady figures,
the cost verdict, the final table and the rebuild line of a partition server's log."""

from __future__ import annotations

import random

from cli.bench.replicas import (
    FreshUpserts,
    capacity,
    cost,
    format_table,
    rebuilt_from_logs,
    split_keys,
    steady,
    summarize_writes,
    table_partitions,
)


def test_the_table_has_a_partition_per_thousand_bulk_rows_and_at_least_one_per_range():
    assert table_partitions(0) == 6
    assert table_partitions(6000) == 6
    assert table_partitions(300_000) == 300
    assert table_partitions(300_001) == 301


def test_split_keys_cut_the_partitions_into_even_ranges():
    assert split_keys(6) == ["p0000001", "p0000002", "p0000003", "p0000004", "p0000005"]
    assert split_keys(300) == ["p0000050", "p0000100", "p0000150", "p0000200", "p0000250"]
    assert split_keys(300, 2) == ["p0000150"]


def test_fresh_upserts_write_distinct_rows_of_the_table_and_never_read():
    mix = FreshUpserts(partitions=6)
    rng = random.Random(1)
    ops = [mix.operation(rng) for _ in range(500)]
    assert not any(read for read, *_ in ops)
    assert len({(pk, rk) for _, pk, rk, _ in ops}) == 500
    assert {pk for _, pk, _, _ in ops} == {f"p{i:07d}" for i in range(6)}
    assert all(e["PartitionKey"] == pk and e["RowKey"] == rk for _, pk, rk, e in ops)


ROWS = [{"ops_per_s": 10.0, "p50_ms": 9.0, "p99_ms": 90.0, "server_cpu_us": 900.0, "frontend_cpu_us": 90.0},
        {"ops_per_s": 100.0, "p50_ms": 1.0, "p99_ms": 10.0, "server_cpu_us": 300.0, "frontend_cpu_us": 100.0},
        {"ops_per_s": 120.0, "p50_ms": 2.0, "p99_ms": 20.0, "server_cpu_us": 200.0, "frontend_cpu_us": 110.0,
         "errors": 2},
        {"ops_per_s": 110.0, "p50_ms": 3.0, "p99_ms": 30.0, "server_cpu_us": 100.0, "frontend_cpu_us": 120.0}]


def test_steady_figures_are_medians_of_the_intervals_after_the_first():
    assert steady(ROWS, "ops_per_s") == 110.0
    assert steady(ROWS[:1], "ops_per_s") == 10.0  # one interval: that one
    assert steady([], "ops_per_s") == 0.0
    assert summarize_writes(ROWS) == {"ops_s": 110.0, "p50_ms": 2.0, "p99_ms": 20.0, "cpu_us": 200.0,
                                      "frontend_cpu_us": 110.0, "errors": 2}


def _setting(n: int, ops: float, p99: float, bulk: float | None = None, cpu: float | None = None) -> dict:
    s = {"replicas": n, "writes": {"ops_s": ops, "p50_ms": 1.0, "p99_ms": p99,
                                   "cpu_us": 100.0 * n if cpu is None else cpu, "frontend_cpu_us": 50.0, "errors": 0}}
    if bulk is not None:
        s["bulk"] = {"entities_s": bulk, "cpu_us": 10.0 * n}
    return s


def test_cost_judges_the_issue_goal():
    assert cost(_setting(1, 1000, 10), _setting(3, 700, 15, cpu=200)) == {
        "throughput_share": 0.7, "p99_ratio": 1.5, "cpu_ratio": 2.0, "goal_met": True}
    assert not cost(_setting(1, 1000, 10), _setting(3, 699, 10, cpu=200))["goal_met"]
    assert not cost(_setting(1, 1000, 10), _setting(3, 900, 16, cpu=200))["goal_met"]
    assert not cost(_setting(1, 1000, 10), _setting(3, 900, 10, cpu=201))["goal_met"]
    assert cost(_setting(1, 1000, 10, 5000), _setting(3, 900, 10, 2000))["bulk_share"] == 0.4
    assert cost(None, _setting(3, 900, 10)) == {}


def _load(threads: int, one: dict, three: dict) -> dict:
    return {"threads": threads, "settings": [one, three], "cost": cost(one, three)}


def test_capacity_compares_each_settings_best_load():
    loads = [_load(8, _setting(1, 4000, 10), _setting(3, 2400, 15)), _load(32, _setting(1, 3900, 30), _setting(3, 3000, 33))]
    assert capacity(loads) == {"replicas_1": {"ops_s": 4000, "threads": 8}, "replicas_3": {"ops_s": 3000, "threads": 32},
                               "throughput_share": 0.75, "goal_met": True}
    assert not capacity(loads[:1])["goal_met"]  # 60 %
    assert capacity([{"threads": 8, "settings": [_setting(3, 2400, 15)], "cost": {}}]) == {}


def test_the_table_shows_each_load_the_capacity_and_each_rebuild():
    one, three = _setting(1, 2000, 10, 9000), _setting(3, 1000, 30, 3000)
    loads = [_load(8, one, three), _load(32, _setting(1, 2100, 12), _setting(3, 1800, 15))]
    res = {"servers": 3, "cpus": 2, "threads": [8, 32], "loads": loads, "capacity": capacity(loads),
           "host": {"zmq_send_cpu_us": {"0.0 ms": 2.9, "0.5 ms": 21.6, "2.0 ms": 47.8}},
           "load_average": {"min": 1.5, "median": 2.0, "max": 3.25},
           "rebuilds": [{"rebuild_mb_s": 100.0, "range_mb": 210.0, "restored_s": 6.5, "lost_seen_s": 2.4,
                         "end_to_end_mb_s": 32.3,
                         "copy": {"mb": 210.0, "seconds": 2.2, "mb_s": 95.4}},
                        {"rebuild_mb_s": 0.0, "range_mb": 210.0, "restored_s": None, "copy": None}]}
    text = format_table(res)
    assert ("this host charges for waking up: a ZeroMQ send costs the sender 2.9 µs of CPU back to back, 47.8 µs "
            "after 2.0 ms idle") in text
    assert "replicas 1" in text and "replicas 3" in text
    assert "load average (1 min) during the run: 1.5 to 3.25, median 2.0" in text
    assert "2,000" in text and "1,000" in text and "9,000" in text
    assert "(3 partition servers on 2 cores, 8 client threads)" in text
    assert "(3 partition servers on 2 cores, 32 client threads)" in text
    assert ("write throughput 50% (goal >= 70%), p99 3.00x (goal <= 1.5x), partition-server CPU 3.00x (goal <= 2x): "
            "goal MISSED; bulk ingest 33%") in text
    assert ("write throughput 86% (goal >= 70%), p99 1.25x (goal <= 1.5x), partition-server CPU 3.00x (goal <= 2x): "
            "goal MISSED") in text
    assert ("capacity (each setting's most writes/s at any load): replicas 1 2,100 at 32 threads, replicas 3 1,800 at "
            "32 threads = 86% (goal >= 70%): goal met") in text
    assert ("--rebuild-mb-s 100 MB/s: 210 MB range back at 3 in-sync replicas 6.5 s after the kill (lost copy "
            "dropped at 2.4 s) = 32.3 MB/s end to end") in text
    assert "copy 95.4 MB/s" in text
    assert "--rebuild-mb-s no limit: not restored in time" in text


def test_the_rebuild_line_is_read_from_the_rebuilt_servers_log(tmp_path):
    (tmp_path / "ps-1.log").write_text("x rebuilt r000009 from ps-3: 1.0 MB in 0.1 s (10.0 MB/s)\n")
    (tmp_path / "ps-2.log").write_text("a\n2026 rangetable.partition_server INFO rebuilt r000001 from ps-1: "
                                       "210.5 MB in 2.3 s (91.5 MB/s)\n")
    (tmp_path / "coordinator.log").write_text("rebuilt r000001 from ps-9: 1.0 MB in 1.0 s (1.0 MB/s)\n")
    assert rebuilt_from_logs(str(tmp_path), "r000001") == {"server": "ps-2", "primary": "ps-1", "mb": 210.5,
                                                            "seconds": 2.3, "mb_s": 91.5}
    assert rebuilt_from_logs(str(tmp_path), "r000002") is None


def test_one_range_costs_by_role_and_thread():
    from cli.bench.proc import thread_kind
    from cli.bench.replicas import format_roles, role_costs

    assert [thread_kind(10, t, n) for t, n in ((10, "python3.11"), (11, "ZMQbg/IO/0"), (12, "rocksdb:low"),
                                               (13, "ZMQbg/Reaper"), (14, "python3.11"))] == \
        ["loop", "zmq_io", "rocksdb", "other", "other"]
    before = {"ps-1": {"loop": 1.0, "zmq_io": 0.5}, "ps-2": {"loop": 2.0}, "ps-3": {}}
    after = {"ps-1": {"loop": 1.3, "zmq_io": 0.56, "rocksdb": 0.01},  # 1,000 writes
             "ps-2": {"loop": 2.1, "zmq_io": 0.02}, "ps-3": {"loop": 0.12, "zmq_io": 0.04}}
    roles = role_costs("ps-1", ["ps-1", "ps-2", "ps-3"], before, after, 1000)
    assert roles["primary"] == {"loop": 300.0, "zmq_io": 60.0, "rocksdb": 10.0, "other": 0.0, "total": 370.0}
    assert roles["follower"] == {"loop": 110.0, "zmq_io": 30.0, "rocksdb": 0.0, "other": 0.0, "total": 140.0}
    assert format_roles(roles) == ("primary: loop 300, ZeroMQ I/O 60, RocksDB 10, other 0 = 370 µs; "
                                   "follower (each): loop 110, ZeroMQ I/O 30, RocksDB 0, other 0 = 140 µs")
    assert set(role_costs("ps-1", ["ps-1"], before, after, 1000)) == {"primary"}  # one copy: no followers
    assert role_costs("ps-1", ["ps-1"], before, after, 0) == {}


def test_the_table_shows_one_ranges_costs_by_role():
    one, three = _setting(1, 2000, 10), _setting(3, 1000, 30)
    p = {"loop": 190.0, "zmq_io": 50.0, "rocksdb": 5.0, "other": 0.0, "total": 245.0}
    one["one_range"] = {"replicas": ["ps-1"], "roles": {"primary": p}, "all_copies_us": 245.0}
    f = {"loop": 100.0, "zmq_io": 25.0, "rocksdb": 5.0, "other": 0.0, "total": 130.0}
    three["one_range"] = {"replicas": ["ps-1", "ps-2", "ps-3"], "roles": {"primary": {**p, "total": 360.0}, "follower": f},
                          "all_copies_us": 620.0}
    one["one_range"]["sleeps"] = {"primary": {"loop": 1.02, "zmq_io": 1.5}}
    three["one_range"]["sleeps"] = {"primary": {"loop": 2.1, "zmq_io": 3.25}, "follower": {"loop": 0.98, "zmq_io": 2.0}}
    text = format_table({"servers": 3, "cpus": 2, "threads": [8], "loads": [_load(8, one, three)]})
    lines = {ln[:34].strip(): ln.split() for ln in text.splitlines()}
    assert "one range, partition-server CPU µs/write by role (a follower: each) and thread:" in text
    assert lines["primary"][-2:] == ["245", "360"] and lines["primary loop"][-2:] == ["190", "190"]
    assert lines["follower"][-2:] == ["-", "130"] and lines["follower ZeroMQ I/O"][-2:] == ["-", "25"]
    assert lines["every copy"][-2:] == ["245", "620"]
    assert "one range, sleeps per write (loop + ZeroMQ I/O):" in text
    assert " ".join(lines["primary sleeps"][-6:]) == "1.02 + 1.50 2.10 + 3.25"
    assert " ".join(lines["follower sleeps"][-4:]) == "- 0.98 + 2.00"
