"""Pure parts of the control plane at scale: map deltas, the frontend's map cache, the partition
map's indexes, orphan placement, changed-only load reports, and load-history sharing."""

from __future__ import annotations

import msgpack

from coordinator.balancer.load_history import LoadHistory
from coordinator.map.deltas import DeltaLog, PendingChanges, build_delta, fold
from coordinator.map.partition_map import PartitionMap, range_key
from coordinator.replicas.placement import place_orphans
from frontend.routing import MapCache
from partition_server.served import only_changed


def _map(n: int = 4) -> PartitionMap:
    pm = PartitionMap()
    pm.create_table("t", "s1")
    rec = pm.ranges["r000001"]
    for i in range(1, n):  # split the last range at k1, k2, …
        last = [r for r in pm.ranges.values() if r["high"] is None][0]
        left = pm.new_range("t", last["low"], f"k{i:03d}", last["primary"], last["epoch"] + 1)
        right = pm.new_range("t", f"k{i:03d}", None, f"s{i % 2 + 1}", last["epoch"] + 1)
        pm.replace([last], [left, right])
    assert rec["id"] not in pm.ranges and not pm.check()
    return pm


def _snapshot(pm: PartitionMap, servers: dict[str, str]) -> dict:
    return {**pm.snapshot(), "servers": servers, "pub": "tcp://p"}


def _publish(pm: PartitionMap, prev: int, changes: PendingChanges, servers: dict[str, str | None]) -> dict:
    return build_delta(prev, pm.version, changes, pm.ranges, servers, sorted(pm.tables.values()))


def test_partition_map_indexes_follow_every_change() -> None:
    pm = _map(4)
    assert {r["id"] for r in pm.primary_ranges("s1")} == {r["id"] for r in pm.ranges.values() if r["primary"] == "s1"}
    some = pm.primary_ranges("s1")[0]
    pm.update(some, primary="s3", state="moving")
    assert pm.primary_count("s3") == 1 and some["id"] in pm.busy_ids()
    pm.update(some, state="serving")
    assert pm.busy_ids() == set()
    pm.delete_table("t")
    assert pm.primaries() == [] and pm.primary_ranges("s1") == []
    rebuilt = PartitionMap.from_snapshot(_map(3).snapshot())
    assert sum(rebuilt.primary_count(o) for o in rebuilt.primaries()) == 3


def test_delta_carries_only_the_change_and_applies_to_a_cache() -> None:
    pm = _map(50)
    servers = {"s1": "tcp://a", "s2": "tcp://b"}
    cache = MapCache()
    assert cache.apply(_snapshot(pm, servers))
    v0 = pm.version
    # split one range: the commit removes it and adds two
    mid = pm.range_for("t", "k025")
    left = pm.new_range("t", mid["low"], "k025m", mid["primary"], mid["epoch"] + 1)
    right = pm.new_range("t", "k025m", mid["high"], mid["primary"], mid["epoch"] + 1)
    ch = PendingChanges()
    ch.note_writes(*pm.replace([mid], [left, right]))
    delta = _publish(pm, v0, ch, {})
    assert delta["removed"] == [mid["id"]] and len(delta["ranges"]) == 2
    assert len(msgpack.packb(delta)) < len(msgpack.packb(pm.snapshot())) / 10
    assert cache.apply(delta) and cache.version == pm.version
    assert cache.route("t", "k025n").range["id"] == right["id"]
    assert cache.route("t", "k025a").range["id"] == left["id"]
    assert cache.route("t", "k025").range["id"] == left["id"]
    assert cache.snapshot["ranges"] == _snapshot(pm, servers)["ranges"]
    # a server dies: every route to it loses its endpoint without touching the routes
    v1 = pm.version
    pm.version += 1
    ch = PendingChanges(servers={"s2"})
    assert cache.apply(_publish(pm, v1, ch, {"s2": None}))
    assert all(rt.endpoint is None for rt in cache.by_table["t"][1] if rt.range["primary"] == "s2")
    assert any(rt.endpoint == "tcp://a" for rt in cache.by_table["t"][1])


def test_a_gap_is_refused_and_old_deltas_are_ignored() -> None:
    pm = _map(3)
    cache = MapCache()
    cache.apply(_snapshot(pm, {}))
    v = pm.version
    gap = {"prev": v + 1, "version": v + 2, "ranges": [], "removed": [], "servers": {}}
    assert not cache.apply(gap) and cache.is_gap(gap)
    old = {"prev": v - 2, "version": v - 1, "ranges": [], "removed": [], "servers": {}}
    assert not cache.apply(old) and not cache.is_gap(old)
    assert not MapCache().apply({"prev": 0, "version": 1, "ranges": [], "removed": [], "servers": {}})


