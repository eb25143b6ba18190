"""Several HTTP frontends on one REST port, and the soak bench, on a real cluster (2 servers, 2 frontends)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.cluster import ROOT, Cluster, ClusterFactory


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory(frontends=2) as c:
        yield c


def socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def sockets_on(port: int, state: str) -> set[str]:
    """Inodes of TCP sockets on local ``port`` in ``state`` ("01" established, "0A" listening)."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) == port and cols[3] == state:
                inodes.add(cols[9])
    return inodes


def test_http_frontends_share_one_port_and_both_take_connections(cluster: Cluster) -> None:
    doc = cluster.refresh()
    http_procs = [p for p in doc["processes"] if p["role"] == "http-frontend"]
    assert len(http_procs) == 2 and {p["http"] for p in http_procs} == {doc["http"]}
    port = int(doc["http"].split(":")[2].split("/")[0])
    deadline = time.monotonic() + 20  # the cluster is ready once one of them listens; wait for both
    while len(sockets_on(port, "0A")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(24)]
    try:
        time.sleep(0.5)
        est = sockets_on(port, "01")
        per_proc = [len(socket_inodes(p["pid"]) & est) for p in http_procs]
        assert sum(per_proc) == 24 and min(per_proc) > 0, per_proc  # all-on-one has odds 2^-23
    finally:
        for c in conns:
            c.close()
    from azure.data.tables import TableServiceClient

    svc = TableServiceClient.from_connection_string(doc["connection_string"])
    t = svc.create_table("SharedPort")
    for i in range(20):  # a fresh connection each: both processes serve the same tables
        client = TableServiceClient.from_connection_string(doc["connection_string"]).get_table_client("SharedPort")
        client.upsert_entity({"PartitionKey": "p", "RowKey": str(i), "n": i})
        client.close()
    assert sorted(int(e["n"]) for e in t.list_entities()) == list(range(20))
    svc.delete_table("SharedPort")


@pytest.mark.slow
@pytest.mark.parametrize("extra", [["--mix", "mixed"], ["--mix", "mixed", "--http"], ["--mix", "hot-partition"]])
def test_soak_prints_a_row_per_interval_and_a_verdict(cluster: Cluster, extra: list[str]) -> None:
    argv = [sys.executable, "-m", "cli.main", "bench", "soak", "--data-dir", cluster.data_dir, "--minutes", "0.1",
            "--interval", "2", "--threads", "2", "--preload", "2000", "--json", *extra]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    res = json.loads(out.stdout)
    rows = res["rows"]
    assert len(rows) == 3 and all(r["ops"] > 0 for r in rows), out.stderr
    procs = cluster.refresh()["processes"]
    assert set(rows[0]["rss"]) == {p["id"] for p in procs}
    assert set(rows[-1]["cache"]) == {p["id"] for p in procs if p["role"] == "partition-server"}  # from /metrics
    assert all(r["disk_bytes"] > 0 and r["pending_compaction_bytes"] >= 0 for r in rows)
    kinds = set().union(*(r["by_kind"] for r in rows))
    if "hot-partition" in extra:
        assert kinds == {"hot_upsert"}
    else:  # scan pages are rare (weight 1 of 94): not asserted
        assert {"insert", "upsert", "merge", "get", "delete", "batch", "pk_query"} <= kinds
    errors = {code: n for r in rows for code, n in r["errors"].items()}
    assert not errors, errors
    assert out.returncode == (0 if res["verdict"]["ok"] else 1)
    assert {"hold", "rss_growth"} <= set(res["verdict"])


@pytest.mark.slow
def test_bench_scale_small_run_reports_every_step(tmp_path) -> None:
    argv = [sys.executable, "-m", "cli.main", "bench", "scale", "--entities", "20000", "--moves", "2", "--split-mb", "1",
            "--reps", "100", "--work-dir", str(tmp_path / "scale"), "--json"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    assert res["entities"] == 20000 and res["load"]["entities_s"] > 0 and len(res["load"]["per_tenth"]) >= 5
    for size in ("small", "large"):
        assert set(res[size]) == {"get", "get_missing", "pk_query_page", "scan_page"}
    assert res["moves"]["n"] == 2 and res["manual_splits"]["n"] == 7  # 1 + 2 + 4
    assert res["size_splits"]["ranges"] >= 2 and res["size_splits"]["max_mib"] < 1  # every range under the target
    assert res["store_open"]["missing_gets"] == 10_000
    assert res["store_open"]["data_blocks_read"] >= 0 and res["store_open"]["open_ms"] > 0
    assert res["space"]["disk_per_raw"] > 0 and res["restart_s"] > 0
    assert not os.path.exists(tmp_path / "scale" / "cluster.json") or not _alive(tmp_path / "scale")


def _alive(data_dir) -> bool:
    from cli.cluster_file import pid_alive, read_cluster

    doc = read_cluster(str(data_dir)) or {}
    return any(pid_alive(p["pid"]) for p in doc.get("processes", []) if p.get("pid"))
