"""The replicated chaos drill's decisions: which disk may be wiped, when a wiped server counts again, which
ranges are short of N in-sync replicas."""

from __future__ import annotations

from cli.drills.chaos_replicas import heal_wiped, holders, replica_count, safe_to_wipe, under_replicated


def _srv(sid: str, inc: str = "i1", alive: bool = True) -> dict:
    return {"id": sid, "incarnation": inc, "alive": alive}


def _rng(rid: str, insync: list[str], replicas: list[str] | None = None, primary: str | None = None,
         state: str = "serving") -> dict:
    replicas = replicas or ["a", "b", "c"]
    return {"id": rid, "primary": primary or insync[0], "replicas": replicas, "insync": insync, "state": state}


def test_replica_count_is_the_fewest_copies() -> None:
    assert replica_count([_rng("r1", ["a"]), _rng("r2", ["a"], ["a", "b"])]) == 2
    assert replica_count([{"id": "r1", "primary": "a"}]) == 1
    assert replica_count([]) == 1


def test_holders_skip_dead_and_wiped_servers_until_they_come_back() -> None:
    rec = _rng("r1", ["a", "b", "c"])
    live = {"a": "i1", "b": "i1"}
    assert holders(rec, live, {}) == ["a", "b"]
    assert holders(rec, live, {"b": "i1"}) == ["a"]
    assert holders(rec, {"a": "i1", "b": "i2"}, {"b": "i1"}) == ["a", "b"]  # back, in sync: rebuilt


def test_a_healthy_cluster_may_lose_any_disk() -> None:
    st = {"servers": [_srv("a"), _srv("b"), _srv("c")], "ranges": [_rng("r1", ["a", "b", "c"])]}
    for victim in "abc":
        assert safe_to_wipe(st, victim, {}) is None


def test_no_wipe_of_the_last_intact_in_sync_copy() -> None:
    st = {"servers": [_srv("a"), _srv("b"), _srv("c")],
          "ranges": [_rng("r1", ["a", "b", "c"]), _rng("r2", ["b", "c"])]}
    assert safe_to_wipe(st, "b", {"c": "i1"}) == "r2 has no other intact in-sync copy"
    assert safe_to_wipe(st, "a", {"c": "i1"}) is None  # r1 and r2 keep b
    st["ranges"][1]["insync"] = ["b"]
    assert safe_to_wipe(st, "b", {}) is not None
    assert safe_to_wipe(st, "c", {}) is None  # c is out of r2's in-sync set: its copy is not needed


def test_a_dead_server_holds_no_copy_for_the_count() -> None:
    st = {"servers": [_srv("a"), _srv("b", alive=False), _srv("c")], "ranges": [_rng("r1", ["a", "b"])]}
    assert safe_to_wipe(st, "a", {}) is not None
    assert safe_to_wipe(st, "c", {}) is None


def test_ranges_the_victim_does_not_hold_do_not_matter() -> None:
    st = {"servers": [_srv(s) for s in "abcd"], "ranges": [_rng("r1", ["a"], ["a", "b", "c"])]}
    assert safe_to_wipe(st, "d", {}) is None


def test_heal_wiped_needs_a_new_incarnation_in_every_in_sync_set() -> None:
    ranges = [_rng("r1", ["a", "b"]), _rng("r2", ["a", "b", "c"])]
    st = {"servers": [_srv("a"), _srv("b"), _srv("c", "i2")], "ranges": ranges}
    assert heal_wiped(st, {"c": "i1"}) == {"c": "i1"}  # rebuilt in r2, not yet in r1
    ranges[0]["insync"].append("c")
    assert heal_wiped(st, {"c": "i1"}) == {}
    assert heal_wiped(st, {"c": "i2"}) == {"c": "i2"}  # same incarnation: not restarted yet
    ranges[0]["replicas"] = ["a", "b", "d"]  # c dropped from r1, its copy rebuilt elsewhere
    ranges[0]["insync"] = ["a", "b"]
    assert heal_wiped(st, {"c": "i1"}) == {}


def test_under_replicated_counts_live_in_sync_replicas_of_serving_ranges() -> None:
    st = {"servers": [_srv("a"), _srv("b"), _srv("c", alive=False)],
          "ranges": [_rng("r1", ["a", "b"]), _rng("r2", ["a", "b", "c"]), _rng("r3", ["a", "b", "c"], ["a", "b", "c"]),
                     {"id": "r4", "primary": "a", "state": "serving"}]}
    assert under_replicated(st, 2) == []
    assert under_replicated(st, 3) == ["r1", "r2", "r3"]
    st["servers"][2]["alive"] = True
    assert under_replicated(st, 3) == ["r1"]
    st["ranges"][1]["state"] = "moving"
    assert under_replicated(st, 3) == ["r1", "r2"]
