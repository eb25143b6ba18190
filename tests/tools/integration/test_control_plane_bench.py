"""`rangetable bench control-plane` at a small size: the real coordinator and two frontends against
20 simulated partition servers holding 500 ranges; every figure of the report must be there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli.bench.control_plane import ROWS
from tests.cluster import ROOT


@pytest.mark.slow
def test_control_plane_bench_reports_every_figure(tmp_path) -> None:
    argv = [sys.executable, "-m", "cli.main", "bench", "control-plane", "--servers", "20", "--ranges", "500",
            "--frontends", "2", "--sim-processes", "2", "--seconds", "2", "--work-dir", str(tmp_path), "--json"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    for _, key, _ in ROWS:
        assert res.get(key) is not None, key
    assert res["heartbeats_per_s"] > 20  # 20 servers at 2 heartbeats/s each
    assert 0 < res["split_published_bytes"] < res["snapshot_bytes"]  # a delta, not the whole map
    assert res["failover_ranges"] >= 25 and res["failover_total_s"] < 10
    assert res["failover_targets"] >= 2  # spread over the least-loaded servers, not all on one
    ps = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert ps.stdout.strip() == "", "the bench left processes running"
