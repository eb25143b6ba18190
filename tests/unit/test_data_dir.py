"""The default data root: one definition (rangetable/data_dir.py) for the clients and the CLI."""

from __future__ import annotations

import asyncio
import json
import pathlib

import click
import pytest
from click.testing import CliRunner

from cli.options import data_dir_option
from rangetable import TableClient, TableServiceClient, aio
from rangetable.client.transport import cluster_endpoint
from rangetable.data_dir import DATA_DIR_ENV, FALLBACK_DATA_DIR, default_data_dir, resolve_data_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_default_data_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert default_data_dir() == FALLBACK_DATA_DIR == "./rangetable-data"
    monkeypatch.setenv(DATA_DIR_ENV, "")
    assert default_data_dir() == FALLBACK_DATA_DIR  # empty counts as unset
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert default_data_dir() == str(tmp_path)
    assert resolve_data_dir(None) == str(tmp_path)
    assert resolve_data_dir(tmp_path / "x") == str(tmp_path / "x")


def _cluster(root: pathlib.Path, port: int) -> pathlib.Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cluster.json").write_text(json.dumps({"native": f"tcp://127.0.0.1:{port}"}))
    return root


def test_blocking_clients_find_the_cluster_of_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    env = _cluster(tmp_path / "env", 1)
    monkeypatch.setenv(DATA_DIR_ENV, str(env))
    assert cluster_endpoint() == "tcp://127.0.0.1:1"
    with TableServiceClient.from_cluster() as svc:
        assert svc.endpoint == "tcp://127.0.0.1:1"
    with TableClient.from_cluster("orders") as t:
        assert (t.table_name, t.endpoint) == ("orders", "tcp://127.0.0.1:1")
    with TableServiceClient.from_cluster(_cluster(tmp_path / "given", 2)) as svc:  # an explicit dir wins
        assert svc.endpoint == "tcp://127.0.0.1:2"


def test_blocking_client_default_is_the_working_directory(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    _cluster(tmp_path / "rangetable-data", 3)
    with TableServiceClient.from_cluster() as svc:
        assert svc.endpoint == "tcp://127.0.0.1:3"
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        TableServiceClient.from_cluster()


def test_aio_clients_find_the_cluster_of_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(_cluster(tmp_path / "env", 4)))

    async def main() -> tuple[str, str, str]:
        async with aio.TableServiceClient.from_cluster() as svc, aio.TableClient.from_cluster("t") as t:
            return svc.endpoint, t.endpoint, t.table_name

    assert asyncio.run(main()) == ("tcp://127.0.0.1:4", "tcp://127.0.0.1:4", "t")


def test_cli_data_dir_option_uses_the_same_default(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    @click.command()
    @data_dir_option
    def show(data_dir: str) -> None:
        click.echo(data_dir)

    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert CliRunner().invoke(show, []).output.strip() == str(tmp_path)
    monkeypatch.delenv(DATA_DIR_ENV)
    assert CliRunner().invoke(show, []).output.strip() == FALLBACK_DATA_DIR
    assert CliRunner().invoke(show, ["--data-dir", "x"]).output.strip() == "x"


def test_one_definition_of_the_default() -> None:
    """No product module but rangetable/data_dir.py names the variable or the fallback in code."""
    offenders = []
    for pkg in ("rangetable", "partition_server", "coordinator", "frontend", "cli"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "data_dir.py" and path.parent.name == "rangetable":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if ('"RANGETABLE_DATA_DIR"' in code or '"./rangetable-data"' in code
                        or "'./rangetable-data'" in code):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert offenders == []
