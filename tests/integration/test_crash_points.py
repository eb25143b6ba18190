"""A crash at every named step of move, split and merge converges to one valid map, losing nothing.

Each case starts a cluster whose processes exit at one crash point (``RANGETABLE_CRASH_AT``; one process in
the whole cluster, ``RANGETABLE_CRASH_DIR``), runs the operation, lets the supervisor restart the crashed
process, and then checks: the map invariant holds, every range is served by a live owner, every acknowledged
entity is readable, writes work. At the default (3 replicas) a move is a leadership transfer; the steps only a
one-copy move takes (unload, load elsewhere) run in the one-copy lane.
"""

from __future__ import annotations

import os

import pytest

from rangetable import TableServiceClient
from rangetable.crash import ONE_COPY_POINTS, POINTS
from rangetable.errors import TableError
from tests.cluster import ONE_COPY, ClusterFactory

N = 120


def _op_for(point: str) -> str:
    name = point.removeprefix("ps.").split(".")[0]
    return "move" if name in ("transfer", "promote") else name


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(POINTS - ONE_COPY_POINTS))
def test_crash_point_converges(tmp_path, point: str, cluster_factory: ClusterFactory) -> None:
    _converges(tmp_path, point, cluster_factory)


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(ONE_COPY_POINTS))
def test_one_copy_crash_point_converges(tmp_path, point: str, cluster_factory: ClusterFactory) -> None:
    _converges(tmp_path, point, cluster_factory, servers=2, extra=ONE_COPY)


def _converges(tmp_path, point: str, cluster_factory: ClusterFactory, **kw: object) -> None:
    env = {"RANGETABLE_CRASH_AT": point, "RANGETABLE_CRASH_DIR": str(tmp_path / "run")}
    with cluster_factory(env=env, data_dir=tmp_path, **kw) as c:
        svc = TableServiceClient(c.native, timeout=20)
        t = svc.create_table("Crash")
        for p in range(6):
            t.submit_transaction([("upsert", {"PartitionKey": f"p{p}", "RowKey": str(r), "v": p * 100 + r})
                                  for r in range(N // 6)])
        rng = [r for r in c.status()["ranges"] if r["table"] == "Crash"]
        op = _op_for(point)
        try:
            if op == "split":
                c.admin({"op": "split", "range": rng[0]["id"], "key": "p3"}, timeout=4)
            elif op == "merge":
                s = c.admin({"op": "split", "range": rng[0]["id"], "key": "p3"}, timeout=4)
                c.admin({"op": "merge", "range": s["left"]}, timeout=4)
            else:  # move (a transfer at replicas: transfer, promote), load, unload
                other = "ps-2" if rng[0]["owner"] == "ps-1" else "ps-1"
                c.admin({"op": "move", "range": rng[0]["id"], "server": other}, timeout=4)
        except TableError:
            pass  # the coordinator or a server died mid-operation; recovery is what we check
        assert os.path.exists(tmp_path / "run" / f"crashed-{point}"), f"crash point {point} never fired"
        c.wait_map(timeout=30, what=f"a valid, fully served map after {point}")
        got = c.wait(lambda: {(e["PartitionKey"], e["RowKey"]): e["v"] for e in t.list_entities()},
                     timeout=20, what="reads")
        assert got == {(f"p{p}", str(r)): p * 100 + r for p in range(6) for r in range(N // 6)}
        t.upsert_entity({"PartitionKey": "p0", "RowKey": "after", "v": 1})
        assert t.get_entity("p0", "after")["v"] == 1
