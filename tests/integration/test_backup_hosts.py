"""Backup and restore across hosts: deploy/README.md's three-host install (tests/three_hosts.py: three etcd members,
coordinators on etcd, a partition server per host in its own directory), backed up from the admin machine over the
coordinators' CURVE sockets, every host's disk and the etcd prefix then lost, and the cluster restored with
`rangetable restore --meta etcd://…` plus each host's `servers/<id>/` copied to its partition server's directory.
Skipped without ``etcd``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from coordinator.etcd.client import EtcdClient, b64, parse_url, prefix_end
from tests.three_hosts import HOSTS, Hosts

ROLES = ("coordinator", "partition-server", "frontend", "http-frontend")


def _retry_busy(run, timeout_s: float):  # type: ignore[no-untyped-def]
    """``run()`` again while the cluster answers ServerBusy (a backup refused while the balancer moves a range
    says "retry the backup"; a refused backup leaves nothing behind), any other failure at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return run()
        except AssertionError as exc:
            if "ServerBusy" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(1.0)


def _until(check, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (AssertionError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}: {last}")


def _stop_rangetable(hs: Hosts) -> None:
    """Every rangetable process of every host stopped (etcd keeps running)."""
    procs = [p for (_, role), p in hs.procs.items() if role != "etcd" and p.poll() is None]
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_backup_and_restore_across_three_hosts(tmp_path: Path) -> None:
    if shutil.which("etcd") is None:
        pytest.skip("etcd not installed: apt-get install etcd-server")
    hs = Hosts(tmp_path)
    admin = ["--data-dir", str(hs.admin)]
    try:
        hs.install()
        for h in HOSTS:
            hs.start(h, "etcd")
        hs.wait_etcd()
        for role in ROLES:
            for h in HOSTS:
                hs.start(h, role)

        def ranges_in_sync() -> list[dict] | None:
            rs = json.loads(hs.rangetable("ranges", "--json", *admin))["ranges"]
            ok = rs and all(r["state"] == "serving" and len(r["replicas"]) == 3 and len(r["insync"]) == 3 for r in rs)
            return rs if ok else None

        def servers_alive() -> bool:
            return len([s for s in json.loads(hs.rangetable("servers", "--json", *admin)) if s["alive"]]) == 3

        def content(native: str) -> tuple[int, str]:
            rows = [json.loads(line) for line in hs.rangetable("query", "orders", *admin, "--endpoint", native,
                                                                  timeout_s=60).splitlines() if line.startswith("{")]
            rows.sort(key=lambda e: (e["PartitionKey"], e["RowKey"]))
            return len(rows), hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()

        _until(servers_alive, 30, "three servers alive")
        hs.rangetable("table", "create", "orders", *admin, "--endpoint", hs.native("a"))
        src = hs.admin / "orders.jsonl"
        src.write_text("".join(json.dumps({"PartitionKey": f"p{i // 10:03d}", "RowKey": f"r{i % 10}", "n": i,
                                           "note": f"entity {i}"}) + "\n" for i in range(300)))
        hs.rangetable("import", "orders", "--from", str(src), *admin, "--endpoint", hs.native("b"), timeout_s=60)
        rid = json.loads(hs.rangetable("ranges", "--json", *admin))["ranges"][0]["id"]
        hs.rangetable("split", rid, "--at", "p015", *admin, timeout_s=60)
        before_ranges = _until(ranges_in_sync, 30, "both halves on 3 in-sync replicas")
        assert len(before_ranges) == 2
        before = content(hs.native("c"))
        assert before[0] == 300

        out = _retry_busy(lambda: hs.rangetable("backup", "--to", str(hs.admin / "bk"), *admin, timeout_s=120), 60)
        assert "2 ranges (of a cluster keeping 3 replicas)" in out, out
        for h in HOSTS:  # the backup lives on the admin machine only; no host kept a checkpoint of it
            assert not [p for p in (hs.root / f"host-{h}").rglob("backup.json")], h
            assert not [p for p in (hs.root / f"host-{h}").rglob("backups/*")], h

        # Every host loses its partition server's disk, and the cluster's state in etcd is gone.
        _stop_rangetable(hs)
        for h in HOSTS:
            shutil.rmtree(hs.root / f"host-{h}" / "var" / "server")
        meta = hs.env("a", "rangetable.env")["RANGETABLE_META"]
        base, prefix = parse_url(meta)
        EtcdClient(base).call("kv/deleterange", {"key": b64(f"{prefix}/".encode()),
                                                 "range_end": b64(prefix_end(f"{prefix}/".encode()))})

        restored = hs.admin / "restored"
        out = hs.rangetable("restore", "--from", str(hs.admin / "bk"), "--data-dir", str(restored), "--meta", meta)
        assert "6 copies on servers ps-a, ps-b, ps-c" in out and "keys written into" in out, out
        for h in HOSTS:  # the operator's copy of each server's directory to its host
            shutil.copytree(restored / "servers" / f"ps-{h}", hs.root / f"host-{h}" / "var" / "server")
        for role in ROLES:
            for h in HOSTS:
                hs.start(h, role)
        _until(servers_alive, 60, "three servers alive after the restore")
        after_ranges = _until(ranges_in_sync, 60, "every range on 3 in-sync replicas after the restore")
        assert {(r["id"], r["low"], r["high"]) for r in after_ranges} == {
            (r["id"], r["low"], r["high"]) for r in before_ranges}
        assert _until(lambda: content(hs.native("a")), 30, "the restored table") == before
        hs.rangetable("entity", "put", "orders", '{"PartitionKey":"p999","RowKey":"r","n":-1}', *admin,
                      "--endpoint", hs.native("b"), timeout_s=60)
        assert content(hs.native("c"))[0] == 301
    finally:
        hs.stop()
