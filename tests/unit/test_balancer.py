"""Balancer policy: data-driven scenarios (map + load history in, exact actions out), multi-round
simulations (split-and-move in time, no flapping), Settings parsing, LoadHistory, and properties."""

from __future__ import annotations

import importlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.balancer.load_history import LoadHistory, load_score
from coordinator.balancer.policy import plan_actions
from coordinator.balancer.rounds import Action
from coordinator.balancer.settings import Settings
from coordinator.balancer.splits import append_pattern, load_median
from tests.unit.balancer_scenarios import MODULES, MiB, R
from tests.unit.balancer_scenarios.sim import Sim

SCENARIOS = [sc for m in MODULES for sc in importlib.import_module(f"tests.unit.balancer_scenarios.{m}").SCENARIOS]


def run(sc: dict) -> list[Action]:
    """Feed a scenario's heartbeats (merged per server and time) to a history and plan once."""
    s = Settings()
    for k, v in sc["settings"].items():
        s.set(k, v)
    g = sc["given"]
    merged: dict[tuple[float, str], dict] = {}
    for t, server, loads in g["beats"]:
        merged.setdefault((float(t), server), {}).update(loads)
    h = LoadHistory()
    for (t, server), loads in sorted(merged.items()):
        h.add(t, server, loads)
    return plan_actions(g["ranges"], g["servers"], h, s, sc["now"], g.get("recent", {}), g.get("in_flight", 0))


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc["name"] for sc in SCENARIOS])
def test_scenario(sc: dict) -> None:
    got = run(sc)
    assert [(a.kind, a.range, a.key, a.target) for a in got] == [
        (e["kind"], e["range"], e["key"], e["target"]) for e in sc["expect"]
    ], [a.reason for a in got]
    for a, e in zip(got, sc["expect"], strict=True):
        assert {k: a.detail.get(k) for k in e["detail"]} == e["detail"]
        assert a.reason


def test_scenario_names_unique() -> None:
    names = [sc["name"] for sc in SCENARIOS]
    assert len(names) == len(set(names))
    assert len(SCENARIOS) >= 60


def test_hot_key_action_carries_advice() -> None:
    sc = next(sc for sc in SCENARIOS if sc["name"].startswith("one hot PartitionKey"))
    (a,) = run(sc)
    assert "hash" in a.detail["advice"] and "PartitionKey" in a.detail["advice"]
    assert "'u'" in a.reason and "cannot split" in a.reason
    assert a.to_dict()["detail"]["share"] == a.detail["share"]


# --- multi-round simulations --------------------------------------------------------------------

KEYS = [f"k{i:02d}" for i in range(20)]


def uniform(total: float) -> dict[str, float]:
    return {k: total / len(KEYS) for k in KEYS}


def test_hot_range_split_and_half_moved_within_15s() -> None:
    """Issue #6: sustained load on one range of a 2-server cluster -> split and a half moved, < 15 s."""
    sim = Sim(["s1", "s2"], lambda t: uniform(900), data_keys=KEYS)
    log = sim.run(15)
    assert [(a.kind, a.key, a.target) for _, a in log] == [("split", "k10", None), ("move", None, "s2")]
    (t_split, split), (t_move, move) = log
    assert t_split == 8.0 and t_move == 10.0  # first hot report at 0.5 s, rounds every 2 s
    assert move.detail["just_split"]
    assert sim.server_loads(15) == {"s1": 450.0, "s2": 450.0}


def test_no_flapping_over_many_rounds() -> None:
    """Bursty load (hot 8 s, cold 12 s): one split, one move, then nothing for five minutes."""
    def bursty(t: float) -> dict[str, float]:
        return uniform(900 if t % 20 < 8 else 1)

    sim = Sim(["s1", "s2"], bursty, data_keys=KEYS)
    sim.run(300)
    assert sim.kinds() == ["split", "move"]


def test_without_cool_down_the_same_load_flaps() -> None:
    """Control for the test above: a 4 s merge cool-down lets split and merge oscillate."""
    def bursty(t: float) -> dict[str, float]:
        return uniform(900 if t % 20 < 8 else 1)

    s = Settings()
    s.set("merge_cooldown_s", "4")
    s.set("move", "off")
    sim = Sim(["s1", "s2"], bursty, settings=s, data_keys=KEYS)
    sim.run(120)
    kinds = sim.kinds()
    assert kinds.count("split") >= 3 and kinds.count("merge") >= 3


