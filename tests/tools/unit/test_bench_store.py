"""`rangetable bench store` (cli/bench/store.py): the single-process range-store figures, and ``--json`` printing
the JSON alone."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cli.main import main


def test_bench_store_json_is_the_figures_alone(tmp_path) -> None:
    out = CliRunner().invoke(main, ["bench", "store", "-n", "300", "--data-dir", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.output)  # no table before it
    assert res["n"] == 300 and res["scan_matches"] == 150
    assert all(res[k] > 0 for k in ("write_ops_s", "read_ops_s", "egt_entities_s", "scan_entities_s"))


def test_bench_store_prints_a_table_without_json(tmp_path) -> None:
    out = CliRunner().invoke(main, ["bench", "store", "-n", "300", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("store bench: n=300") and "filtered scan (qty ge 50)" in out.output
