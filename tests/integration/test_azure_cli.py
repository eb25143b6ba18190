"""The Azure CLI (``az storage table|entity``, PyPI ``azure-cli``) against a real cluster: it creates,
lists and deletes tables and inserts, shows, queries, merges, replaces and deletes typed entities.

``azure-cli`` is large and not a dependency of this project: ``make tools`` installs Debian's (2.45,
``tests/tools.lock``); the test skips, saying so, when ``az`` is not on the PATH. It runs twice: with
``--connection-string`` (a ``TableEndpoint`` connection string) and with
``--account-name``/``--account-key``/``--table-endpoint``. The commands of the module run in one Azure CLI process (``tests/az_session.py``,
under the interpreter of the installed ``az``, as the CLI's own tests run theirs), with a config dir of its
own (no login, no telemetry): a new ``az`` process per command would cost about 2 s of CPU each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
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


class AzSession:
    """One Azure CLI process (``tests/az_session.py``) isolated from the user's az config; it runs commands."""

    def __init__(self, config_dir: Path) -> None:
        az = shutil.which("az")
        assert az is not None
        with open(az) as f:  # the interpreter the installed az runs under (Debian's: #!/usr/bin/python3)
            interpreter = f.readline().removeprefix("#!").strip()
        env = {**os.environ, "AZURE_CONFIG_DIR": str(config_dir), "AZURE_CORE_COLLECT_TELEMETRY": "false",
               "AZURE_CORE_NO_COLOR": "true", "AZURE_CORE_ONLY_SHOW_ERRORS": "true", "AZ_INSTALLER": "DEB"}
        for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
                     "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_AUTH_MODE", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(name, None)
        self.proc = subprocess.Popen([interpreter, str(Path(__file__).parent.parent / "az_session.py")], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        """``az <argv>``: its exit code and output."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the az session ended (exit {self.proc.wait(5)})"
        res = json.loads(line)
        return subprocess.CompletedProcess(["az", *argv], res["code"], res["stdout"], res["stderr"])

    def close(self) -> None:
        """End the session process."""
        self.proc.kill()
        self.proc.wait(10)


class Az:
    """Runs ``az storage`` commands with one way of naming the account."""

    def __init__(self, credentials: list[str], session: AzSession) -> None:
        self.credentials = credentials
        self.session = session

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """``az storage <args>`` with the credentials and JSON output; its exit code and output."""
        return self.session.run(["storage", *args, *self.credentials, "--output", "json"])

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
def az_session(cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzSession]:
    session = AzSession(tmp_path_factory.mktemp("azure"))
    try:
        yield session
    finally:
        session.close()


@pytest.fixture(params=["connection_string", "table_endpoint"])
def az(request, cluster, az_session: AzSession) -> Az:
    if request.param == "connection_string":
        creds = ["--connection-string", f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};"
                                        f"AccountKey={DEV_KEY};TableEndpoint={cluster.http};"]
    else:
        creds = ["--account-name", DEV_ACCOUNT, "--account-key", DEV_KEY, "--table-endpoint", cluster.http]
    return Az(creds, az_session)


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