def test_steady_cold_halves_merge_only_after_cool_down() -> None:
    """Hot for 10 s, then idle: the halves merge back, but not before merge_cooldown_s."""
    sim = Sim(["s1", "s2"], lambda t: uniform(900 if t < 10 else 0.5), data_keys=KEYS)
    log = sim.run(150)
    assert [a.kind for _, a in log] == ["split", "move", "merge"]
    t_split, t_merge = log[0][0], log[2][0]
    assert t_merge - t_split >= 60
    assert log[2][1].detail["needs_move"]
    assert len(sim.ranges) == 1 and sim.ranges[0]["low"] == "" and sim.ranges[0]["high"] is None


def test_hot_single_key_warns_periodically_never_splits() -> None:
    sim = Sim(["s1", "s2"], lambda t: {"hot": 900.0, "cold": 0.5}, data_keys=KEYS)
    log = sim.run(130)
    assert [(t, a.kind, a.key) for t, a in log] == [(8.0, "hot_key", "hot"), (68.0, "hot_key", "hot"),
                                                    (128.0, "hot_key", "hot")]


def test_append_only_writer_gets_advice_not_splits() -> None:
    sim = Sim(["s1", "s2"], lambda t: {f"{int(t * 1000):09d}-{i}": 90.0 for i in range(10)})
    log = sim.run(70)
    assert [(t, a.kind, a.detail["pattern"]) for t, a in log] == [(8.0, "append_hotspot", "append"),
                                                                  (68.0, "append_hotspot", "append")]


# --- Settings -----------------------------------------------------------------------------------


def test_settings_defaults_and_to_dict() -> None:
    d = Settings().to_dict()
    assert d["hot_rps"] == 500.0 and d["hot_window_s"] == 6.0 and d["split_size_bytes"] == 256 * MiB
    assert d["server_imbalance"] == 1.25 and d["max_concurrent_moves"] == 1 and d["merge_cooldown_s"] == 60.0
    assert d["merge_max_bytes"] == 32 * MiB and d["hot_key_share"] == 0.8 and d["dry_run"] is False
    assert Settings(**d) == Settings()


@pytest.mark.parametrize("key, value, field, expected", [
    ("hot_rps", "750", "hot_rps", 750.0),
    ("hot-rps", " 1e3 ", "hot_rps", 1000.0),
    ("HOT_WINDOW_S", "10", "hot_window_s", 10.0),
    ("dry_run", "on", "dry_run", True),
    ("dry-run", "TRUE", "dry_run", True),
    ("enabled", "off", "enabled", False),
    ("split", "no", "split", False),
    ("merge", "0", "merge", False),
    ("move", "yes", "move", True),
    ("max_concurrent_moves", "3", "max_concurrent_moves", 3),
    ("max_concurrent_moves", "0", "max_concurrent_moves", 0),
    ("split_size_bytes", "64MiB", "split_size_bytes", 64 * MiB),
    ("split_size_bytes", "1.5 KiB", "split_size_bytes", 1536),
    ("split_size_bytes", "2GB", "split_size_bytes", 2 * 10**9),
    ("merge_max_bytes", "1_000_000", "merge_max_bytes", 10**6),
    ("hot_key_share", "1", "hot_key_share", 1.0),
    ("server_imbalance", "1", "server_imbalance", 1.0),
    ("append_share", "0.5", "append_share", 0.5),
])
def test_settings_set_parses(key: str, value: str, field: str, expected: object) -> None:
    s = Settings()
    s.set(key, value)
    got = getattr(s, field)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("key, value, message", [
    ("hot_qps", "5", "unknown balancer setting"),
    ("", "5", "unknown balancer setting"),
    ("hot_rps", "fast", "not a valid float"),
    ("hot_rps", "nan", "finite"),
    ("hot_rps", "inf", "finite"),
    ("hot_rps", "-1", ">= 0"),
    ("dry_run", "maybe", "on/off"),
    ("max_concurrent_moves", "1.5", "not a valid int"),
    ("max_concurrent_moves", "-1", ">= 0"),
    ("split_size_bytes", "12 parsecs", "not a valid size"),
    ("split_size_bytes", "0.1b", "not a valid size"),
    ("hot_key_share", "0", "(0, 1]"),
    ("hot_key_share", "1.2", "(0, 1]"),
    ("server_imbalance", "0.9", ">= 1"),
    ("interval_s", "0", "> 0"),
])
def test_settings_set_rejects(key: str, value: str, message: str) -> None:
    s = Settings()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
        s.set(key, value)
    assert s == Settings()


