"""The Azure CLI (``az storage table|entity``, PyPI ``azure-cli``) against a real cluster: it creates,
lists and deletes tables and inserts, shows, queries, merges, replaces and deletes typed entities.

``azure-cli`` is large and not a dependency of this project: ``make tools`` installs Debian's (2.45,
``tests/tools.lock``); the test skips, saying so, when ``az`` is not on the PATH. The whole tour runs with
``--connection-string`` (a ``TableEndpoint`` connection string); the other way of naming the account
(``--account-name``/``--account-key``/``--table-endpoint``) builds the same client after parsing, so it runs
a shorter round trip (each ``az`` costs about 2 s of CPU). Every ``az`` of the module runs with one
config dir of its own (no login, no telemetry), so that its command index is built once, not on every
call (that halves each call's CPU time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import ClusterFactory
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY

GUID = "3f2a8f7e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    if shutil.which("az") is None:
        print("skipping the Azure CLI cases: az is not installed")
        pytest.skip("az is not installed (`make tools` as root installs Debian's azure-cli)")
    with cluster_factory() as c:
        yield c


class Az:
    """Runs ``az`` with one way of naming the account, isolated from the user's az config."""

    def __init__(self, credentials: list[str], config_dir: Path) -> None:
        self.credentials = credentials
        self.env = {**os.environ, "AZURE_CONFIG_DIR": str(config_dir), "AZURE_CORE_COLLECT_TELEMETRY": "false",
                    "AZURE_CORE_NO_COLOR": "true", "AZURE_CORE_ONLY_SHOW_ERRORS": "true"}
        for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
                     "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_AUTH_MODE"):
            self.env.pop(name, None)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """``az storage <args>`` with the credentials and JSON output; the finished process."""
        argv = ["az", "storage", *args, *self.credentials, "--output", "json"]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120)

    def ok(self, *args: str) -> Any:
        """Run and expect success; the parsed JSON output (None when it printed nothing)."""
        out = self.run(*args)
        assert out.returncode == 0, f"az storage {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-2000:]}"
        return json.loads(out.stdout) if out.stdout.strip() else None

    def fails(self, *args: str, expect: str) -> str:
        """Run and expect failure whose message names ``expect``; the error text."""
        out = self.run(*args)
        assert out.returncode != 0, f"az storage {' '.join(args)} succeeded:\n{out.stdout[-2000:]}"
        assert expect in out.stderr, out.stderr[-2000:]
        return out.stderr


@pytest.fixture(scope="module")
def az_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("azure")


@pytest.fixture
def az(cluster, az_config: Path) -> Az:
    return Az(["--connection-string", f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};"
                                      f"AccountKey={DEV_KEY};TableEndpoint={cluster.http};"], az_config)


@pytest.fixture
def az_endpoint(cluster, az_config: Path) -> Az:
    return Az(["--account-name", DEV_ACCOUNT, "--account-key", DEV_KEY, "--table-endpoint", cluster.http], az_config)


def plain(value: Any) -> Any:
    """A property as az prints it: typed values the SDK wraps (Int64) print as {"value", ...}."""
    return value["value"] if isinstance(value, dict) and "value" in value else value


@pytest.mark.slow
def test_azure_cli_tables_and_typed_entities(az: Az):
    table = f"az{uuid.uuid4().hex[:10]}"
    assert az.ok("table", "create", "--name", table, "--fail-on-exist") == {"created": True}
    assert az.ok("table", "exists", "--name", table) == {"exists": True}
    assert table in az.ok("table", "list", "--query", "[].name")

    typed = ["PartitionKey=p", "RowKey=r", "S=text", "I=7", "F=2.5",
             "L=86222504922", "L@odata.type=Edm.Int64",
             "W=2024-01-02T03:04:05Z", "W@odata.type=Edm.DateTime",
             f"G={GUID}", "G@odata.type=Edm.Guid"]
    az.ok("entity", "insert", "--table-name", table, "--entity", *typed)
    e = az.ok("entity", "show", "--table-name", table, "--partition-key", "p", "--row-key", "r")
    assert (e["PartitionKey"], e["RowKey"], e["S"], e["I"], e["F"]) == ("p", "r", "text", 7, 2.5)
    assert str(plain(e["L"])) == "86222504922"
    assert str(plain(e["W"])).startswith("2024-01-02T03:04:05")
    assert str(plain(e["G"])) == GUID
    picked = az.ok("entity", "show", "--table-name", table, "--partition-key", "p", "--row-key", "r",
                   "--select", "S")
    assert picked["S"] == "text" and "I" not in picked and "L" not in picked

    az.ok("entity", "insert", "--table-name", table, "--if-exists", "replace", "--entity",
          "PartitionKey=p", "RowKey=s", "I=8", "L=5", "L@odata.type=Edm.Int64")
    found = az.ok("entity", "query", "--table-name", table, "--filter", "I eq 7 and L eq 86222504922L")
    assert [x["RowKey"] for x in found["items"]] == ["r"]
    page = az.ok("entity", "query", "--table-name", table, "--num-results", "1")
    assert [x["RowKey"] for x in page["items"]] == ["r"]
    marker = page["nextMarker"]
    rest = az.ok("entity", "query", "--table-name", table, "--marker",
                 f"nextpartitionkey={marker['nextpartitionkey']}", f"nextrowkey={marker['nextrowkey']}")
    assert [x["RowKey"] for x in rest["items"]] == ["s"]

    az.ok("entity", "merge", "--table-name", table, "--entity", "PartitionKey=p", "RowKey=r", "S=merged")
    e = az.ok("entity", "show", "--table-name", table, "--partition-key", "p", "--row-key", "r")
    assert (e["S"], e["I"], str(plain(e["L"]))) == ("merged", 7, "86222504922")
    az.fails("entity", "merge", "--table-name", table, "--if-match", 'W/"wrong"', "--entity",
             "PartitionKey=p", "RowKey=r", "S=stale", expect="UpdateConditionNotSatisfied")

    az.ok("entity", "replace", "--table-name", table, "--entity", "PartitionKey=p", "RowKey=r", "Only=1")
    e = az.ok("entity", "show", "--table-name", table, "--partition-key", "p", "--row-key", "r")
    assert e["Only"] == 1 and "S" not in e and "L" not in e

    az.ok("entity", "delete", "--table-name", table, "--partition-key", "p", "--row-key", "r")
    az.fails("entity", "show", "--table-name", table, "--partition-key", "p", "--row-key", "r",
             expect="ResourceNotFound")
    assert [x["RowKey"] for x in az.ok("entity", "query", "--table-name", table)["items"]] == ["s"]

    assert az.ok("table", "delete", "--name", table, "--fail-not-exist") == {"deleted": True}
    assert az.ok("table", "exists", "--name", table) == {"exists": False}
    assert table not in az.ok("table", "list", "--query", "[].name")


@pytest.mark.slow
def test_azure_cli_with_account_name_key_and_table_endpoint(az_endpoint: Az):
    az = az_endpoint
    table = f"az{uuid.uuid4().hex[:10]}"
    assert az.ok("table", "create", "--name", table) == {"created": True}
    az.ok("entity", "insert", "--table-name", table, "--entity", "PartitionKey=p", "RowKey=r", "I=7",
          "L=86222504922", "L@odata.type=Edm.Int64")
    found = az.ok("entity", "query", "--table-name", table, "--filter", "I eq 7 and L eq 86222504922L")
    assert [(x["RowKey"], str(plain(x["L"]))) for x in found["items"]] == [("r", "86222504922")]
    assert az.ok("table", "delete", "--name", table, "--fail-not-exist") == {"deleted": True}
