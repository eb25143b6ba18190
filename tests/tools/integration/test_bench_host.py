"""``rangetable bench host``: the wake-up costs of this machine, as a real run prints them."""

from __future__ import annotations

import json
import subprocess
import sys

from cli.bench.host import format_host
from tests.cluster import ROOT


def test_bench_host_measures_sends_python_and_round_trips() -> None:
    out = subprocess.run([sys.executable, "-m", "cli.main", "bench", "host", "--seconds", "0.2", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    for key in ("zmq_send_cpu_us", "python_spin_cpu_us"):
        assert list(res[key]) == ["0.0 ms", "0.5 ms", "2.0 ms"] and all(v > 0 for v in res[key].values())
    assert res["round_trip"]["p50_us"] > 0 and res["round_trip"]["per_s"] > 0
    text = format_host(res)
    assert "ZeroMQ send of 200 bytes (TCP)" in text and "x after 2.0 ms" in text and "ZeroMQ round trip" in text