# --- LoadHistory and helpers --------------------------------------------------------------------


def test_load_score() -> None:
    assert load_score({"reads_s": 10, "writes_s": 5, "busy_s": 2, "entities_s": 300}) == 20.0
    assert load_score({}) == 0.0


def test_history_window_queries_and_pruning() -> None:
    h = LoadHistory(window_s=10)
    for t in range(21):
        h.add(t, "s1", {"r1": {"reads_s": 600 if t != 14 else 10, "sample": ["a", "b"] if t < 18 else ["c"]}})
    assert h.first_seen("r1") == 0 and len(h.history("r1")) == 11  # seen without a break since 0
    assert h.hot_since("r1", 500) == 15
    assert h.hot_since("r1", 700) is None
    assert h.avg("r1", "score", 5) == 600 and h.peak("r1", "reads_s", 10) == 600
    assert h.avg("r1", "score", 10, now=14.5) == pytest.approx((600 * 4 + 10) / 5)
    assert h.avg("r9", "score", 10) is None
    assert h.samples("r1", 3) == [("c", 1800.0)]
    assert h.samples("r1", 4) == [("a", 300.0), ("b", 300.0), ("c", 1800.0)]
    assert h.key_batches("r1", 4) == [["a", "b"], ["c"], ["c"], ["c"]]
    assert h.server_load("s1") == 600 and h.server_load("s2") == 0.0 and h.servers() == ["s1"]
    h.add(40, "s2", {"r2": {"writes_s": 1}})
    assert h.ranges() == ["r2"] and h.first_seen("r1") is None and h.servers() == ["s2"]
    h.forget_server("s2")
    assert h.servers() == [] and h.latest("r2").t == 40


def test_hot_since_breaks_at_gaps() -> None:
    h = LoadHistory()
    for t in (0, 1, 2, 10, 11):
        h.add(t, "s1", {"r1": {"reads_s": 900}})
    assert h.hot_since("r1", 500) == 0
    assert h.hot_since("r1", 500, max_gap=5) == 10


def test_load_median_and_append_pattern() -> None:
    assert load_median([("a", 1), ("b", 1), ("c", 1), ("d", 1)], "", None) == ("c", 0.5)
    assert load_median([("m", 5), ("n", 1)], "m", None) == ("n", 5 / 6)
    assert load_median([("m", 5)], "m", None) == (None, 0.0)
    assert load_median([("a", 1), ("z", 1)], "", "q") == ("a", 0.0)
    assert append_pattern([["a"], ["b"], ["c"]], last=True, first=False, share=0.8) == ("append", 1.0)
    assert append_pattern([["c"], ["b"], ["a"]], last=True, first=True, share=0.8) == ("prepend", 1.0)
    assert append_pattern([["c"], ["b"], ["a"]], last=True, first=False, share=0.8) is None
    assert append_pattern([["a"], ["b"]], last=True, first=True, share=0.8) is None


# --- properties ---------------------------------------------------------------------------------

ALL_SERVERS = ["s1", "s2", "s3", "s4"]
KEYSPACE = "abcdefghij"


SETTING_CHOICES = [("hot_window_s", ["0", "3", "6"]), ("max_concurrent_moves", ["0", "1", "2", "3"]),
                   ("merge_cooldown_s", ["0", "5", "60"]), ("max_merges_per_round", ["0", "1", "3"]),
                   ("move_min_rps", ["0", "50"]), ("hot_key_share", ["0.5", "0.8", "1"]),
                   ("max_splits_per_round", ["0", "1", "5"]), ("server_imbalance", ["1", "1.25"])]


