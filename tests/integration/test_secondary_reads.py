"""The ``-secondary`` endpoint (Azure's RA-GRS) on real processes: with ``--replicas 3`` its reads are served by
in-sync followers (they go on while the primary is paused), writes there are refused, and Get Service Stats
answers ``live`` with a LastSyncTime from the primaries' replication lag; without replication the secondary
reads the primaries."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from rangetable import TableServiceClient
from tests.cluster import Cluster
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, assert_secondary_refuses_writes

tables = pytest.importorskip("azure.data.tables")
from azure.core.credentials import AzureNamedKeyCredential  # noqa: E402

CRED = AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY)


@pytest.fixture(scope="module")
def replicated(cluster_factory: Any) -> Iterator[Cluster]:
    with cluster_factory(extra=["--no-dashboard"], balancer=False) as c:  # the test splits the table itself
        yield c


def _service(c: Cluster, secondary: bool = False) -> Any:
    return tables.TableServiceClient(c.http + ("-secondary" if secondary else ""), credential=CRED)


def _range_of(c: Cluster, table: str) -> dict:
    return next(r for r in c.status()["ranges"] if r["table"] == table)


def _pid_of(c: Cluster, sid: str) -> int:
    return next(s["pid"] for s in c.status()["servers"] if s["id"] == sid)


def _poll(fn: Any, want: Any, timeout: float = 10.0) -> float:
    """Seconds until ``fn()`` equals ``want`` (fails past ``timeout``)."""
    t0 = time.monotonic()
    got = None
    while time.monotonic() - t0 < timeout:
        got = fn()
        if got == want:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"not {want!r} after {timeout} s: {got!r}")


def _stats_lag(svc: Any) -> float:
    """now - LastSyncTime from Get Service Stats (the SDK sends it to the -secondary endpoint of ``svc``)."""
    geo = svc.get_service_stats()["geo_replication"]
    assert geo["status"] == "live"
    return (datetime.now(UTC) - geo["last_sync_time"]).total_seconds()


def test_secondary_reads_followers_and_refuses_writes(replicated: Cluster) -> None:
    c = replicated
    name = "secreads"
    with _service(c) as primary, _service(c, secondary=True) as secondary:
        primary.create_table(name)
        t = primary.get_table_client(name)
        for i in range(20):
            t.upsert_entity({"PartitionKey": f"p{i % 5}", "RowKey": f"{i:03d}", "n": i})
        s = secondary.get_table_client(name)
        want = sorted(f"{i:03d}" for i in range(20))
        _poll(lambda: sorted(e["RowKey"] for e in s.list_entities()), want)  # eventually (at once: acked = on every in-sync copy)
        assert s.get_entity("p3", "003")["n"] == 3
        assert [e["RowKey"] for e in s.query_entities("PartitionKey eq 'p1'")] == ["001", "006", "011", "016"]

        assert_secondary_refuses_writes(s, "p0", "000")
        assert t.get_entity("p0", "000")["n"] == 0

        lag = _stats_lag(primary)
        assert -1.5 < lag < 5.0, lag

        # The primary paused: reads of the secondary go on from its followers (within its lease: no failover).
        rec = _range_of(c, name)
        assert len(rec["insync"]) == 3, rec
        pid = _pid_of(c, rec["primary"])
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            assert s.get_entity("p4", "004")["n"] == 4
            assert len(list(s.list_entities())) == 20
            took = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        assert took < 1.0, took

        # A query across ranges on the secondary: the table split in two, each half read from a follower.
        c.admin({"op": "split", "range": rec["id"], "key": "p2"}, timeout=60)
        c.wait(lambda: len([r for r in c.status()["ranges"] if r["table"] == name]) == 2, what="split")
        _poll(lambda: sorted(e["RowKey"] for e in s.list_entities()), want)
        assert [e["n"] for e in s.query_entities("n ge 18")] == [18, 19]


def test_last_sync_time_follows_replication(replicated: Cluster) -> None:
    c = replicated
    with _service(c) as primary:
        primary.create_table("syncing")
        t = primary.get_table_client("syncing")
        for i in range(50):
            t.upsert_entity({"PartitionKey": "p", "RowKey": f"{i:03d}"})
        lags = []
        for _ in range(4):
            lags.append(_stats_lag(primary))
            time.sleep(0.6)
        assert all(-1.5 < x < 5.0 for x in lags), lags


def test_a_lagging_follower_holds_last_sync_time_back(replicated: Cluster) -> None:
    """A paused in-sync follower: the oldest batch it lacks ages until its primary reports it lagging (after
    --replica-lag-s, 1 s) and the coordinator drops it; LastSyncTime stays behind meanwhile, then catches up."""
    c = replicated
    c.admin({"op": "create_table", "table": "lagging"})
    rec = _range_of(c, "lagging")
    follower = next(s for s in rec["replicas"] if s != rec["primary"])
    client = TableServiceClient.from_cluster(c.data_dir).get_table_client("lagging")
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            with contextlib.suppress(Exception):
                client.upsert_entity({"PartitionKey": "p", "RowKey": f"{i:06d}"})
            i += 1

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    time.sleep(0.5)
    assert c.admin({"op": "sync_time"})["lag_s"] < 1.0
    pid = _pid_of(c, follower)
    os.kill(pid, signal.SIGSTOP)
    worst: dict = {"lag_s": 0.0}
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.0 and worst["lag_s"] < 1.0:
            got = c.admin({"op": "sync_time"})
            worst = max(worst, got, key=lambda g: g["lag_s"])
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):  # declared dead meanwhile: the supervisor restarts it
            os.kill(pid, signal.SIGCONT)
    print(f"lagging follower: coordinator sync_time {worst}")
    assert worst["lag_s"] >= 1.0 and worst["behind"] is not None, worst
    c.wait(lambda: c.admin({"op": "sync_time"})["lag_s"] < 1.0, timeout=15, what="LastSyncTime caught up")
    stop.set()
    writer.join(30)
    c.wait(lambda: follower in _range_of(c, "lagging").get("insync", []), timeout=30, what=f"{follower} back in sync")


def test_secondary_without_replication_reads_the_primary(cluster_factory: Any) -> None:
    with cluster_factory(extra=["--no-dashboard"]) as c, _service(c) as primary, \
            _service(c, secondary=True) as secondary:
        primary.create_table("plain")
        t = primary.get_table_client("plain")
        s = secondary.get_table_client("plain")
        for i in range(5):
            t.upsert_entity({"PartitionKey": "p", "RowKey": f"{i}", "n": i})
            assert s.get_entity("p", f"{i}")["n"] == i  # read-your-writes: the primary serves it
        assert len(list(s.list_entities())) == 5
        lag = _stats_lag(primary)
        assert -1.5 < lag < 3.0, lag
