"""`rangetable keys init --coordinator … --native …`: the admin machine's cluster.json for a cluster started
role by role (deploy/README.md's three-host install), with CliRunner: nothing is started."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from click.testing import CliRunner

from cli.main import main


def test_keys_init_writes_the_admin_cluster_file(tmp_path: Path) -> None:
    coords = "tcp://10.0.0.1:10010,tcp://10.0.0.2:10010"
    out = CliRunner().invoke(main, ["keys", "init", "--data-dir", str(tmp_path), "--coordinator", coords,
                                    "--native", "tcp://10.0.0.1:10012", "--native", "tcp://10.0.0.2:10012"])
    assert out.exit_code == 0, out.output
    path = tmp_path / "cluster.json"
    assert f"cluster file {path}" in out.output
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # it holds the admin's secret key
    doc = json.loads(path.read_text())
    assert doc["coordinator"] == coords and doc["native"] == "tcp://10.0.0.1:10012"
    assert doc["frontends"] == ["tcp://10.0.0.1:10012", "tcp://10.0.0.2:10012"]
    assert doc["curve"]["client"]["role"] == "admin"
    assert doc["curve"]["servers"]["coordinator"] == (tmp_path / "keys" / "coordinator.key").read_text().split('"')[1]


def test_keys_init_without_coordinator_writes_no_cluster_file(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["keys", "init", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0 and not (tmp_path / "cluster.json").exists()


def test_cluster_file_wants_the_keys_in_the_data_dir(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["keys", "init", "--data-dir", str(tmp_path), "--keys-dir", str(tmp_path / "k"),
                                    "--coordinator", "tcp://10.0.0.1:10010"])
    assert out.exit_code == 2 and "leave --keys-dir out" in out.output

