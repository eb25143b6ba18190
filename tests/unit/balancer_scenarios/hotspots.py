"""Hot spots a split cannot fix: one hot PartitionKey, and append-only / prepend-only writers."""

from __future__ import annotations

from tests.unit.balancer_scenarios import A, R, S, beats

ONE = [R("r1", "", None, "s1")]
TWO = ["s1", "s2"]
THREE = [R("r1", "", "m", "s2"), R("r2", "m", "t", "s1"), R("r3", "t", None, "s1")]


def newest(prefix: str) -> object:
    """Samples of an appender: report t holds 64 keys all above every key of earlier reports."""
    return lambda t: [f"{prefix}{int(t):04d}-{i:02d}" for i in range(64)]


def oldest(t: float) -> list[str]:
    """Samples of a prepender: report t holds 64 keys all below every key of earlier reports."""
    return [f"{1000 - int(t):04d}-{i:02d}" for i in range(64)]


SCENARIOS = [
    S("one hot PartitionKey: a hot_key warning naming it, no split",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample="u*61 a*1 z*2")),
      now=10,
      expect=[A("hot_key", "r1", "u", share=0.953, key_load=762.5, score=800.0)]),

    S("a single distinct key: hot_key with share 1",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample="u*64")),
      now=10,
      expect=[A("hot_key", "r1", "u", share=1.0)]),

    S("the only key is the range's low bound: hot_key, never a split at low",
      given=dict(servers=TWO, ranges=[R("r1", "", "m", "s2"), R("r2", "m", None, "s1")],
                 beats=beats("s1", "r2", 0, 10, rps=800, sample="m*64")),
      now=10,
      expect=[A("hot_key", "r2", "m", share=1.0)]),

    S("a key below the hot_key share still splits (at the hot key, isolating it)",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample="u*48 a*8 z*8")),
      now=10,
      expect=[A("split", "r1", "u", left_share=0.125)]),

    S("the hot_key share can be changed at run time",
      settings={"hot_key_share": "0.7"},
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample="u*48 a*8 z*8")),
      now=10,
      expect=[A("hot_key", "r1", "u", share=0.75)]),

    S("a hot key warned recently is not repeated, and the range is not split either",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample="u*64"),
                 recent={"hot_key": {"r1": 0.0}}),
      now=10,
      expect=[]),

    S("the hot key warning repeats after warn_interval_s",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 60, 70, rps=800, sample="u*64"),
                 recent={"hot_key": {"r1": 10.0}}),
      now=70,
      expect=[A("hot_key", "r1", "u")]),

    S("a huge range with a hot key already warned about still gets its size split",
      given=dict(servers=TWO, ranges=ONE, beats=beats("s1", "r1", 0, 10, rps=800, sample="u*64", mib=400),
                 recent={"hot_key": {"r1": 5.0}}),
      now=10,
      expect=[A("split", "r1", None, trigger="size")]),

    S("append-only writer on the table's last range: advice, no split",
      given=dict(servers=TWO, ranges=THREE, beats=beats("s1", "r3", 0, 10, rps=800, sample=newest("u"))),
      now=10,
      expect=[A("append_hotspot", "r3", "u0010-63", pattern="append", share=1.0)]),

    S("prepend-only writer on the table's first range: advice, no split",
      given=dict(servers=TWO, ranges=[R("r1", "", "m", "s1"), R("r2", "m", None, "s2")],
                 beats=beats("s1", "r1", 0, 10, rps=800, sample=oldest)),
      now=10,
      expect=[A("append_hotspot", "r1", "0990-00", pattern="prepend", share=1.0)]),

    S("increasing keys in a middle range are no append pattern: split at the load median",
      # reports 5..10 are in the window, 6 x 64 distinct keys: the median is report 8's first key
      given=dict(servers=TWO, ranges=THREE, beats=beats("s1", "r2", 0, 10, rps=800, sample=newest("n"))),
      now=10,
      expect=[A("split", "r2", "n0008-00")]),

    S("alternating keys on the last range are no append pattern",
      given=dict(servers=TWO, ranges=ONE,
                 beats=beats("s1", "r1", 0, 10, rps=800,
                             sample=lambda t: ["b"] * 32 + ["y"] * 32 if int(t) % 2 else ["c"] * 32 + ["x"] * 32)),
      now=10,
      expect=[A("split", "r1", "x")]),

    S("an append pattern warned recently: no repeat, no split",
      given=dict(servers=TWO, ranges=THREE, beats=beats("s1", "r3", 0, 10, rps=800, sample=newest("u")),
                 recent={"append_hotspot": {"r3": 1.0}}),
      now=10,
      expect=[]),

    S("append advice needs at least three reports in the window",
      settings={"hot_window_s": "1", "interval_s": "0.5"},
      given=dict(servers=TWO, ranges=THREE,
                 beats=beats("s1", "r3", 0, 8, rps=100, sample=newest("u")) + beats("s1", "r3", 9, 10, rps=800, sample=newest("u"))),
      now=10,
      expect=[A("split", "r3", "u0010-32")]),
]
