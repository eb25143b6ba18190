"""Reserved throughput: the coordinator's split of a reservation by demand (pure), its lease fields,
and a partition server's per-range token buckets and shares."""

from __future__ import annotations

import pytest

from coordinator.map.capacity import FLOOR, smooth, split_reservation
from coordinator.map.partition_map import PartitionMap
from coordinator.map.server_info import ServerInfo
from coordinator.map.table_settings import TableSettings, settings_key
from partition_server.capacity import RangeCapacity
from partition_server.table_config import TableConfig
from rangetable.errors import TableError


def test_split_follows_demand_and_sums_to_the_reservation():
    shares = split_reservation(1000, {"a": 7000, "b": 2000, "c": 700, "d": 300})
    assert sum(shares.values()) == pytest.approx(1000)
    assert shares["a"] > shares["b"] > shares["c"] > shares["d"] >= 1000 * FLOOR / 4
    want = {k: d * 1.25 - 25 for k, d in {"a": 7000, "b": 2000, "c": 700, "d": 300}.items()}
    assert shares["a"] == pytest.approx(25 + 900 * want["a"] / sum(want.values()))


def test_split_covers_small_demand_and_spreads_the_rest():
    shares = split_reservation(1000, {"a": 100, "b": 0})
    assert sum(shares.values()) == pytest.approx(1000)
    assert shares["a"] >= 125 and shares["b"] >= 50  # demand with headroom; the idle range keeps a floor
    assert split_reservation(1000, {}) == {} and split_reservation(0, {"a": 5}) == {}
    assert split_reservation(800, {"a": 0, "b": 0}) == {"a": 400, "b": 400}


def test_smooth():
    assert smooth(None, 10) == 10 and smooth(10, 20) == 15


def test_bucket_refuses_over_the_share_with_a_retry_hint():
    now = [0.0]
    cap = RangeCapacity("t", clock=lambda: now[0])
    cap.set_shares(0, 10)
    for _ in range(10):
        cap.admit(True, 1)
    with pytest.raises(TableError) as ei:
        cap.admit(True, 1)
    assert ei.value.error_code == "ServerBusy" and "retry in 100 ms" in ei.value.message
    cap.admit(False, 1000)  # reads are not limited
    now[0] += 0.5
    for _ in range(5):
        cap.admit(True, 1)
    assert cap.report(1.0) == {"used_reads_s": 1000.0, "used_writes_s": 15.0, "refused_writes_s": 1.0}
    assert cap.report(1.0) == {}


def test_table_config_shares_and_inheritance():
    tc = TableConfig()
    assert tc.learn({"settings": {"t": {"writes": 100, "ttl_s": 60}}, "settings_v": 3})
    assert not tc.learn({"settings": {}, "settings_v": 2})  # older: ignored
    assert tc.ttl_of("T") == 60 * 10_000_000

    class Rec:
        def __init__(self, rid):
            self.record = {"id": rid, "table": "t"}
    tc.set_shares({"r1": [0.0, 40.0]}, {"r1": Rec("r1")})  # type: ignore[dict-item]
    assert tc.capacity["r1"].buckets[1].rate == 40.0 and tc.capacity["r1"].buckets[0] is None
    tc.inherit(["r1"], ["r2", "r3"])
    tc._apply_share("r2", "t")
    assert tc.capacity["r2"].buckets[1].rate == 20.0


def test_coordinator_splits_each_table_by_its_ranges_demand():
    pm = PartitionMap()
    pm.tables = {"a": "a"}
    for i, (lo, hi) in enumerate((("", "m"), ("m", None))):
        pm.ranges[f"r{i}"] = {"id": f"r{i}", "table": "a", "low": lo, "high": hi, "primary": "s1", "epoch": 1,
                              "path": f"r{i}", "state": "serving"}
    pm.reindex()
    ts = TableSettings()
    puts, deletes = ts.put("A", {"writes": 1000})
    assert puts == {settings_key("a"): {"writes": 1000}} and not deletes
    info = ServerInfo("s1", "tcp://x", "i", 0.0)
    info.load = {"r0": {"used_writes_s": 300.0, "refused_writes_s": 1500.0}, "r1": {"used_writes_s": 100.0}}
    ts.refresh(pm, {"s1": info}, now=10.0)
    assert sum(s[1] for s in ts.shares.values()) == pytest.approx(1000, abs=1)
    assert ts.shares["r0"][1] > 700 and ts.shares["r0"][0] == 0.0
    assert ts.usage["a"]["used_writes_s"] == 400.0 and ts.usage["a"]["refused_writes_s"] == 1500.0
    fields = ts.lease_fields("s1", -1, pm)
    assert fields["settings"] == {"a": {"writes": 1000}} and set(fields["shares"]) == {"r0", "r1"}
    assert "settings" not in ts.lease_fields("s1", ts.version, pm)
    assert ts.put("a", {}) == ({}, [settings_key("a")])
