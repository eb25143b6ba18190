"""Replica moves: the pure decisions of coordinator/replicas/sets.py (check_move, move_step, new_leader, finished,
abandoned), balancer rules 7 and 8 (coordinator/balancer/replica_rules.py, through plan_actions), and --zones for
local clusters (cli/cluster/local_cluster.py, cli/cluster/supervisor.py)."""

from __future__ import annotations

import click
import pytest

from cli.cluster.local_cluster import parse_zones
from cli.cluster.supervisor import ClusterSpec, Supervisor
from coordinator.balancer.load_history import LoadHistory
from coordinator.balancer.policy import plan_actions
from coordinator.balancer.settings import Settings
from coordinator.replicas.sets import abandoned, check_move, finished, move_step, new_leader
from rangetable.errors import TableError


def rec(rid: str = "r1", primary: str = "a", replicas: tuple[str, ...] = ("a", "b", "c"),
        insync: tuple[str, ...] | None = None, move: dict | None = None, state: str = "serving",
        table: str = "t", low: str = "", high: str | None = None) -> dict:
    """A replicated range record as in the partition map."""
    out = {"id": rid, "table": table, "low": low, "high": high, "primary": primary, "epoch": 3, "path": f"ranges/{rid}",
           "state": state, "replicas": list(replicas), "insync": list(replicas if insync is None else insync)}
    if move is not None:
        out["move"] = move
    return out


LIVE = {"a", "b", "c", "d"}


# --- check_move ------------------------------------------------------------------------------------

@pytest.mark.parametrize("r, source, target, zones, code, words", [
    ({k: v for k, v in rec().items() if k not in ("replicas", "insync")}, "a", "d", None, "InvalidInput", "one copy"),
    (rec(move={"source": "b", "target": "d", "deadline": 9}), "c", "d", None, "ServerBusy", "already moving"),
    (rec(state="splitting"), "b", "d", None, "ServerBusy", "splitting"),
    (rec(), "d", "b", None, "InvalidInput", "holds no replica"),
    (rec(), "b", "c", None, "InvalidInput", "already holds"),
    (rec(), "b", "e", None, "ResourceNotFound", "not a live"),
    (rec(), "b", "d", {"a": "z1", "b": "z2", "c": "z3", "d": "z1"}, "InvalidInput", "zone 'z1' like a"),
    (rec(), "b", "d", {"a": "z1", "b": "z2", "c": "z3", "d": "z3"}, "InvalidInput", "zone 'z3' like c"),
])
def test_check_move_refuses(r: dict, source: str, target: str, zones: dict | None, code: str, words: str) -> None:
    with pytest.raises(TableError) as err:
        check_move(r, source, target, LIVE, zones)
    assert err.value.code.name == code
    assert words in str(err.value)


@pytest.mark.parametrize("source, target, zones", [
    ("b", "d", None),  # no zones: any live server without a copy
    ("b", "d", {"a": "z1", "b": "z2", "c": "z3", "d": "z2"}),  # d takes the zone b leaves
    ("a", "d", {"a": "z1", "b": "z2", "c": "z3", "d": "z1"}),  # the primary's replica, into its own zone
    ("b", "d", {"a": "z1", "b": "z2", "c": "z3"}),  # d carries no zone: a zone of its own
])
def test_check_move_accepts(source: str, target: str, zones: dict | None) -> None:
    check_move(rec(), source, target, LIVE, zones)


# --- move_step ---------------------------------------------------------------------------------------

MOVE = {"source": "b", "target": "d", "deadline": 100.0}


