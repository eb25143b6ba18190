"""What the failover and rebalance drills make of the coordinator's events on replicated and one-copy
clusters (cli/drills/failover.py: recoveries; cli/drills/rebalance.py: timeline_rows), and the local
cluster's refusal of fewer servers than replicas (cli/cluster/local_cluster.py), and what `rangetable ranges` says a
server holds (cli/commands/map_admin.py)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from cli.cluster.local_cluster import check_replicas, up_cmd
from cli.drills.failover import format_report, recoveries
from cli.drills.rebalance import timeline_rows

PROMOTE = {"kind": "promote", "range": "r1", "target": "ps-2", "epoch": 4, "duration_ms": 1.2,
           "reason": "primary not alive", "time": 101.5}
BALANCED = "balancer: server ps-2 hot"
TRANSFER = [{"kind": "promote", "range": "r2", "target": "ps-3", "epoch": 5, "duration_ms": 9.0,
             "reason": BALANCED, "time": 102.0},
            {"kind": "move", "range": "r2", "source": "ps-2", "target": "ps-3", "transfer": True, "offline_ms": 9.5,
             "duration_ms": 9.5, "reason": BALANCED, "time": 102.0}]


def test_recoveries_name_a_promotion_a_failover_and_a_transfer() -> None:
    failover = {"kind": "failover", "range": "r3", "target": "ps-1", "duration_ms": 30.0, "reason": "ps-2 dead",
                "time": 103.0}
    other = {"kind": "split", "range": "r1", "time": 104.0}
    out = recoveries([PROMOTE, *TRANSFER, failover, other, {**PROMOTE, "range": "r9"}], {"r1", "r2", "r3"}, 100.0)
    assert out == {
        "r1": [{"how": "promoted", "to": "ps-2", "at_s": 1.5, "took_ms": 1.2, "epoch": 4, "reason": "primary not alive"}],
        "r2": [{"how": "transferred", "to": "ps-3", "at_s": 2.0, "took_ms": 9.0, "epoch": 5, "reason": BALANCED}],
        "r3": [{"how": "failed over", "to": "ps-1", "at_s": 3.0, "took_ms": 30.0, "epoch": None, "reason": "ps-2 dead"}],
    }
    assert recoveries([{"kind": "move", "range": "r1", "target": "ps-3", "offline_ms": 12.0, "time": 100.25}],
                      {"r1"}, 100.0)["r1"][0] == {"how": "moved", "to": "ps-3", "at_s": 0.25, "took_ms": 12.0,
                                                   "epoch": None, "reason": ""}
    assert recoveries([], {"r1"}, 0.0) == {}


def test_the_failover_report_says_promoted_on_replicas() -> None:
    report = {"mode": "kill", "victim": "ps-1", "victim_pid": 7, "ranges_on_victim": 1, "replicas": 3, "seed": 1,
              "timeline_s": {"coordinator_noticed": 1.7, "noticed_how": "restarted (a new incarnation)",
                             "all_ranges_served": 1.9, "per_range_served": {"r1": 1.9}, "never_served": []},
              "recoveries": recoveries([PROMOTE], {"r1"}, 100.0),
              "client": {"ops": 10, "ok": 10, "fail": 0, "unknown": 0, "slow_over_1s": 0,
                         "latency_ms": {"p50": 1, "p99": 2, "max": 3}},
              "lost_writes": 0, "duplicate_applications": 0, "linearizable": True, "history_ops": 10, "passed": True,
              "faults": []}
    text = format_report(report)
    assert "3 replicas each: a promotion of an in-sync replica" in text
    assert "coordinator noticed: restarted (a new incarnation)" in text
    assert "promoted to ps-2 at 1.5 s in 1.2 ms (primary not alive)" in text
    text = format_report({**report, "replicas": 1, "recoveries": {}})
    assert "one copy each: a failover" in text and "promoted" not in text


def test_rebalance_timeline_calls_a_replicated_move_a_transfer() -> None:
    rows = timeline_rows([PROMOTE, *TRANSFER, {"kind": "split", "range": "r4", "key": "k", "offline_ms": 80.0,
                                               "time": 105.0}], 100.0)
    assert [(r["kind"], r["range"]) for r in rows] == [("promote", "r1"), ("transfer", "r2"), ("split", "r4")]
    assert rows[1]["offline_ms"] == 9.5 and rows[1]["target"] == "ps-3" and rows[1]["t"] == 2.0
    plain = timeline_rows([{"kind": "move", "range": "r5", "target": "ps-2", "offline_ms": 13.0, "time": 100.0}], 100.0)
    assert plain[0]["kind"] == "move"


@pytest.mark.parametrize(("servers", "replicas", "ok"), [(3, 3, True), (4, 3, True), (2, 3, False), (1, 2, False),
                                                         (1, 1, True), (2, 1, True), (0, 1, True)])
def test_check_replicas(servers: int, replicas: int, ok: bool) -> None:
    if ok:
        check_replicas(servers, replicas)
        return
    with pytest.raises(click.UsageError) as err:
        check_replicas(servers, replicas)
    msg = err.value.format_message()
    assert f"--servers {servers}" in msg and f"--replicas {replicas}" in msg and "--replicas 1" in msg


def test_up_defaults_to_three_servers_and_three_replicas_and_refuses_fewer_servers(tmp_path: object) -> None:
    defaults = {p.name: p.default for p in up_cmd.params}
    assert defaults["servers"] == 3 and defaults["replicas"] == 3 and defaults["min_insync"] == 2
    data = tmp_path / "d"  # type: ignore[operator]
    out = CliRunner().invoke(up_cmd, ["--servers", "2", "--data-dir", str(data)])
    assert out.exit_code == 2 and "--servers 2 is fewer than --replicas 3" in out.output
    assert not data.exists()  # refused before anything was written or started