@st.composite
def worlds(draw: st.DrawFn) -> dict:
    """A random map (1-2 tables), live servers, a load history, recent actions and settings.

    The settings are drawn by Hypothesis; the bulk (map, loads, recent) comes from a drawn seed,
    which keeps generation fast.
    """
    rng = random.Random(draw(st.integers(0, 2**32)))
    ranges: list[dict] = []
    for table in rng.choice([["t"], ["t", "u"]]):
        cuts = sorted(rng.sample(KEYSPACE[1:], rng.randint(0, 4)))
        bounds = [""] + cuts + [None]
        for low, high in zip(bounds, bounds[1:], strict=False):
            primary = rng.choice(ALL_SERVERS[:2] * 3 + ALL_SERVERS[2:] + [None])
            state = rng.choice(["serving"] * 4 + ["moving"])
            ranges.append(R(f"{table}{len(ranges)}", low, high, primary, table=table, state=state))
    live = rng.choice([["s1", "s2"], ["s1", "s2", "s3"], ALL_SERVERS, rng.sample(ALL_SERVERS, rng.randint(0, 4))])
    end = rng.randint(1, 80)
    mood = rng.choice(["idle", "busy", "mixed"])  # idle clusters merge, busy ones split and move
    scores = {"idle": [0, 1, 3], "busy": [0, 60, 300, 600, 900], "mixed": [0, 1, 1, 3, 60, 200, 300, 600, 900]}
    sizes = [0, 4 * MiB] if mood == "idle" else [0, 4 * MiB, 4 * MiB, 20 * MiB, 300 * MiB]
    profiles = {r["id"]: (rng.choice(scores[mood]), rng.choices(KEYSPACE, k=rng.randint(0, 12)), rng.choice(sizes),
                          rng.choice([None, rng.randint(0, end)]))
                for r in ranges}
    h = LoadHistory()
    primary_of = {r["id"]: r["primary"] for r in ranges}
    for t in range(0, end + 1, rng.choice([1, 2, 5])):
        for server in ALL_SERVERS:
            rep = {rid: {"reads_s": score if t != dip else 0, "bytes": size, "sample": ks}
                   for rid, (score, ks, size, dip) in profiles.items() if primary_of[rid] == server}
            if rep:
                h.add(t, server, rep)
    kinds = rng.sample(["split", "move", "merge", "created", "hot_key"], rng.randint(0, 5))
    recent = {k: {r["id"]: float(rng.randint(0, end)) for r in ranges if rng.random() < 0.5} for k in kinds}
    s = Settings()
    for key, choices in SETTING_CHOICES:
        s.set(key, draw(st.sampled_from(choices)))
    now = float(end + rng.choice([0, 0, 1, 3, 10]))
    return {"ranges": ranges, "live": live, "history": h, "settings": s, "now": now, "recent": recent,
            "in_flight": draw(st.integers(0, 3))}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_actions_are_always_valid(w: dict) -> None:
    s, now, recent = w["settings"], w["now"], w["recent"]
    acts = plan_actions(w["ranges"], w["live"], w["history"], s, now, recent, w["in_flight"])
    assert acts == plan_actions(w["ranges"], w["live"], w["history"], s, now, recent, w["in_flight"])
    by_id = {r["id"]: r for r in w["ranges"]}
    touched: list[str] = []
    moves_used = 0
    for a in acts:
        r = by_id[a.range]
        assert r["state"] == "serving" and r["primary"] in w["live"]
        touched.append(a.range)
        if a.kind == "split":
            assert a.key is None or (r["low"] < a.key and (r["high"] is None or a.key < r["high"]))
        elif a.kind in ("hot_key", "append_hotspot"):
            assert a.key is not None and a.key >= r["low"] and (r["high"] is None or a.key < r["high"])
        elif a.kind == "move":
            assert a.target in w["live"] and a.target != r["primary"]
            assert now - recent.get("move", {}).get(a.range, -1e9) >= s.move_cooldown_s
            moves_used += 1
        else:
            assert a.kind == "merge"
            b = by_id[a.detail["right"]]
            touched.append(b["id"])
            assert b["table"] == r["table"] and r["high"] == b["low"] == a.key
            assert b["state"] == "serving" and b["primary"] in w["live"] and a.target in (r["primary"], b["primary"])
            for x in (r, b):
                for kind in ("split", "merge", "created"):
                    assert now - recent.get(kind, {}).get(x["id"], -1e9) >= s.merge_cooldown_s
            moves_used += r["primary"] != b["primary"]
    assert len(touched) == len(set(touched))
    assert moves_used <= max(0, s.max_concurrent_moves - w["in_flight"])
    assert sum(a.kind == "split" for a in acts) <= s.max_splits_per_round
    assert sum(a.kind == "merge" for a in acts) <= s.max_merges_per_round
    kinds = [a.kind for a in acts]
    order = {"split": 0, "hot_key": 0, "append_hotspot": 0, "move": 1, "merge": 2}
    assert [order[k] for k in kinds] == sorted(order[k] for k in kinds)
