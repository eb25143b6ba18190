"""`rangetable bench replicas` with tiny durations: both settings, bulk ingest and one re-replication run,
and the final table with positive figures (the clusters are its own, in temp dirs, and stopped)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from cli.main import main


def _figures(text: str, label: str) -> list[float]:
    line = next(x for x in text.splitlines() if x.startswith(label))
    return [float(v.replace(",", "")) for v in re.findall(r"[\d,]+\.?\d*", line[len(label):])]


def test_bench_replicas_prints_the_cost_table():
    out = CliRunner().invoke(main, ["bench", "replicas", "--seconds", "4", "--interval", "2", "--threads", "4",
                                    "--bulk", "3000", "--rebuild-mb", "8", "--rebuild-mb-s", "0"])
    assert out.exit_code == 0, out.output
    text = out.output
    assert "cost of replication (3 partition servers" in text
    for label in ("write ops/s (median, steady)", "write p50 ms", "write p99 ms", "partition-server CPU µs/write",
                  "frontend CPU µs/write", "bulk ingest entities/s"):
        figures = _figures(text, label)
        assert len(figures) == 2 and all(f > 0 for f in figures), (label, figures)
    assert re.search(r"replicas 3 / replicas 1: write throughput \d+%", text)
    assert re.search(r"this host charges for waking up: a ZeroMQ send costs the sender [\d.]+ µs", text)
    assert re.search(r"capacity \(each setting's most writes/s at any load\): replicas 1 [\d,]+ at 4 threads, "
                     r"replicas 3 [\d,]+ at 4 threads = \d+%", text)
    sleeps = re.search(r"  follower sleeps +- +([\d.]+) \+ ([\d.]+)", text)
    assert sleeps and float(sleeps.group(1)) > 0, text  # a follower's loop sleeps between batches
    m = re.search(r"re-replication at --rebuild-mb-s no limit: (\d+) MB range back at 3 in-sync replicas "
                  r"([\d.]+) s after the kill \(lost copy dropped at ([\d.]+) s\) = ([\d.]+) MB/s end to end; "
                  r"copy ([\d.]+) MB/s", text)
    assert m, text
    assert int(m.group(1)) >= 7 and all(float(g) > 0 for g in m.groups()[1:])
