"""Re-replication with real processes: a replica lost with its server and disk is rebuilt on another server
from the primary's checkpoint (then the log), and a server back with an empty disk gets its copy back."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rangetable import TableServiceClient
from tests.cluster import Cluster

ROWS = 20_000
PAD = int(os.environ.get("REREPL_PAD", "200"))  # bytes per row; REREPL_PAD=2600 makes a ~50 MB range to time


def _fill(c: Cluster, table: str, rows: int = ROWS) -> None:
    c.admin({"op": "create_table", "table": table})
    client = TableServiceClient.from_cluster(c.data_dir).get_table_client(table)
    pad = os.urandom(PAD // 2).hex()  # incompressible
    for start in range(0, rows, 100):
        client.submit_transaction([("upsert", {"PartitionKey": f"p{start // 100 % 20:02d}", "RowKey": f"{i:06d}",
                                               "pad": pad}) for i in range(start, start + 100)])


def _count(c: Cluster, table: str) -> int:
    client = TableServiceClient.from_cluster(c.data_dir).get_table_client(table)
    return sum(1 for _ in client.list_entities())


def _healthy(c: Cluster, table: str, n: int) -> bool:
    st = c.status()
    alive = {s["id"] for s in st["servers"] if s["alive"]}
    recs = [r for r in st["ranges"] if r["table"] == table]
    return bool(recs) and all(len(r["replicas"]) == n and sorted(r["insync"]) == sorted(r["replicas"])
                              and set(r["replicas"]) <= alive for r in recs)


def _rates(c: Cluster) -> list[str]:
    return re.findall(r"rebuilt \S+ from \S+: [\d.]+ MB in [\d.]+ s \([\d.]+ MB/s\)", c.logs())


@pytest.fixture
def four(cluster_factory: Any) -> Iterator[Cluster]:
    with cluster_factory(servers=4, extra=["--no-dashboard", "--no-restart", "--rereplicate-after-s", "2"],
                         balancer=False) as c:  # one range per table: the tests split, move and merge it
        yield c


@pytest.fixture
def three(cluster_factory: Any) -> Iterator[Cluster]:
    with cluster_factory(extra=["--no-dashboard"], balancer=False) as c:  # the tests split, move and merge by hand
        yield c


def test_a_replica_lost_with_its_disk_is_rebuilt_on_another_server(four: Cluster) -> None:
    c = four
    _fill(c, "lost")
    (rec,) = [r for r in c.status()["ranges"] if r["table"] == "lost"]
    victim = next(s for s in rec["replicas"] if s != rec["primary"])
    spare = next(s for s in ("ps-1", "ps-2", "ps-3", "ps-4") if s not in rec["replicas"])
    c.kill(victim)
    shutil.rmtree(os.path.join(c.data_dir, "servers", victim), ignore_errors=True)
    t0 = time.monotonic()
    c.wait(lambda: victim not in [r for r in c.status()["ranges"] if r["table"] == "lost"][0]["replicas"],
           timeout=30, what=f"{victim}'s replica dropped")
    c.wait(lambda: _healthy(c, "lost", 3), timeout=60, what="3 in-sync replicas on live servers again")
    took = time.monotonic() - t0
    (now,) = [r for r in c.status()["ranges"] if r["table"] == "lost"]
    assert victim not in now["replicas"] and spare in now["replicas"]
    assert os.path.isdir(os.path.join(c.data_dir, "servers", spare, "ranges", now["id"]))
    assert _count(c, "lost") == ROWS
    rates = _rates(c)
    assert rates, "no rebuild logged"
    print(f"\nre-replication: back to 3 in-sync replicas {took:.1f} s after the kill; rebuild {rates} MB/s")


def test_a_server_back_with_an_empty_disk_gets_its_replica_back(three: Cluster) -> None:
    c = three
    _fill(c, "empty", 5_000)
    (rec,) = [r for r in c.status()["ranges"] if r["table"] == "empty"]
    victim = next(s for s in rec["replicas"] if s != rec["primary"])
    before = {x["id"]: x["incarnation"] for x in c.status()["servers"]}[victim]
    c.kill(victim)  # the supervisor restarts it, with nothing on its disk
    shutil.rmtree(os.path.join(c.data_dir, "servers", victim, "ranges"), ignore_errors=True)
    client = TableServiceClient.from_cluster(c.data_dir).get_table_client("empty")
    for i in range(300):  # writes while it is away: it leaves the in-sync set
        client.upsert_entity({"PartitionKey": "late", "RowKey": f"{i:04d}"})
    c.wait(lambda: {x["id"]: x["incarnation"] for x in c.status()["servers"]}[victim] != before, timeout=20,
           what=f"{victim} restarted")
    c.wait(lambda: _healthy(c, "empty", 3), timeout=60, what="3 in-sync replicas again")
    (now,) = [r for r in c.status()["ranges"] if r["table"] == "empty"]
    assert victim in now["replicas"]
    assert os.path.isdir(os.path.join(c.data_dir, "servers", victim, "ranges", now["id"]))
    assert _count(c, "empty") == 5_300
    # Back within the log's reach it catches up from the log; out of the in-sync set, from a checkpoint.
    print(f"\nempty disk: {_rates(c) or 'caught up from the log'}")
