"""Moves: hottest server to coldest, preferring a just-split half; limits, cool-down, dead servers."""

from __future__ import annotations

from tests.unit.balancer_scenarios import A, Beat, R, S, beats


def on(server: str, t0: float = 0, t1: float = 10, **rps: float) -> list[Beat]:
    """Steady heartbeats from ``server`` for each ``range id=requests/s``."""
    return [b for rid, x in rps.items() for b in beats(server, rid, t0, t1, rps=x)]


# s1 holds r1 300/s, r2 400/s, r3 150/s = 850; s2 holds r4 50/s. Gap 800: r2 evens it exactly.
MAP = [R("r1", "", "d", "s1"), R("r2", "d", "h", "s1"), R("r3", "h", "p", "s1"), R("r4", "p", None, "s2")]
LOAD = on("s1", r1=300, r2=400, r3=150) + on("s2", r4=50)
TWO = ["s1", "s2"]
# as MAP, with r2 split into halves r5 ["d", "f") and r6 ["f", "h") 10 s ago.
SPLIT_MAP = MAP[:1] + [R("r5", "d", "f", "s1"), R("r6", "f", "h", "s1")] + MAP[2:]
SPLIT_LOAD = on("s1", r1=300, r5=200, r6=200, r3=150) + on("s2", r4=50)

SCENARIOS = [
    S("move from the hottest server to the coldest, the range that evens them best",
      given=dict(servers=TWO, ranges=MAP, beats=LOAD),
      now=10,
      expect=[A("move", "r2", target="s2", source="s1", just_split=False)]),

    S("prefer a just-split half even when another range would even the load better",
      given=dict(servers=TWO, ranges=SPLIT_MAP, beats=SPLIT_LOAD, recent={"split": {"r5": 0.0, "r6": 0.0}}),
      now=10,
      expect=[A("move", "r5", target="s2", just_split=True)]),

    S("a half split long ago is not preferred",
      given=dict(servers=TWO, ranges=SPLIT_MAP, beats=on("s1", 40, 50, r1=300, r5=200, r6=200, r3=150)
                 + on("s2", 40, 50, r4=50), recent={"split": {"r5": 0.0, "r6": 0.0}}),
      now=50,
      expect=[A("move", "r1", target="s2", just_split=False)]),

    S("no move when the servers are balanced (hottest <= 1.25 x mean)",
      given=dict(servers=TWO, ranges=MAP, beats=on("s1", r1=200, r2=200) + on("s2", r4=300)),
      now=10,
      expect=[]),

    S("no move below the noise floor (gap < move_min_rps)",
      given=dict(servers=TWO, ranges=MAP, beats=on("s1", r1=20, r2=20) + on("s2", r4=1)),
      now=10,
      expect=[]),

    S("the noise floor can be lowered at run time",
      settings={"move_min_rps": "10"},
      given=dict(servers=TWO, ranges=MAP, beats=on("s1", r1=20, r2=20) + on("s2", r4=1)),
      now=10,
      expect=[A("move", "r1", target="s2")]),

    S("a lone hot range is never ping-ponged (moving it would not shrink the gap)",
      given=dict(servers=TWO, ranges=[R("r1", "", None, "s1")], beats=on("s1", r1=450)),
      now=10,
      expect=[]),

    S("concurrent-move limit: one move in flight, none planned",
      given=dict(servers=TWO, ranges=MAP, beats=LOAD, in_flight=1),
      now=10,
      expect=[]),

    S("max_concurrent_moves 2 plans two moves, re-evaluating loads after each",
      settings={"max_concurrent_moves": "2"},
      given=dict(servers=["s1", "s2", "s3"],
                 ranges=[R("r1", "", "h", "s1"), R("r2", "h", "p", "s1"), R("r3", "p", None, "s1")],
                 beats=on("s1", r1=300, r2=300, r3=300)),
      now=10,
      expect=[A("move", "r1", target="s2"), A("move", "r2", target="s3")]),

    S("max_concurrent_moves 2 with one in flight plans one",
      settings={"max_concurrent_moves": "2"},
      given=dict(servers=["s1", "s2", "s3"],
                 ranges=[R("r1", "", "h", "s1"), R("r2", "h", "p", "s1"), R("r3", "p", None, "s1")],
                 beats=on("s1", r1=300, r2=300, r3=300), in_flight=1),
      now=10,
      expect=[A("move", "r1", target="s2")]),

    S("move cool-down: a range moved 5 s ago stays; the next best goes",
      given=dict(servers=TWO, ranges=MAP, beats=LOAD, recent={"move": {"r2": 5.0}}),
      now=10,
      expect=[A("move", "r1", target="s2")]),

    S("after the cool-down the range may move again",
      given=dict(servers=TWO, ranges=MAP, beats=LOAD, recent={"move": {"r2": 0.0}}),
      now=10,
      expect=[A("move", "r2", target="s2")]),

    S("a dead server is never a target, however cold",
      # s3 is dead (not live) and owns r4; s2 is live and carries 300/s.
      given=dict(servers=TWO,
                 ranges=[R("r1", "", "d", "s1"), R("r2", "d", "h", "s1"), R("r3", "h", "p", "s2"),
                         R("r4", "p", None, "s3")],
                 beats=on("s1", r1=400, r2=350) + on("s2", r3=300)),
      now=10,
      expect=[A("move", "r2", target="s2")]),

    S("an empty new server is the coldest",
      given=dict(servers=["s1", "s2", "s9"], ranges=MAP, beats=LOAD),
      now=10,
      expect=[A("move", "r2", target="s9")]),

    S("a range split this round is not also moved; another range goes",
      given=dict(servers=TWO, ranges=[R("r1", "", "m", "s1"), R("r2", "m", None, "s1")],
                 beats=beats("s1", "r1", 0, 10, rps=900, sample="a c e g")
                 + beats("s1", "r2", 0, 10, rps=100)),
      now=10,
      expect=[A("split", "r1", "e"), A("move", "r2", target="s2")]),

    S("moves switched off",
      settings={"move": "no"},
      given=dict(servers=TWO, ranges=MAP, beats=LOAD),
      now=10,
      expect=[]),
]
