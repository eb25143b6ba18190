"""Load and size splits: the sustained window, the load median, the size threshold, the limits."""

from __future__ import annotations

from tests.unit.balancer_scenarios import A, R, S, beats

EVEN = "a*16 f*16 m*16 x*16"  # four keys, equal load: the median is m
ONE = [R("r1", "", None, "s1")]
TWO = ["s1", "s2"]

SCENARIOS = [
    S("split when hot for the whole sustained window",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[A("split", "r1", "m", trigger="load", hot_s=10.0, left_share=0.5)]),

    S("no split when hot for less than the window (5 s of 6)",
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 4, rps=100, sample=EVEN) + beats("s1", "r1", 5, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[]),

    S("split when hot for exactly the window (first hot report 6 s ago)",
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 3, rps=100, sample=EVEN) + beats("s1", "r1", 4, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[A("split", "r1", "m", hot_s=6.0)]),

    S("a dip in the middle restarts the clock",
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 5, rps=800, sample=EVEN) + beats("s1", "r1", 6, 6, rps=300, sample=EVEN)
                 + beats("s1", "r1", 7, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[]),

    S("after a dip, hot for a full window again: split",
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 5, rps=800, sample=EVEN) + beats("s1", "r1", 6, 6, rps=300, sample=EVEN)
                 + beats("s1", "r1", 7, 13, rps=800, sample=EVEN)),
      now=13,
      expect=[A("split", "r1", "m", hot_s=6.0)]),

    S("a load exactly at hot_rps is not above it",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=500, sample=EVEN)),
      now=10,
      expect=[]),

    S("skewed samples: split at the load median, not the key-count median",
      # cumulative load a 2, b 4, c 6, d 46, e 56, f 64 of 64: cutting before e leaves 46 | 18,
      # the most even cut (before d: 6 | 58).
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 10, rps=900, sample="a*2 b*2 c*2 d*40 e*10 f*8")),
      now=10,
      expect=[A("split", "r1", "e", left_share=0.719)]),

    S("median equal to the range's low bound: take the next distinct key above it",
      # keys of ["m", ∞): m 40, q 10, t 14 -> the weighted median is m itself, so split at q.
      given=dict(servers=TWO, ranges=[R("r1", "", "m", "s1"), R("r2", "m", None, "s1")],
                 beats=beats("s1", "r2", 0, 10, rps=900, sample="m*40 q*10 t*14")),
      now=10,
      expect=[A("split", "r2", "q", left_share=0.625)]),

    S("sampled keys outside the range's bounds are ignored",
      given=dict(servers=TWO, ranges=[R("r1", "", "m", "s2"), R("r2", "m", None, "s1")],
                 beats=beats("s1", "r2", 0, 10, rps=900, sample="a*30 b*30 n*16 p*16 r*16 u*16")),
      now=10,
      expect=[A("split", "r2", "r", distinct_keys=4)]),

    S("windows count from the first hot report: the setting can be lowered at run time",
      settings={"hot-window-s": "3"},
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 6, rps=100, sample=EVEN) + beats("s1", "r1", 7, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[A("split", "r1", "m", hot_s=3.0)]),

    S("entities and busy refusals count in the load score",
      # 300 reads/s + 200 busy/s + 10000 entities/s / 100 = 600 > 500
      given=dict(servers=TWO, ranges=ONE,
                 beats=[(float(t), "s1", {"r1": {"reads_s": 300.0, "busy_s": 200.0, "entities_s": 10000.0,
                                                 "bytes": 0, "sample": ["a", "z"]}}) for t in range(11)]),
      now=10,
      expect=[A("split", "r1", "z", score=600.0)]),

    S("a hot range with no sampled keys (full scans) splits at its data median",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample="")),
      now=10,
      expect=[A("split", "r1", None, trigger="load", distinct_keys=0)]),

    S("size split at the data median",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=10, sample=EVEN, mib=300)),
      now=10,
      expect=[A("split", "r1", None, trigger="size", bytes=300 << 20)]),

    S("no size split below the threshold",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=10, sample=EVEN, mib=255)),
      now=10,
      expect=[]),

    S("size threshold changed at run time",
      settings={"split_size_bytes": "200MiB"},
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=10, sample=EVEN, mib=255)),
      now=10,
      expect=[A("split", "r1", None, trigger="size")]),

    S("at most max_splits_per_round splits, hottest first",
      given=dict(servers=["s1"],
                 ranges=[R("r1", "", "g", "s1"), R("r2", "g", "p", "s1"), R("r3", "p", None, "s1")],
                 beats=beats("s1", "r1", 0, 10, rps=600, sample="a c e")
                 + beats("s1", "r2", 0, 10, rps=900, sample="h j l")
                 + beats("s1", "r3", 0, 10, rps=700, sample="q s u")),
      now=10,
      expect=[A("split", "r2", "j"), A("split", "r3", "s")]),

    S("splits switched off",
      settings={"split": "off"},
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample=EVEN, mib=300)),
      now=10,
      expect=[]),

    S("balancer switched off",
      settings={"enabled": "false"},
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[]),

    S("a range in a move is left alone",
      given=dict(servers=TWO, ranges=[R("r1", "", None, "s1", state="moving")],
                 beats=beats("s1", "r1", 0, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[]),

    S("a range of a dead server is left to failover",
      given=dict(servers=["s2"], ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample=EVEN)),
      now=10,
      expect=[]),

    S("stale reports (the last one older than the window) are ignored",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample=EVEN)),
      now=17,
      expect=[]),

    S("a gap in the reports longer than the window breaks the hot run",
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 3, rps=800, sample=EVEN) + beats("s1", "r1", 11, 14, rps=800, sample=EVEN)),
      now=14,
      expect=[]),
]
