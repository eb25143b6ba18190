"""The dashboard's replication view (cli/dashboard/state.py): ranges under-replicated or not in sync, and
rebuilds under way, from a coordinator ``status`` answer (each replicated range's ``health`` judged by
:func:`coordinator.replicas.sets.health`, as the coordinator's status does)."""

from __future__ import annotations

from typing import Any

from cli.dashboard.state import replica_view, replication_summary, state_view
from coordinator.replicas.sets import health


def rng(rid: str, replicas: list[str] | None = None, insync: list[str] | None = None) -> dict:
    r = {"id": rid, "table": "t", "low": "", "high": None, "primary": "ps-1", "epoch": 3, "state": "serving"}
    if replicas is not None:
        r.update(replicas=replicas, insync=insync if insync is not None else replicas)
    return r


def server(sid: str, alive: bool = True, rebuilding: dict | None = None) -> dict:
    s = {"id": sid, "endpoint": "tcp://x", "alive": alive, "pid": 1, "last_seen_s": 0.1, "ranges": 1, "pending": 0,
         "load": {}}
    if rebuilding:
        s["rebuilding"] = rebuilding
    return s


ALL = {"ps-1", "ps-2", "ps-3"}


def judged(r: dict, live: set[str], want: int) -> dict:
    """The range as the coordinator's status carries it."""
    return {**r, "health": health(r, live, want)} if "replicas" in r else r


def view(r: dict, live: set[str], want: int) -> dict[str, Any]:
    return replica_view(judged(r, live, want))


def test_a_single_copy_range_has_no_replica_figures() -> None:
    assert view(rng("r1"), ALL, 1) == {"copies": "", "out_of_sync": [], "under_replicated": False}


def test_a_full_in_sync_replica_set_is_healthy() -> None:
    v = view(rng("r1", ["ps-1", "ps-2", "ps-3"]), ALL, 3)
    assert v == {"copies": "3/3", "out_of_sync": [], "under_replicated": False}


def test_a_replica_outside_the_in_sync_set_is_not_in_sync() -> None:
    v = view(rng("r1", ["ps-1", "ps-2", "ps-3"], ["ps-1", "ps-3"]), ALL, 3)
    assert v == {"copies": "2/3", "out_of_sync": ["ps-2"], "under_replicated": False}


def test_fewer_replicas_than_wanted_or_one_on_a_dead_server_is_under_replicated() -> None:
    assert view(rng("r1", ["ps-1", "ps-2"]), ALL, 3)["under_replicated"]  # a lost copy dropped
    v = view(rng("r1", ["ps-1", "ps-2", "ps-3"]), {"ps-1", "ps-2"}, 3)  # ps-3 dead, not yet dropped
    assert v["under_replicated"] and v["copies"] == "3/3"


def test_summary_counts_and_rebuild_progress() -> None:
    status = {
        "version": 9, "tables": ["t"], "replicas": 3,
        "ranges": [rng("r1", ["ps-1", "ps-2", "ps-3"]), rng("r2", ["ps-1", "ps-2", "ps-4"], ["ps-1", "ps-2"]),
                   rng("r3", ["ps-1", "ps-2"]), rng("r4")],
        "servers": [server("ps-1"), server("ps-2"), server("ps-3", alive=False),
                    server("ps-4", rebuilding={"r2": {"rebuilding": True, "primary": "ps-1", "bytes": 50 << 20,
                                                      "total": 200 << 20, "mb_s": 90.5, "attempts": 1}})],
    }
    live = {sv["id"] for sv in status["servers"] if sv["alive"]}
    status["ranges"] = [judged(r, live, 3) for r in status["ranges"]]
    v = state_view(status, lease_s=2.0)
    by_id = {r["id"]: r for r in v["ranges"]}
    assert by_id["r1"]["under_replicated"] and not by_id["r1"]["out_of_sync"]  # ps-3 is dead
    assert by_id["r2"]["out_of_sync"] == ["ps-4"] and not by_id["r2"]["under_replicated"]
    assert by_id["r3"]["under_replicated"] and by_id["r4"]["copies"] == ""
    rp = v["replication"]
    assert (rp["replicas"], rp["replicated"], rp["under_replicated"], rp["not_in_sync"]) == (3, 3, 2, 1)
    assert rp["rebuilding"] == [{"range": "r2", "server": "ps-4", "primary": "ps-1", "bytes": 50 << 20,
                                 "total": 200 << 20, "mb_s": 90.5, "percent": 25.0}]


def test_a_rebuild_whose_total_is_not_known_yet_shows_zero_percent() -> None:
    status = {"servers": [server("ps-2", rebuilding={"r1": {"primary": "ps-1", "bytes": 0, "total": 0, "mb_s": 0}})]}
    assert replication_summary(status, [], 3)["rebuilding"][0]["percent"] == 0.0
