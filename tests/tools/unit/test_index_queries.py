"""The drills' judge of queries through an index (cli/workload/verify/index.py): read-your-writes against the
history, rows outside the filter, and what a later or unknown write excuses."""

from __future__ import annotations

from cli.workload.verify.history import Op
from cli.workload.verify.index import IndexQuery, check_queries, index_lines, index_summary

K = ("p00", "a")


def w(i: int, value: str | None, start: float, end: float | None, outcome: str = "ok", key: tuple = K) -> Op:
    return Op(i, key, "write" if value is not None else "delete", value, start=start, end=end, outcome=outcome)


def q(rows: dict, start: float = 10.0, end: float = 11.0, lo: str = "t1-", hi: str = "t1.") -> IndexQuery:
    return IndexQuery(lo, hi, start, end, rows)


def test_an_acknowledged_write_must_be_in_the_answer() -> None:
    h = [w(1, "t1-5", 1.0, 2.0)]
    assert check_queries(h, [q({K: "t1-5"})])[0]["ryw"] == 0
    counts, fails = check_queries(h, [q({})])
    assert counts["ryw"] == 1 and fails[0].key == K and fails[0].window == (1.0, 11.0)
    assert check_queries(h, [q({K: "t1-4"})])[0]["ryw"] == 1  # an older value
    assert check_queries(h, [q({}, start=1.5)])[0]["ryw"] == 0  # not acknowledged before the query began
    assert check_queries(h, [q({}, lo="t2-", hi="t2.")])[0]["ryw"] == 0  # outside the filter


def test_a_later_or_unknown_mutation_excuses_it() -> None:
    base = [w(1, "t1-5", 1.0, 2.0)]
    for later in (w(2, "t1-6", 10.5, 12.0), w(2, None, 10.5, None, "unknown"), w(2, "t3-1", 3.0, None, "unknown"),
                  w(2, "t1-6", 1.5, 1.9, "ok")):  # concurrent with it: may be ordered after it
        assert check_queries([*base, later], [q({})])[0]["ryw"] == 0, later
    assert check_queries([*base, w(2, "t1-6", 10.5, 12.0, "fail")], [q({})])[0]["ryw"] == 1
    assert check_queries([*base, w(2, "t1-6", 11.5, 12.0)], [q({})])[0]["ryw"] == 1  # began after the query
    assert check_queries([*base, w(2, None, 3.0, 4.0)], [q({})])[0]["ryw"] == 0  # deleted before it


def test_a_row_outside_the_filter_is_wrong() -> None:
    counts, fails = check_queries([], [q({K: "t2-1", ("p01", "b"): "t1-1", ("p02", "c"): None})])
    assert counts["wrong"] == 2 and {f.key for f in fails} == {K, ("p02", "c")}


def test_lines_and_summary() -> None:
    counts, fails = check_queries([w(1, "t1-5", 1.0, 2.0)], [q({})])
    v = {"indexes": 1, **counts, "errors": 2, "check": {"differences": 0, "entries": 5123},
         "failures": [{"kind": f.kind, "key": ["p00", "a"], "text": f.text, "window": list(f.window)} for f in fails]}
    assert index_summary(v) == ("index: 1 index, 1 queries through it (0 not, 2 failed), 1 read-your-writes "
                                "violations, 0 wrong rows; check: 0 differences (5,123 entries)")
    lines = index_lines(v, [{"t": 9.0, "until": 9.5, "what": "kill -9 ps-1"}])
    assert lines[0].startswith("index FAIL: READ-YOUR-WRITES key ['p00', 'a'] v ge 't1-' and v lt 't1.'")
    assert any("kill -9 ps-1" in x for x in lines)