def test_a_deleted_table_leaves_the_cache() -> None:
    pm = _map(3)
    pm.create_table("u", "s1")
    cache = MapCache()
    cache.apply(_snapshot(pm, {"s1": "tcp://a"}))
    v = pm.version
    ch = PendingChanges()
    ch.note_writes(*pm.delete_table("t")[1])
    assert cache.apply(_publish(pm, v, ch, {}))
    assert list(cache.by_table) == ["u"] and len(cache.ranges) == 1 and not cache.has_table("t")


def test_fold_and_delta_log_catch_a_frontend_up() -> None:
    d1 = {"prev": 1, "version": 2, "ranges": [{"id": "a", "x": 1}], "removed": [], "servers": {"s": "e1"}}
    d2 = {"prev": 2, "version": 4, "ranges": [{"id": "b"}], "removed": ["a"], "servers": {"s": None},
          "tables": ["t"]}
    d3 = {"prev": 4, "version": 5, "ranges": [{"id": "a", "x": 2}], "removed": [], "servers": {}}
    f = fold([d1, d2, d3])
    assert f == {"prev": 1, "version": 5, "ranges": [{"id": "a", "x": 2}, {"id": "b"}], "removed": [],
                 "servers": {"s": None}, "tables": ["t"]}
    log = DeltaLog(limit=2)
    for d in (d1, d2, d3):
        log.add(d, msgpack.packb(d))
    assert log.since(2, 5)["prev"] == 2 and log.since(4, 5)["ranges"] == [{"id": "a", "x": 2}]
    assert log.since(1, 5) is None  # d1 left the log: the caller sends a snapshot
    assert log.since(5, 5)["ranges"] == [] and log.since(6, 5) is None


def test_place_orphans_spreads_over_the_least_loaded() -> None:
    plan = place_orphans([f"r{i}" for i in range(10)], {"a": 5, "b": 0, "c": 1})
    counts = {s: list(plan.values()).count(s) for s in "abc"}
    assert counts == {"a": 1, "b": 5, "c": 4} or counts == {"a": 2, "b": 4, "c": 4}
    assert place_orphans(["r1"], {}) == {}


def test_only_changed_reports_and_full_rounds() -> None:
    sent: dict = {}
    idle = {"reads_s": 0.0}
    assert only_changed({"a": idle, "b": idle}, sent, full=False) == {"a": idle, "b": idle}
    assert only_changed({"a": idle, "b": {"reads_s": 3.0}}, sent, full=False) == {"b": {"reads_s": 3.0}}
    assert only_changed({"a": idle}, sent, full=False) == {} and "b" not in sent
    assert only_changed({"a": idle}, sent, full=True) == {"a": idle}


def test_load_history_shares_unchanged_reports() -> None:
    h = LoadHistory(window_s=10)
    for t in range(5):
        h.add(float(t), "s", {"r": {"reads_s": 0.0, "sample": []}})
    loads = [s.load for s in h.history("r")]
    assert all(x is loads[0] for x in loads)
    h.add(30.0, "s", {"q": {"reads_s": 1.0}})
    assert h.ranges() == ["q"]  # pruned: older than the window


def test_a_confirmed_report_stays_current_for_the_balancer() -> None:
    from coordinator.balancer.policy import plan_actions
    from coordinator.balancer.settings import Settings

    h = LoadHistory(window_s=180)
    big = {"bytes": 300 << 20, "entities": 10}
    h.add(0.0, "s1", {"r000001": big})
    rec = {"id": "r000001", "table": "t", "low": "", "high": None, "primary": "s1", "epoch": 1, "state": "serving"}
    assert plan_actions([rec], ["s1"], h, Settings(), 20.0) == []  # stale: no report for 20 s
    h.confirm(19.5, "s1")  # its server still heartbeats: the latest report holds
    assert h.current_until("r000001") == 19.5
    assert [a.kind for a in plan_actions([rec], ["s1"], h, Settings(), 20.0)] == ["split"]


def test_range_records_stored_before_the_rename_read_as_now() -> None:
    """A meta store (or a backup of one) written before the primary was named ``primary`` loads and is followed
    the same: the old field is read as ``primary`` and the indexes know it."""
    old = {**_map(2).ranges["r000002"]}
    old["owner"] = old.pop("primary")
    pm = PartitionMap.load([(range_key(old["id"]), old), (b"table/t", "t")])
    assert pm.ranges[old["id"]]["primary"] == old["owner"] and "owner" not in pm.ranges[old["id"]]
    assert pm.primary_ids(old["owner"]) == [old["id"]]
    follower = PartitionMap()
    follower.apply({range_key(old["id"]): old}, [])
    assert follower.ranges[old["id"]] == pm.ranges[old["id"]]