@pytest.mark.parametrize("r, alive, now, min_insync, want", [
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c"), move=MOVE), LIVE, 10, 2, "wait"),
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c"), move=MOVE), LIVE, 100, 2, "abandon"),  # deadline
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c"), move=MOVE), LIVE - {"d"}, 10, 2, "abandon"),
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c", "d"), move=MOVE), LIVE, 10, 2, "finish"),
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c", "d"), move=MOVE), LIVE, 500, 2, "finish"),
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c", "d"), move=MOVE), LIVE, 10, 3, "finish"),
    # the target is in sync but dropping the source would leave fewer than min_insync: wait, then give up
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "d"), move=MOVE), LIVE, 10, 3, "wait"),
    (rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "d"), move=MOVE), LIVE, 100, 3, "abandon"),
    (rec(replicas=("a", "b", "c"), insync=("a", "b", "c"), move=MOVE), LIVE, 10, 2, "done"),  # target dropped
    (rec(replicas=("a", "c", "d"), insync=("a", "c", "d"), move=MOVE), LIVE, 10, 2, "done"),  # source gone already
    (rec(replicas=("a", "c", "d"), insync=("a", "c"), move=MOVE), LIVE, 10, 2, "wait"),
])
def test_move_step(r: dict, alive: set[str], now: float, min_insync: int, want: str) -> None:
    assert move_step(r, alive, now, min_insync) == want


def test_move_step_never_drops_below_min_insync() -> None:
    """Over every in-sync subset: "finish" only when the target is in sync and min_insync stay without the source."""
    import itertools

    members = ["a", "b", "c", "d"]
    for k in range(1, 5):
        for insync in itertools.combinations(members, k):
            for m in (1, 2, 3):
                r = rec(replicas=tuple(members), insync=insync, move=MOVE)
                if move_step(r, LIVE, 10, m) == "finish":
                    after = finished(r)
                    assert "d" in after["insync"] and "b" not in after["replicas"]
                    assert len(after["insync"]) >= m


# --- new_leader, finished, abandoned ---------------------------------------------------------------------

@pytest.mark.parametrize("r, leaving, alive, primaries, want", [
    (rec(), "a", LIVE, {}, "b"),
    (rec(), "a", LIVE, {"b": 5, "c": 1}, "c"),
    (rec(), "a", LIVE - {"b"}, {}, "c"),
    (rec(insync=("a",)), "a", LIVE, {}, None),
    (rec(insync=("a", "b")), "a", LIVE - {"b"}, {}, None),
])
def test_new_leader(r: dict, leaving: str, alive: set[str], primaries: dict, want: str | None) -> None:
    assert new_leader(r, leaving, alive, primaries) == want


def test_finished_and_abandoned() -> None:
    r = rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c", "d"), move=MOVE)
    assert finished(r) == {"replicas": ["a", "c", "d"], "insync": ["a", "c", "d"], "move": None}
    r = rec(replicas=("a", "b", "c", "d"), insync=("a", "b", "c"), move=MOVE)
    assert abandoned(r) == {"replicas": ["a", "b", "c"], "insync": ["a", "b", "c"], "move": None}


# --- balancer rules 7 (replica balance) and 8 (primary spread) -----------------------------------------

def plan(ranges: list[dict], servers: list[str], zones: dict[str, str] | None = None, recent: dict | None = None,
         now: float = 1000.0, replica_jobs: int = 0, **settings: str) -> list[tuple]:
    s = Settings()
    for k, v in settings.items():
        s.set(k, v)
    acts = plan_actions(ranges, servers, LoadHistory(), s, now, recent or {}, 0, zones, None, replica_jobs)
    return [(a.kind, a.range, a.target, a.detail.get("source")) for a in acts]


def three_by_three(n: int = 9, primaries: tuple[str, ...] = ("ps-1", "ps-2", "ps-3")) -> list[dict]:
    """``n`` ranges, each on ps-1..3, primaries round-robin."""
    servers = ("ps-1", "ps-2", "ps-3")
    return [rec(f"r{i}", primary=primaries[i % len(primaries)], replicas=servers, low=f"k{i:02}",
                high=f"k{i + 1:02}" if i + 1 < n else None) for i in range(n)]


S4 = ["ps-1", "ps-2", "ps-3", "ps-4"]


