"""RocksDB options compared on one store: the bloom filter keeps missing-key gets off data blocks."""

from __future__ import annotations

from rangetable.bench_options import VARIANTS, run_options_bench


def test_options_bench_measures_every_variant(tmp_path):
    res = run_options_bench(3000, 1000, str(tmp_path), echo=lambda s: None)
    assert list(res) == list(VARIANTS)
    ours, no_bloom = res[next(iter(VARIANTS))], res["no bloom filter"]
    assert ours["data_blocks_per_missing_get"] < 0.05  # ~1% false positives at 10 bits per key
    assert no_bloom["data_blocks_per_missing_get"] >= 0.99  # every missing key reads its block
    assert all(r["disk_mib"] > 0 and r["get_ops_s"] > 0 for r in res.values())
