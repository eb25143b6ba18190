"""coordinator/replicas/sets.py: where replicas go, who is promoted, and how the replica and in-sync sets
change. Pure functions over plain data, so the tests are tables."""

from __future__ import annotations

import itertools

import pytest

from coordinator.replicas.sets import (
    after_promotion,
    choose_replicas,
    config_token,
    insync_change,
    promotion,
    without,
)
from rangetable.messages import is_replicated


def test_is_replicated() -> None:
    assert is_replicated({"id": "r", "primary": "a", "replicas": ["a"]})
    assert not is_replicated({"id": "r", "primary": "a"})


@pytest.mark.parametrize(("n", "counts", "zones", "keep", "want"), [
    # the fewest replicas first, ties by the smaller id
    (3, {"a": 0, "b": 0, "c": 0}, None, None, ["a", "b", "c"]),
    (2, {"a": 5, "b": 1, "c": 2, "d": 0}, None, None, ["d", "b"]),
    (2, {"c": 1, "b": 1, "a": 1}, None, None, ["a", "b"]),
    (2, {"ps-2": 0, "ps-10": 0, "ps-1": 0}, None, None, ["ps-1", "ps-10"]),
    # fewer servers than replicas: all of them; none asked or none alive
    (3, {"a": 0, "b": 0}, None, None, ["a", "b"]),
    (0, {"a": 0}, None, None, []),
    (3, {}, None, None, []),
    # keep first (in its order), and only the live ones, at most n
    (2, {"a": 0, "b": 0, "c": 9}, None, ["c"], ["c", "a"]),
    (3, {"a": 0, "b": 0, "c": 9}, None, ["x", "c"], ["c", "a", "b"]),
    (2, {"a": 0, "b": 0, "c": 0}, None, ["c", "b", "a"], ["c", "b"]),
    (2, {"a": 0, "b": 0, "c": 0}, None, ["b"], ["b", "a"]),
    # zones: distinct zones before a second replica in one zone
    (2, {"a": 0, "b": 0, "c": 0}, {"a": "z1", "b": "z1", "c": "z2"}, None, ["a", "c"]),
    (3, {"a": 0, "b": 0, "c": 0}, {"a": "z1", "b": "z1", "c": "z2"}, None, ["a", "c", "b"]),
    # a kept replica's zone is used already
    (2, {"a": 0, "b": 0, "c": 5}, {"a": "z1", "b": "z1", "c": "z2"}, ["a"], ["a", "c"]),
    # zone beats load: the emptier server in a used zone waits
    (2, {"a": 0, "b": 0, "c": 7}, {"a": "z1", "b": "z1", "c": "z2"}, None, ["a", "c"]),
    # a server without a label is a zone of its own
    (3, {"a": 0, "b": 0, "c": 0, "d": 0}, {"a": "z1", "b": "z1", "c": "z1"}, None, ["a", "d", "b"]),
    # a label equal to another server's id is just a label
    (2, {"a": 0, "b": 0}, {"a": "b"}, None, ["a", "b"]),
])
def test_choose_replicas(n: int, counts: dict[str, int], zones: dict[str, str] | None, keep: list[str] | None,
                         want: list[str]) -> None:
    assert choose_replicas(n, counts, zones, keep) == want


def test_choose_replicas_properties() -> None:
    """Over every small input: distinct, live, at most n, keep's live servers first, and as many zones as
    possible."""
    servers = ["a", "b", "c", "d"]
    zone_sets = [{}, {"a": "z1", "b": "z1"}, {"a": "z1", "b": "z1", "c": "z2", "d": "z2"}]
    for n in range(0, 5):
        for alive in range(0, 5):
            for loads in itertools.product([0, 1], repeat=alive):
                counts = dict(zip(servers[:alive], loads, strict=True))
                for zones in zone_sets:
                    for keep in ([], ["d"], ["b", "a"]):
                        got = choose_replicas(n, counts, zones, keep)
                        assert len(got) == len(set(got)) == min(n, alive)
                        assert set(got) <= set(counts)
                        kept = [s for s in keep if s in counts][:n]
                        assert got[:len(kept)] == kept
                        all_zones = {zones.get(s, s) for s in counts}
                        if not kept:
                            assert len({zones.get(s, s) for s in got}) == min(len(got), len(all_zones))


REC = {"id": "r", "primary": "a", "epoch": 3, "replicas": ["a", "b", "c"], "insync": ["a", "b", "c"]}


@pytest.mark.parametrize(("rec", "positions", "want"), [
    (REC, {"b": 5, "c": 7}, "c"),  # the furthest
    (REC, {"a": 5, "b": 5, "c": 4}, "a"),  # a tie: the current primary (it restarted)
    (REC, {"b": 5, "c": 5}, "b"),  # a tie without it: the smaller id
    ({**REC, "replicas": ["ps-1", "ps-10", "ps-2"], "insync": ["ps-1", "ps-10", "ps-2"], "primary": "ps-2"},
     {"ps-1": 3, "ps-10": 3}, "ps-1"),
    ({**REC, "replicas": ["ab", "a"], "insync": ["ab", "a"], "primary": "x"}, {"ab": 1, "a": 1}, "a"),
    ({**REC, "insync": ["a", "b"]}, {"b": 2, "c": 99}, "b"),  # an out-of-sync copy never wins
    ({**REC, "insync": ["a", "b"]}, {"c": 99}, None),  # no in-sync replica answered
    (REC, {}, None),
    ({k: v for k, v in REC.items() if k != "insync"}, {"a": 1, "b": 1}, None),
    ({**REC, "insync": ["a"]}, {"a": 0}, "a"),
])
def test_promotion(rec: dict, positions: dict[str, int], want: str | None) -> None:
    assert promotion(rec, positions) == want