def test_a_new_empty_server_gets_replicas_a_few_per_round() -> None:
    got = plan(three_by_three(), S4)
    assert [g[0] for g in got] == ["replica_move", "replica_move"]  # max_replica_moves 2
    assert all(g[2] == "ps-4" for g in got)
    assert {g[3] for g in got} == {"ps-1", "ps-2"}  # the fullest (ties: smaller id) give one each
    rs = three_by_three()
    got = plan(rs, S4, max_replica_moves="5")
    assert len(got) == 5 and len({g[1] for g in got}) == 5  # one move per range


def test_followers_move_before_primaries_and_smallest_first() -> None:
    rs = three_by_three(3)
    got = plan(rs, S4, max_replica_moves="1")
    (kind, rid, target, source) = got[0]
    r = next(r for r in rs if r["id"] == rid)
    assert r["primary"] != source


def test_only_primaries_left_on_the_source_still_move() -> None:
    rs = [rec("r1", primary="ps-1", replicas=("ps-1", "ps-2", "ps-3")),
          rec("r2", primary="ps-1", replicas=("ps-1", "ps-2", "ps-3"), low="m")]
    rs[0]["high"] = "m"
    got = plan(rs, S4, max_replica_moves="1", replica_move_min_gap="2", primary_spread="off")
    assert got == [("replica_move", "r1", "ps-4", "ps-1")]


def test_no_move_when_balanced_or_gap_one() -> None:
    rs = [rec("r1", primary="ps-1", replicas=("ps-1", "ps-2", "ps-3"), high="m"),
          rec("r2", primary="ps-4", replicas=("ps-4", "ps-1", "ps-2"), low="m")]
    assert plan(rs, S4) == []  # counts 2,2,1,1
    assert plan(three_by_three(), ["ps-1", "ps-2", "ps-3"]) == []


def test_zones_keep_replicas_apart() -> None:
    zones = {"ps-1": "a", "ps-2": "b", "ps-3": "c", "ps-4": "c"}
    got = plan(three_by_three(), S4, zones, max_replica_moves="9")
    assert got and all(g[3] == "ps-3" for g in got)  # only ps-3's replicas may go to ps-4 (same zone c)
    assert len(got) == 4  # 9,9,9,0 -> ps-3 at 5, ps-4 at 4: the gap is 1
    zones = {"ps-1": "a", "ps-2": "b", "ps-3": "c", "ps-4": "a"}
    assert all(g[3] == "ps-1" for g in plan(three_by_three(), S4, zones, max_replica_moves="9"))


def test_moving_busy_or_young_ranges_are_left_alone() -> None:
    rs = three_by_three(3)
    rs[0]["move"] = {"source": "ps-1", "target": "ps-4", "deadline": 1e9}
    rs[0]["replicas"].append("ps-4")
    rs[1]["state"] = "splitting"
    got = plan(rs, S4, max_replica_moves="3")
    assert [g[1] for g in got] == ["r2"]  # r0 moving (counts as in flight), r1 splitting
    assert plan(rs, S4, max_replica_moves="1") == []  # the budget is taken by r0's move
    recent = {"split": {"r2": 990.0}}
    assert plan(rs, S4, recent=recent, max_replica_moves="3") == []
    recent = {"replica_move": {"r2": 900.0}}
    assert [g[1] for g in plan(rs, S4, recent=recent, max_replica_moves="3")] == ["r2"]  # cooldown over
    assert plan(rs, S4, replica_jobs=2, max_replica_moves="3") == []


def test_rules_off_and_one_copy_ranges() -> None:
    assert plan(three_by_three(), S4, replica_move="off", primary_spread="off") == []
    plain = [{k: v for k, v in r.items() if k not in ("replicas", "insync")} for r in three_by_three()]
    assert plan(plain, S4, merge="off") == []


