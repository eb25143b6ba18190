"""Merges: cold, small, adjacent ranges of one table, after the cool-down; never right after a split."""

from __future__ import annotations

from tests.unit.balancer_scenarios import A, Beat, R, S, beats


def cold(server: str, *rids: str, t0: float = 0, t1: float = 100, rps: float = 1, mib: float = 4) -> list[Beat]:
    """Reports every 5 s from ``server``: each range cold (1/s) and small (4 MiB)."""
    return [b for rid in rids for b in beats(server, rid, t0, t1, rps=rps, mib=mib, step=5)]


PAIR = [R("r1", "", "m", "s1"), R("r2", "m", None, "s1")]
TWO = ["s1", "s2"]

SCENARIOS = [
    S("merge two cold, small, adjacent ranges of one table",
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2")),
      now=100,
      expect=[A("merge", "r1", "m", "s1", right="r2", bytes=8 << 20, needs_move=False)]),

    S("across servers: the merge lands on the less loaded server and needs a move",
      given=dict(servers=TWO,
                 ranges=[R("r1", "", "m", "s1"), R("r2", "m", None, "s2"), R("x1", "", None, "s1", table="x"),
                         R("y1", "", None, "s2", table="y")],
                 beats=cold("s1", "r1") + cold("s2", "r2") + beats("s1", "x1", 0, 100, rps=200, step=5)
                 + beats("s2", "y1", 0, 100, rps=150, step=5)),
      now=100,
      expect=[A("merge", "r1", "m", "s2", right="r2", needs_move=True)]),

    S("across servers with the move budget used up: no merge",
      given=dict(servers=TWO, ranges=[R("r1", "", "m", "s1"), R("r2", "m", None, "s2")],
                 beats=cold("s1", "r1") + cold("s2", "r2"), in_flight=1),
      now=100,
      expect=[]),

    S("on one server a merge needs no move budget",
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2"), in_flight=1),
      now=100,
      expect=[A("merge", "r1", "m", "s1")]),

    S("no merge right after a split (cool-down)",
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2"), recent={"split": {"r1": 70.0, "r2": 70.0}}),
      now=100,
      expect=[]),

    S("merge once the split is merge_cooldown_s old",
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2"), recent={"split": {"r1": 40.0, "r2": 40.0}}),
      now=100,
      expect=[A("merge", "r1", "m", "s1")]),

    S("no merge of a range just created or just merged",
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2"), recent={"merge": {"r2": 95.0}}),
      now=100,
      expect=[]),

    S("no merge of a range observed for less than the cool-down (coordinator restarted)",
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2", t0=50)),
      now=100,
      expect=[]),

    S("no merge when one was busy at any time in the cool-down window",
      given=dict(servers=TWO, ranges=PAIR,
                 beats=cold("s1", "r1") + cold("s1", "r2", t1=55) + cold("s1", "r2", t0=60, t1=60, rps=50)
                 + cold("s1", "r2", t0=65)),
      now=100,
      expect=[]),

    S("a busy spell before the cool-down window does not matter",
      given=dict(servers=TWO, ranges=PAIR,
                 beats=cold("s1", "r1") + cold("s1", "r2", t1=25) + cold("s1", "r2", t0=30, t1=30, rps=50)
                 + cold("s1", "r2", t0=35)),
      now=100,
      expect=[A("merge", "r1", "m", "s1")]),

    S("no merge when too big together (>= merge_max_bytes)",
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2", mib=16)),
      now=100,
      expect=[]),

    S("no merge of non-adjacent ranges (the one between is busy)",
      given=dict(servers=TWO, ranges=[R("r1", "", "g", "s1"), R("r2", "g", "p", "s1"), R("r3", "p", None, "s1")],
                 beats=cold("s1", "r1", "r3") + cold("s1", "r2", rps=40)),
      now=100,
      expect=[]),

    S("no merge across tables",
      given=dict(servers=TWO, ranges=[R("a1", "", None, "s1", table="a"), R("b1", "", None, "s1", table="b")],
                 beats=cold("s1", "a1", "b1")),
      now=100,
      expect=[]),

    S("three cold ranges: one merge per round, the leftmost pair",
      given=dict(servers=TWO, ranges=[R("r1", "", "g", "s1"), R("r2", "g", "p", "s1"), R("r3", "p", None, "s1")],
                 beats=cold("s1", "r1", "r2", "r3")),
      now=100,
      expect=[A("merge", "r1", "g", "s1", right="r2")]),

    S("more merges per round when allowed: disjoint pairs",
      settings={"max_merges_per_round": "5"},
      given=dict(servers=TWO, ranges=[R("r1", "", "g", "s1"), R("r2", "g", "p", "s1"), R("r3", "p", "t", "s1"),
                                      R("r4", "t", None, "s1")],
                 beats=cold("s1", "r1", "r2", "r3", "r4")),
      now=100,
      expect=[A("merge", "r1", "g", "s1", right="r2"), A("merge", "r3", "t", "s1", right="r4")]),

    S("a range in another operation is not merged",
      given=dict(servers=TWO, ranges=[R("r1", "", "m", "s1"), R("r2", "m", None, "s1", state="splitting")],
                 beats=cold("s1", "r1", "r2")),
      now=100,
      expect=[]),

    S("merges switched off",
      settings={"merge": "0"},
      given=dict(servers=TWO, ranges=PAIR, beats=cold("s1", "r1", "r2")),
      now=100,
      expect=[]),
]