def test_promotion_does_not_depend_on_order() -> None:
    for perm in itertools.permutations(["a", "b", "c", "d"]):
        rec = {"primary": "c", "replicas": list(perm), "insync": list(perm)}
        assert promotion(rec, {"a": 4, "b": 4, "d": 4}) == "a"
        assert promotion(rec, {"a": 4, "b": 4, "c": 4, "d": 4}) == "c"
        assert promotion(rec, dict(reversed(list({"a": 4, "b": 5, "d": 5}.items())))) == "b"


@pytest.mark.parametrize(("rec", "primary", "positions", "want"), [
    (REC, "b", {"b": 5, "c": 5}, {"primary": "b", "replicas": ["b", "c"], "insync": ["b", "c"]}),
    (REC, "c", {"a": 4, "b": 5, "c": 6}, {"primary": "c", "replicas": ["c", "a", "b"], "insync": ["c", "a", "b"]}),
    # an out-of-sync replica that answered stays a replica, not in sync
    ({**REC, "insync": ["a", "b"]}, "b", {"b": 5, "c": 9},
     {"primary": "b", "replicas": ["b", "c"], "insync": ["b"]}),
    # one that did not answer is dropped (it may hold batches the new primary never had)
    ({**REC, "replicas": ["a", "b", "c", "d"], "insync": ["a", "b", "c", "d"]}, "d", {"d": 1, "b": 1},
     {"primary": "d", "replicas": ["d", "b"], "insync": ["d", "b"]}),
    # the primary is always in sync and first
    (REC, "a", {"a": 1}, {"primary": "a", "replicas": ["a"], "insync": ["a"]}),
])
def test_after_promotion(rec: dict, primary: str, positions: dict[str, int], want: dict) -> None:
    assert after_promotion(rec, primary, positions) == want


@pytest.mark.parametrize(("rec", "server", "want"), [
    (REC, "b", {"replicas": ["a", "c"], "insync": ["a", "c"]}),
    ({**REC, "insync": ["a", "c"]}, "b", {"replicas": ["a", "c"], "insync": ["a", "c"]}),
    (REC, "x", {"replicas": ["a", "b", "c"], "insync": ["a", "b", "c"]}),
    ({"replicas": ["a", "b"]}, "b", {"replicas": ["a"], "insync": []}),
])
def test_without(rec: dict, server: str, want: dict) -> None:
    assert without(rec, server) == want


@pytest.mark.parametrize(("rec", "lagging", "joining", "want"), [
    (REC, [], [], None),
    (REC, ["b"], [], ["a", "c"]),
    (REC, ["b", "c"], [], ["a"]),
    (REC, ["a"], [], None),  # the primary never leaves
    (REC, ["x"], [], None),
    ({**REC, "insync": ["a"]}, [], ["c", "b"], ["a", "c", "b"]),
    ({**REC, "insync": ["a"]}, [], ["b", "b"], ["a", "b"]),
    ({**REC, "insync": ["a"]}, [], ["x"], None),  # not a replica (dropped meanwhile)
    ({**REC, "insync": ["a"]}, ["b"], ["b"], None),  # lagging wins over a stale "caught up"
    ({**REC, "insync": ["a", "b"]}, ["b"], ["c"], ["a", "c"]),
    ({**REC, "insync": ["a", "b"]}, [], ["b"], None),  # already in
])
def test_insync_change(rec: dict, lagging: list[str], joining: list[str], want: list[str] | None) -> None:
    assert insync_change(rec, lagging, joining) == want


@pytest.mark.parametrize(("rec", "joining", "dead", "want"), [
    ({**REC, "insync": ["a"]}, ["b", "c"], ["b"], ["a", "c"]),  # a dead server never joins
    ({**REC, "insync": ["a"]}, ["b"], ["b"], None),
    ({**REC, "insync": ["a"]}, ["b"], ["c"], ["a", "b"]),
    ({**REC, "insync": ["a", "b"]}, [], ["b"], None),  # leaving is the lag report's (or the failover's) decision
])
def test_a_dead_server_never_joins_the_insync_set(rec: dict, joining: list[str], dead: list[str],
                                                  want: list[str] | None) -> None:
    assert insync_change(rec, [], joining, dead) == want


def test_config_token() -> None:
    """One token per (range, epoch), the same on every call; unguessable without the secret."""
    t = config_token(b"s" * 40, "r1", 3)
    assert t == config_token(b"s" * 40, "r1", 3) and len(t) == 32
    assert len({t, config_token(b"s" * 40, "r1", 4), config_token(b"s" * 40, "r2", 3),
                config_token(b"x" * 40, "r1", 3)}) == 4


def test_after_promotion_leaves_out_of_sync_a_replica_below_the_old_commit_point() -> None:
    rec = {"primary": "a", "replicas": ["a", "b", "c"], "insync": ["a", "b", "c"]}
    # a's last report said batch 90 was committed; c answered the seal at 40: it lost committed batches
    assert after_promotion(rec, "b", {"b": 100, "c": 40}, committed=90) == {
        "primary": "b", "replicas": ["b", "c"], "insync": ["b"]}
    assert after_promotion(rec, "b", {"b": 100, "c": 95}, committed=90)["insync"] == ["b", "c"]