def test_a_moving_range_is_not_merged_nor_are_ranges_on_different_replicas() -> None:
    rs = three_by_three(2)
    rs[1]["replicas"] = ["ps-2", "ps-3", "ps-4"]
    h = LoadHistory()
    for t in range(0, 200, 5):
        h.add(float(t), "ps-1", {"r0": {"reads_s": 0, "bytes": 10}})
        h.add(float(t), "ps-2", {"r1": {"reads_s": 0, "bytes": 10}})
    s = Settings()
    s.set("replica_move", "off")
    assert [a for a in plan_actions(rs, S4, h, s, 200.0) if a.kind == "merge"] == []
    rs[1]["replicas"] = ["ps-1", "ps-2", "ps-3"]
    assert [a.kind for a in plan_actions(rs, S4, h, s, 200.0)] == ["merge"]


def test_primary_spread() -> None:
    rs = three_by_three(6, primaries=("ps-1",))
    got = plan(rs, ["ps-1", "ps-2", "ps-3"], max_concurrent_moves="9")
    assert [g[0] for g in got] == ["move"] * 4  # 6,0,0 -> 2,2,2
    assert sorted(g[2] for g in got) == ["ps-2", "ps-2", "ps-3", "ps-3"]
    assert plan(three_by_three(6), ["ps-1", "ps-2", "ps-3"], max_concurrent_moves="9") == []  # already even
    assert len(plan(rs, ["ps-1", "ps-2", "ps-3"])) == 1  # max_concurrent_moves 1


def test_primary_spread_only_to_in_sync_replicas_and_cold_ranges() -> None:
    rs = three_by_three(4, primaries=("ps-1",))
    for r in rs:
        r["insync"] = ["ps-1", "ps-2"]
    got = plan(rs, ["ps-1", "ps-2", "ps-3"], max_concurrent_moves="9")
    assert {g[2] for g in got} == {"ps-2"}
    h = LoadHistory()
    h.add(999.0, "ps-1", {r["id"]: {"reads_s": 400} for r in rs})
    s = Settings()
    s.set("max_concurrent_moves", "9")
    s.set("server_imbalance", "100")  # rule 5 off
    assert [a for a in plan_actions(rs, ["ps-1", "ps-2", "ps-3"], h, s, 1000.0) if a.kind == "move"] == []


def test_settings() -> None:
    s = Settings()
    s.set("replica-move-timeout-s", "30")
    assert s.replica_move_timeout_s == 30.0
    with pytest.raises(ValueError):
        s.set("replica_move_timeout_s", "0")
    with pytest.raises(ValueError):
        s.set("max_replica_moves", "-1")


# --- --zones ----------------------------------------------------------------------------------------------

def test_parse_zones() -> None:
    assert parse_zones("") == []
    assert parse_zones("a, b,c") == ["a", "b", "c"]
    with pytest.raises(click.BadParameter):
        parse_zones("a,,b")


def test_zones_go_to_servers_round_robin(tmp_path) -> None:
    sup = Supervisor(ClusterSpec(data_dir=str(tmp_path), servers=4, frontends=1, native_port=0, http_port=0,
                                 dashboard=False, replicas=3, zones=["a", "b", "c"]))
    sup.plan()
    got = {c.id: c.argv[c.argv.index("--zone") + 1] for c in sup.children if c.role == "partition-server"}
    assert got == {"ps-1": "a", "ps-2": "b", "ps-3": "c", "ps-4": "a"}


def test_the_admin_op_reads_its_fields() -> None:
    from coordinator.admin_dispatch import JOBS

    fn, args = JOBS["replica_move"]
    assert fn.__name__ == "start"
    assert args({"range": "r1", "source": "a", "target": "b"}) == ("r1", "a", "b", None)
    assert args({"range": "r1", "source": "a", "target": "b", "timeout_s": 5}) == ("r1", "a", "b", 5)
    with pytest.raises(TableError):
        args({"range": "r1", "source": "a", "target": 3})
