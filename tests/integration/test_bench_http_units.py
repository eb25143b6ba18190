"""`rangetable bench http --endpoint … --pid …`: measuring another Table endpoint (e.g. Azurite)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from cli.bench.http import cpu_seconds, external_doc, server_pids, wrong_key
from cli.main import main

CONN = ("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
        "TableEndpoint=http://127.0.0.1:10012/devstoreaccount1;")


def test_external_doc_describes_the_endpoint_and_its_processes():
    doc = external_doc(CONN, [os.getpid()])
    assert doc["http"] == "http://127.0.0.1:10012/devstoreaccount1"
    assert doc["connection_string"] == CONN
    assert server_pids(doc) == [os.getpid()]  # counted as the server, like an HTTP frontend of ours
    assert server_pids(doc, ("http-frontend",)) == [os.getpid()]
    assert cpu_seconds(server_pids(doc)) > 0


@pytest.mark.parametrize(("conn", "pids", "message"), [
    ("AccountName=x;AccountKey=a2V5", [1], "names no TableEndpoint"),
    (CONN, [], "give the server's process ids"),
    (CONN, [2 ** 22 + 12345], "is running"),
])
def test_external_doc_refuses_what_it_cannot_measure(conn, pids, message):
    with pytest.raises(ValueError, match=message):
        external_doc(conn, pids)


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


def test_wrong_key_changes_only_the_key():
    bad = wrong_key(CONN)
    fields = dict(f.split("=", 1) for f in bad.split(";") if f)
    good = dict(f.split("=", 1) for f in CONN.split(";") if f)
    assert fields.keys() == good.keys()
    assert fields["AccountKey"] != good["AccountKey"] and len(fields["AccountKey"]) == len(good["AccountKey"])
    assert {k: v for k, v in fields.items() if k != "AccountKey"} == {k: v for k, v in good.items() if k != "AccountKey"}


def test_a_bench_stopped_by_sigterm_stops_the_cluster_it_started(tmp_path):
    import json
    import signal
    import subprocess
    import sys
    import time

    script = ("import sys, time\n"
              "from cli.bench.http import start_temp_cluster, stop_temp_cluster\n"
              "d, doc = start_temp_cluster(servers=1)\n"
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
