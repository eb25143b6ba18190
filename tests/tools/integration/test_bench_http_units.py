"""`rangetable bench http --endpoint … --pid …`: measuring another Table endpoint (e.g. Azurite)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from cli.main import main
from tests.tools.unit.test_bench_http_units import CONN


@pytest.mark.parametrize(("args", "message"), [
    (["--pid", "1"], "--pid goes with --endpoint"),
    (["--endpoint", CONN], "give the server's process ids"),
    (["--endpoint", CONN, "--pid", "1", "--data-dir", "/nonexistent"], "exclude each other"),
    (["--endpoint", "AccountName=x", "--pid", "1"], "names no TableEndpoint"),
])
def test_cli_explains_bad_combinations(args, message):
    out = CliRunner().invoke(main, ["bench", "http", *args])
    assert out.exit_code == 2, out.output
    assert message in out.output


def test_a_bench_stopped_by_sigterm_stops_the_cluster_it_started(tmp_path):
    import json
    import signal
    import subprocess
    import sys
    import time

    script = ("import sys, time\n"
              "from cli.bench.http import start_temp_cluster, stop_temp_cluster\n"
              "d, doc = start_temp_cluster()\n"
              "try:\n"
              "    print(d, flush=True)\n"
              "    time.sleep(60)\n"
              "finally:\n"
              "    stop_temp_cluster(d)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    pids: list[int] = []
    try:
        data_dir = p.stdout.readline().strip()
        with open(os.path.join(data_dir, "cluster.json")) as f:
            pids = [proc["pid"] for proc in json.load(f)["processes"]]
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in pids):
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # the cluster stopped with the bench
        assert not os.path.exists(data_dir)
    finally:
        if p.poll() is None:
            p.kill()
        for pid in pids:  # never leave a process running, even when the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
