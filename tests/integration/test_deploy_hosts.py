"""deploy/README.md's three-host install for real: deploy/systemd's units and env files, on three loopback addresses.

tests/three_hosts.py runs each unit's ExecStart with its host's env files (three etcd members, three
coordinators on etcd, three partition servers each with its own directory, native and HTTP frontends), after
the README's key steps. Then a table, a write through one host's frontend, a read through another's, every range
on three servers; then a whole host is killed and writes go on through the others. Skipped without ``etcd``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.bench.etcd_server import etcd_missing
from tests.three_hosts import HOSTS, Hosts


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    if shutil.which("etcd") is None:
        pytest.skip(str(etcd_missing()))
    hs = Hosts(tmp_path)
    try:
        hs.install()
        for h in HOSTS:
            hs.start(h, "etcd")
        hs.wait_etcd()
        for role in ("coordinator", "partition-server", "frontend", "http-frontend"):
            for h in HOSTS:
                hs.start(h, role)
        yield hs
    finally:
        hs.stop()


def _until(check, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
            if result:
                return result
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_three_hosts_from_the_shipped_units(hosts: Hosts) -> None:
    admin = ["--data-dir", str(hosts.admin)]

    def servers() -> dict:
        return {s["id"]: s for s in json.loads(hosts.rangetable("servers", "--json", *admin))}

    _until(lambda: len([s for s in servers().values() if s["alive"]]) == 3, 30, "three servers alive")
    hosts.rangetable("table", "create", "orders", *admin, "--endpoint", hosts.native("a"))
    hosts.rangetable("entity", "put", "orders", '{"PartitionKey":"p1","RowKey":"r1","qty":3}', *admin,
                     "--endpoint", hosts.native("b"))
    got = json.loads(hosts.rangetable("entity", "get", "orders", "p1", "r1", *admin, "--endpoint", hosts.native("c")))
    assert got["qty"] == 3
    ranges = json.loads(hosts.rangetable("ranges", "--json", *admin))["ranges"]
    assert ranges and all(sorted(r["replicas"]) == ["ps-a", "ps-b", "ps-c"] for r in ranges), ranges
    assert all(len(r["insync"]) == 3 for r in ranges), ranges
    for h in HOSTS:  # nothing shared: each host's server keeps its own copy in its own directory
        assert any((hosts.root / f"host-{h}" / "var" / "server").rglob("CURRENT")), h

    hosts.kill_host("a")  # host a lost: its etcd member, coordinator, partition server and frontends
    hosts.rangetable("entity", "put", "orders", '{"PartitionKey":"p1","RowKey":"r2","qty":4}', *admin,
                     "--endpoint", hosts.native("b"), timeout_s=60)
    got = json.loads(hosts.rangetable("entity", "get", "orders", "p1", "r1", *admin, "--endpoint", hosts.native("c")))
    assert got["qty"] == 3  # the write acknowledged before the loss is there
    ranges = _until(lambda: [r for r in json.loads(hosts.rangetable("ranges", "--json", *admin))["ranges"]
                             if r["primary"] != "ps-a"], 30, "ranges served by host b or c")
    assert all(r["primary"] in ("ps-b", "ps-c") for r in ranges), ranges
