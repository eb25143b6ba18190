"""A crash at every named step of move, split and merge converges to one valid map, losing nothing.

One cluster per lane is started with every crash point named (``RANGETABLE_CRASH_AT``) but none armed
(``RANGETABLE_CRASH_ARMED``): each case arms its point (``<crash dir>/arm-<point>``; one process in the whole
cluster crashes, ``RANGETABLE_CRASH_DIR``), writes a table of its own, runs the operation, lets the supervisor
restart the crashed process, and then checks: the map invariant holds, every range is served by a live primary,
every acknowledged entity is readable, writes work. At the default (3 replicas) a move is a leadership
transfer; the steps only a one-copy move takes (unload, load elsewhere) run in the one-copy lane.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rangetable import TableServiceClient
from rangetable.errors import TableError
from rangetable.kernel.crash import ONE_COPY_POINTS, POINTS
from tests.cluster import ONE_COPY, Cluster, ClusterFactory

N = 120
REPLICATED = sorted(POINTS - ONE_COPY_POINTS)
ONE_COPY_ONLY = sorted(ONE_COPY_POINTS)


def _op_for(point: str) -> str:
    name = point.removeprefix("ps.").split(".")[0]
    return "move" if name in ("transfer", "promote") else name


def _armed_env(run: Path, points: list[str]) -> dict[str, str]:
    return {"RANGETABLE_CRASH_AT": ",".join(points), "RANGETABLE_CRASH_ARMED": "1", "RANGETABLE_CRASH_DIR": str(run)}


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory, cluster_factory: ClusterFactory) -> Cluster:
    run = tmp_path_factory.mktemp("crash-run")
    return cluster_factory(env=_armed_env(run, REPLICATED))


@pytest.fixture(scope="module")
def one_copy(tmp_path_factory: pytest.TempPathFactory, cluster_factory: ClusterFactory) -> Cluster:
    run = tmp_path_factory.mktemp("crash-run-one-copy")
    return cluster_factory(servers=2, extra=ONE_COPY, env=_armed_env(run, ONE_COPY_ONLY))


@pytest.mark.slow
@pytest.mark.parametrize("point", REPLICATED)
def test_crash_point_converges(point: str, replicated: Cluster) -> None:
    _converges(replicated, point)


@pytest.mark.slow
@pytest.mark.parametrize("point", ONE_COPY_ONLY)
def test_one_copy_crash_point_converges(point: str, one_copy: Cluster) -> None:
    _converges(one_copy, point)


def _converges(c: Cluster, point: str) -> None:
    run = Path((c.env or {})["RANGETABLE_CRASH_DIR"])
    c.wait_map(timeout=30, what=f"a valid, fully served map before {point}")
    (run / f"arm-{point}").touch()
    try:
        svc = TableServiceClient(c.native, timeout=20)
        name = "Crash" + point.replace(".", "").replace("_", "")
        t = svc.create_table(name)
        for p in range(6):
            t.submit_transaction([("upsert", {"PartitionKey": f"p{p}", "RowKey": str(r), "v": p * 100 + r})
                                  for r in range(N // 6)])
        # the point may have fired already (the balancer moves and splits too): then the coordinator may be
        # restarting, and its status is asked again until it answers
        rng = c.wait(lambda: [r for r in c.status()["ranges"] if r["table"] == name], timeout=30,
                     what=f"the ranges of {name}")
        op = _op_for(point)
        try:
            if op == "split":
                c.admin({"op": "split", "range": rng[0]["id"], "key": "p3"}, timeout=4)
            elif op == "merge":
                s = c.admin({"op": "split", "range": rng[0]["id"], "key": "p3"}, timeout=4)
                c.admin({"op": "merge", "range": s["left"]}, timeout=4)
            else:  # move (a transfer at replicas: transfer, promote), load, unload
                other = "ps-2" if rng[0]["primary"] == "ps-1" else "ps-1"
                c.admin({"op": "move", "range": rng[0]["id"], "server": other}, timeout=4)
        except TableError:
            pass  # the coordinator or a server died mid-operation; recovery is what we check
        assert os.path.exists(run / f"crashed-{point}"), f"crash point {point} never fired"
    finally:
        (run / f"arm-{point}").unlink()
    c.wait_map(timeout=30, what=f"a valid, fully served map after {point}")
    got = c.wait(lambda: {(e["PartitionKey"], e["RowKey"]): e["v"] for e in t.list_entities()},
                 timeout=20, what="reads")
    assert got == {(f"p{p}", str(r)): p * 100 + r for p in range(6) for r in range(N // 6)}
    t.upsert_entity({"PartitionKey": "p0", "RowKey": "after", "v": 1})
    assert t.get_entity("p0", "after")["v"] == 1
