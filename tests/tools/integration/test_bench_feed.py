"""`rangetable bench feed` with tiny durations, run once: both settings (feed off, on) on clusters of its own (3
servers, 3 replicas), the following reader's lag, the bulk load, disk and catch-up; ``--json`` alone on standard
output, and the final table rendered from it with positive figures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli.bench.feed import format_table

ROOT = Path(__file__).resolve().parents[3]


def _figures(text: str, label: str) -> list[float]:
    line = next(x for x in text.splitlines() if x.startswith(label))
    return [float(v.replace(",", "")) for v in re.findall(r"[\d,]+\.?\d*", line[len(label):])]


@pytest.mark.slow
def test_bench_feed_json_is_alone_on_stdout_and_renders_the_cost_table():
    """One run (two clusters) for both: ``--json`` alone on stdout, and the table the plain output prints,
    rendered from that JSON (``format_table``, what ``bench feed`` without --json prints, per-interval rows
    included)."""
    out = subprocess.run([sys.executable, "-m", "cli.main", "bench", "feed", "--seconds", "4", "--interval", "2",
                          "--threads", "2", "--rows", "1000", "--catchup", "3000", "--loaders", "1", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout + out.stderr
    res = json.loads(out.stdout)
    off, on = res["settings"]
    assert (off["feed"], on["feed"], res["replicas"], res["servers"]) == (False, True, 3, 3)
    assert "lag" not in off and on["lag"]["unseen"] == 0 and on["lag"]["read_per_s"] > 0
    assert off["writes"]["ops_per_s"] > 0 and on["writes"]["ops_per_s"] > 0
    assert on["bulk"]["catchup"]["changes"] == 3000 and "catchup" not in off["bulk"]
    assert {"throughput_cost", "p99_cost", "cost_met", "lag_met", "catchup_x_writes", "disk_feed_mb_per_million"} \
        <= set(res["cost"])

    text = format_table(res)
    assert "cost of the change feed (3 partition servers, 3 replicas" in text
    for label in ("write ops/s (steady)", "write p50 ms", "write p99 ms", "partition-server CPU µs/write",
                  "bulk ingest entities/s", "disk MB per 1M changes (3 replicas)"):
        figures = _figures(text, label)
        assert len(figures) == 2 and all(f > 0 for f in figures), (label, figures)
    assert re.search(r"feed on against off: write throughput [+-][\d.]+%, write p99 [+-][\d.]+%", text), text
    assert re.search(r"lag from acknowledgement to a following reader: p50 [\d.]+ ms, p99 [\d.]+ ms", text), text
    assert "every acknowledged write read" in text
    assert re.search(r"catch-up of 3,000 changes from the beginning: [\d.]+ s = [\d,]+ changes/s = [\d.]+x the "
                     r"feed-on write rate", text), text
    assert re.search(r"disk per 1M changes: feed off [\d,.]+ MB, on [\d,.]+ MB", text), text
    assert re.search(r"write ops/s\s+feed on\s+[\d,]+ [\d,]+", text), text  # the figures per interval
    assert re.search(r"lag p99 ms\s+feed on\s+[\d.]+ [\d.]+", text), text
