"""Replica moves with real processes (``rangetable up --servers 4 --replicas 3 --zones a,b,c,c``): every range's
replicas span the three zones; ``rangetable replica move`` adds a replica, waits until it is in sync and drops the
old one (its directory deleted); refused moves name Azure's error codes; with the balancer on, replicas move onto
an empty server (rule 7, zones respected); a move whose new replica cannot catch up (paused) is abandoned — all
under writes, with no acknowledged write lost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from rangetable.errors import TableError
from tests.cluster import ROOT, Cluster
from tests.integration.test_replication import _stop_and_check, _writing

ZONES = {"ps-1": "a", "ps-2": "b", "ps-3": "c", "ps-4": "c"}


def _cli(c: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args, "--data-dir", c.data_dir], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _replicated(c: Cluster) -> list[dict]:
    return [r for r in c.status()["ranges"] if "replicas" in r]


def _spans_three_zones(c: Cluster) -> None:
    for r in _replicated(c):
        assert len({ZONES[s] for s in r["replicas"]}) == 3, r


def _moved(c: Cluster, rid: str, source: str, target: str) -> bool:
    r = next(r for r in _replicated(c) if r["id"] == rid)
    return not r.get("move") and target in r["insync"] and source not in r["replicas"]


def test_replica_moves_keep_zones_and_lose_no_write(cluster_factory: Any) -> None:
    with cluster_factory(servers=4, extra=["--zones", "a,b,c,c", "--no-dashboard"], balancer=False) as c:
        c.wait(lambda: {s["id"]: s.get("zone") for s in c.status()["servers"] if s["alive"]} == ZONES, 20, "zones")
        for t in ("zone1", "zone2", "zone3"):
            c.admin({"op": "create_table", "table": t})
        writers = _writing(c, "zoneload", 1.0, writers=2)
        _spans_three_zones(c)
        out = _cli(c, "servers")
        assert "zone c" in out.stdout, out.stdout + out.stderr

        # refused moves, with Azure's codes
        r0 = _replicated(c)[0]
        other = next(s for s in ZONES if s not in r0["replicas"])
        for body, code in [({"range": "nope", "source": "ps-1", "target": "ps-2"}, "ResourceNotFound"),
                           ({"range": r0["id"], "source": r0["replicas"][0], "target": r0["replicas"][1]}, "InvalidInput"),
                           ({"range": r0["id"], "source": r0["replicas"][0], "target": "ps-9"}, "ResourceNotFound")]:
            with pytest.raises(TableError) as err:
                c.admin({"op": "replica_move", **body})
            assert err.value.code.name == code, err.value
        # every range holds ps-1 (a), ps-2 (b) and one of ps-3/ps-4 (c): the other zone-c server may not replace ps-1
        with pytest.raises(TableError) as err:
            c.admin({"op": "replica_move", "range": r0["id"], "source": "ps-1", "target": other})
        assert err.value.code.name == "InvalidInput" and "zone" in str(err.value), err.value

        # manual moves: every replica on ps-4 goes to ps-3 (the same zone), the first one through the CLI
        on4 = [r for r in _replicated(c) if "ps-4" in r["replicas"]]
        assert on4, "ps-4 holds no replica"
        t0 = time.monotonic()
        out = _cli(c, "replica", "move", on4[0]["id"], "--from", "ps-4", "--to", "ps-3", "--json")
        assert out.returncode == 0, out.stdout + out.stderr + c.logs()
        res = json.loads(out.stdout)
        assert res["state"] == "moved" and "ps-3" in res["insync"] and "ps-4" not in res["replicas"]
        for r in on4[1:]:
            c.admin({"op": "replica_move", "range": r["id"], "source": "ps-4", "target": "ps-3"}, timeout=60)
            c.wait(lambda r=r: _moved(c, r["id"], "ps-4", "ps-3"), 40, f"the move of {r['id']}")
        manual_s = time.monotonic() - t0
        assert not [r for r in _replicated(c) if "ps-4" in r["replicas"]]
        _spans_three_zones(c)
        for r in on4:  # ps-4 deleted its copies
            c.wait(lambda r=r: not os.path.isdir(os.path.join(c.data_dir, "servers", "ps-4", "ranges", r["id"])),
                   10, f"ps-4 deleting {r['id']}")

        # a target that cannot catch up (paused; once declared dead the supervisor kills and restarts it): the move
        # is abandoned and the source keeps its replica
        r1 = _replicated(c)[0]
        c.admin({"op": "replica_move", "range": r1["id"], "source": "ps-3", "target": "ps-4"})
        c.kill("ps-4", signal.SIGSTOP)
        try:
            c.wait(lambda: not next(r for r in _replicated(c) if r["id"] == r1["id"]).get("move"), 30, "the abandon")
            after = next(r for r in _replicated(c) if r["id"] == r1["id"])
            assert "ps-3" in after["replicas"] and "ps-4" not in after["replicas"], after
        finally:  # the supervisor may have killed (fenced) and restarted the paused server already
            with contextlib.suppress(ProcessLookupError):
                c.kill("ps-4", signal.SIGCONT)
        c.wait(lambda: next(s for s in c.status()["servers"] if s["id"] == "ps-4")["alive"], 20, "ps-4 back")

        # the balancer fills the empty ps-4 from ps-3 (the only server whose replicas may go to zone c)
        for key, value in (("hot_rps", "1000000"), ("merge", "off"), ("interval_s", "0.5")):
            c.admin({"op": "balancer", "action": "set", "key": key, "value": value})
        c.balancer(True)
        t1 = time.monotonic()

        def balanced() -> bool:
            rs = _replicated(c)
            counts = {s: sum(1 for r in rs if s in r["replicas"]) for s in ZONES}
            return (not any(r.get("move") for r in rs) and counts["ps-4"] >= 1
                    and counts["ps-3"] - counts["ps-4"] < 2 and all(len(r["insync"]) == 3 for r in rs))
        c.wait(balanced, 45, "replicas moved onto ps-4")
        balancer_s = time.monotonic() - t1
        _spans_three_zones(c)
        acked = _stop_and_check(c, "zoneload", writers)
        assert len(acked) > 100
        c.wait(lambda: c.check_map() == [], 10, "a valid map, every range open on its primary")  # reports trail a transfer
        errors = [e for w in writers for e in w.errors]
        events = [e for e in c.admin({"op": "events", "limit": 500}) if e["kind"] == "replica_move"]
        assert any(e.get("phase") == "abandoned" for e in events)
        assert any(e.get("phase") == "moved" and "balancer" in e.get("reason", "") for e in events)
        print(f"replica moves: {len(on4)} manual in {manual_s:.1f} s, balancer done in {balancer_s:.1f} s, "
              f"{len([e for e in events if e.get('phase') == 'moved'])} moved, {len(acked)} writes acknowledged, "
              f"0 lost, {len(errors)} client errors, load {os.getloadavg()[0]:.1f}")
