"""``rangetable bench --json`` and ``bench http --json`` print the JSON alone: the lines a bench prints as it runs go
nowhere then (``cli.bench.commands.progress``), so ``| jq`` reads the figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _bench(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "cli.main", "bench", *args, "--json"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)  # nothing printed before or after it


def test_native_and_http_benches_print_json_alone(cluster_factory) -> None:
    cluster = cluster_factory()
    native = _bench(["-n", "200", "--data-dir", cluster.data_dir])
    assert native and all(isinstance(v, (dict, int, float, str, list)) for v in native.values())
    rest = _bench(["http", "-n", "20", "--batches", "1", "--big", "50", "--procs", "1", "--data-dir", cluster.data_dir])
    # 20 gets may cost the servers less than one 10 ms tick of /proc's CPU clock on a fast machine: 0 is a figure
    assert rest["insert"]["ops"] == 20 and isinstance(rest["get"]["cpu_ms_per_op"], float) and rest["get"]["cpu_ms_per_op"] >= 0
