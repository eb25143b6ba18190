"""The balancer on a real cluster: sustained load on one range is split and spread (the time it took is printed)."""

from __future__ import annotations

import time

import pytest

from cli.coordinator_client import call
from cli.workload.loadgen import LoadGen
from tests.cluster import Cluster, ClusterFactory


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


def test_hot_range_is_split_and_half_moved(cluster: Cluster) -> None:
    call(cluster.native, {"op": "create_table", "table": "HotRange"})
    home = [r for r in cluster.status()["ranges"] if r["table"] == "HotRange"][0]["primary"]
    since = max([e["seq"] for e in cluster.admin({"op": "events", "limit": 1})] or [0])
    gen = LoadGen(cluster.native, "HotRange", lambda rnd, _n: (f"k{rnd.randrange(60):03d}", str(rnd.randrange(100))),
                  window=48, duration=30, seed=3)
    t0 = time.monotonic()
    gen.start()
    try:
        def spread() -> bool:
            primaries = {r["primary"] for r in cluster.status()["ranges"] if r["table"] == "HotRange"}
            return len(primaries) == 2

        # about 5-10 s on a quiet machine (hot window, split, then a primary transfer); a figure, not a bound
        cluster.wait(spread, timeout=40, what="a split half moved to the other server")
        took = time.monotonic() - t0
    finally:
        gen.halt.set()
        gen.join()
    events = [e for e in cluster.admin({"op": "events", "since": since}) if e.get("table") == "HotRange"]
    kinds = [e["kind"] for e in events]
    assert "split" in kinds and "move" in kinds, events
    assert all("balancer" in e["reason"] for e in events if e["kind"] in ("split", "move"))
    moved = next(e for e in events if e["kind"] == "move")
    assert moved["source"] == home
    assert gen.result.error_count == 0, gen.result.errors
    print(f"split+move after {took:.1f} s; offline ms: {[e.get('offline_ms') for e in events]}")


def test_balancer_controls(cluster: Cluster) -> None:
    res = cluster.admin({"op": "balancer", "action": "set", "key": "hot-rps", "value": "800"})
    assert res["settings"]["hot_rps"] == 800.0
    res = cluster.admin({"op": "balancer", "action": "dry-run"})
    assert res["settings"]["dry_run"] and res["settings"]["enabled"]
    res = cluster.admin({"op": "balancer", "action": "off"})
    assert not res["settings"]["enabled"]
    with pytest.raises(Exception) as e:
        cluster.admin({"op": "balancer", "action": "set", "key": "nope", "value": "1"})
    assert "unknown balancer setting" in str(e.value)
    cluster.admin({"op": "balancer", "action": "on"})
    cluster.admin({"op": "balancer", "action": "set", "key": "hot-rps", "value": "500"})
