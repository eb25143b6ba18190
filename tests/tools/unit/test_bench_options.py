"""Bench helpers: RocksDB options compared on one store (the bloom filter keeps missing-key gets off
data blocks), and the parsing of wrk's output."""

from __future__ import annotations

import pytest

from cli.bench.rocksdb_options import HOT_VARIANTS, VARIANTS, run_options_bench


@pytest.mark.slow
def test_options_bench_measures_every_variant(tmp_path):
    res = run_options_bench(3000, 1000, str(tmp_path), echo=lambda s: None, queue=6000)  # the queue: test below
    assert list(res)[: len(VARIANTS)] == list(VARIANTS)
    assert len(res) == len(VARIANTS) + 2 + len(HOT_VARIANTS)  # + the queue, + the hot range
    ours, no_bloom = res[next(iter(VARIANTS))], res["no bloom filter"]
    assert ours["data_blocks_per_missing_get"] < 0.05  # ~1% false positives at 10 bits per key
    assert no_bloom["data_blocks_per_missing_get"] >= 0.99  # every missing key reads its block
    assert all(res[v]["disk_mib"] > 0 and res[v]["get_ops_s"] > 0 for v in VARIANTS)
    assert all(res[f"hot {v}"]["writes_s"] > 0 and res[f"hot {v}"]["background_cpu_s"] >= 0 for v in HOT_VARIANTS)


WRK_OUTPUT = """Running 3s test @ http://127.0.0.1:40000/devstoreaccount1/frontends(PartitionKey='p',RowKey='r')?sv=x
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    11.01ms    4.12ms  41.87ms   72.12%
    Req/Sec     5.63k   402.12     6.01k    83.33%
  Latency Distribution
     50%   10.17ms
     75%   13.02ms
     90%  850.00us
     99%    1.20s
  16803 requests in 3.00s, 8.41MB read
  Non-2xx or 3xx responses: 3
Requests/sec:   5600.12
Transfer/sec:      2.80MB
"""


def test_wrk_output_is_parsed():
    from cli.bench.frontends import parse_wrk

    assert parse_wrk(WRK_OUTPUT) == {"rps": 5600.12, "p50_ms": 10.17, "p90_ms": 0.85, "p99_ms": 1200.0,
                                     "non_2xx": 3.0, "requests": 16803.0}


@pytest.mark.slow
def test_deletes_in_key_order_stop_costing_reads_once_compacted(tmp_path):
    from cli.bench.rocksdb_options import queue_scan

    ours = queue_scan(str(tmp_path / "with"), 60_000, True, settle_s=4.0)
    plain = queue_scan(str(tmp_path / "without"), 60_000, False, settle_s=0.0)
    assert ours["live_first"] == plain["live_first"] == "0000057000"
    # until a compaction reaches them, every read walks the deleted keys' tombstones (each batch's exact counts
    # make enough flushes that the plain store's own compactions get there within seconds at this size)
    assert plain["keys_skipped_per_scan"] >= 5_000
    assert ours["keys_skipped_per_scan"] < 1_000  # the collector had the tombstones compacted away


def test_a_reopened_store_keeps_its_bloom_filter_and_cache(tmp_path):
    import glob
    import re

    from rangetable.kernel.storage import db_options, open_range_db

    path = str(tmp_path / "r")
    db = open_range_db(path)
    for i in range(20_000):
        db.put(b"p%07d\x00r%04d" % (i // 1000, i % 1000), b"v" * 300)
    db.flush(True)
    db.close()
    opts = db_options(create=False)
    opts.enable_statistics()
    db = open_range_db(path, create=False, options=opts)  # as after a move, split or restart
    db.compact_range(None, None)  # every file rewritten with the options in force

    def blocks() -> int:
        text = opts.get_statistics()
        return sum(int(re.search(re.escape(n) + r" COUNT : (\d+)", text).group(1))
                   for n in ("rocksdb.block.cache.data.miss", "rocksdb.block.cache.data.hit"))

    before = blocks()
    for i in range(1000):
        db.get(b"p%07d\x00r-missing" % (i % 20))
    assert blocks() - before < 50  # bloom filters answer (was 1000: one block per missing key)
    db.close()
    options_file = sorted(glob.glob(path + "/OPTIONS-*"))[-1]
    assert "filter_policy=bloomfilter" in open(options_file).read()
