"""`rangetable bench geo-rejoin` at a tiny size: two clusters as `rangetable up` starts them, a forced failover after
writes the secondary never saw, the old primary rejoining by the diff and then by a full copy; ``--json`` alone on
standard output, both ending with every entity equal, the ledger as long as the writes of the outage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.bench.geo_rejoin import format_result

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_bench_geo_rejoin_compares_the_diff_with_a_full_copy() -> None:
    out = subprocess.run([sys.executable, "-m", "cli.main", "bench", "geo-rejoin", "--rows", "3000", "--outage", "300",
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout + out.stderr
    res = json.loads(out.stdout)
    assert (res["rows"], res["outage"], res["ledger"]) == (3000, 300, 300)
    assert res["diff_differ"] == 0 and res["full_differ"] == 0
    assert res["diff_s"] > 0 and res["full_copy_s"] > 0
    assert "the diff takes" in format_result(res)
