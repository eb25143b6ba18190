"""The pure comparison of an index with its base table (frontend/indexes/check.py): sums per base range,
the three kinds of difference, rows in flight, the second look, the fixes and the report."""

from __future__ import annotations

from typing import Any

from frontend.indexes.check import (
    LISTED,
    Diff,
    differences,
    fixes,
    look,
    packed,
    persisting,
    range_of,
    report,
    sums,
)
from rangetable.edm import DOUBLE, INT32, STRING
from rangetable.index_def import IndexDef
from rangetable.index_keys import entry_ops, entry_rk

IDX = IndexDef("T", "ByQty", ("qty",), ("name",))
C = 100  # the cursor's Timestamp


def row(pk: str, rk: str, qty: int | None, name: str = "n", ts: int = 50) -> list:
    props: dict[str, Any] = {"name": [STRING, name]}
    if qty is not None:
        props["qty"] = [INT32, qty]
    return [pk, rk, ts, props]


def entries_of(rows: list[list]) -> list[list]:
    """The entries a right index holds for ``rows`` (with its progress row)."""
    out = [["", "progress", 1, {"state": [STRING, "{}"]}]]
    for pk, rk, _, props in rows:
        out += [[epk, erk, 7, kept] for epk, erk, kept in entry_ops(IDX, pk, rk, None, props)]
    return out


ROWS = [row(f"p{i % 4}", f"r{i:03d}", i % 5, f"n{i}") for i in range(40)] + [row("p1", "noqty", None)]


def test_a_right_index_has_no_difference_and_equal_sums() -> None:
    lk = look(IDX, ROWS, entries_of(ROWS), C)
    assert lk.base_rows == 41 and len(lk.expected) == 40 and lk.expected == lk.actual and not lk.in_flight
    for lows in ([""], ["", "p2"], ["", "p1", "p2", "p3"], ["a", "p2"]):
        assert sums(lk.expected, lows) == sums(lk.actual, lows)
        assert differences(lk, lows) == ([], [])
    assert sum(c for c, _ in sums(lk.actual, ["", "p2"])) == 40


def test_each_kind_of_difference_is_found_in_its_range_only() -> None:
    ents = entries_of(ROWS)
    missing = next(e for e in ents if e[1] == entry_rk("p0", "r000"))
    ents.remove(missing)
    wrong = next(e for e in ents if e[1] == entry_rk("p3", "r003"))
    wrong[3] = {"name": [STRING, "other"]}
    extra = entry_ops(IDX, "p3", "gone", None, row("p3", "gone", 9)[3])[0]
    ents.append([extra[0], extra[1], 7, extra[2]])
    lows = ["", "p1", "p2", "p3"]
    differing, diffs = differences(look(IDX, ROWS, ents, C), lows)
    assert differing == [0, 3]
    assert [(d.kind, d.base) for d in diffs] in ([("missing", ("p0", "r000")), ("wrong", ("p3", "r003")),
                                                  ("extra", ("p3", "gone"))],
                                                 [("missing", ("p0", "r000")), ("extra", ("p3", "gone")),
                                                  ("wrong", ("p3", "r003"))])
    by_kind = {d.kind: d for d in diffs}
    assert by_kind["missing"].value == {"name": [STRING, "n0"]} and by_kind["extra"].value is None
    assert by_kind["wrong"].value == {"name": [STRING, "n3"]}
    assert fixes(diffs) == {(missing[0], missing[1]): {"name": [STRING, "n0"]},
                            (wrong[0], wrong[1]): {"name": [STRING, "n3"]}, (extra[0], extra[1]): None}
    rep = report(diffs)
    assert rep["differences"] == 3 and rep["missing"] == [["p0", "r000"]] and rep["extra"] == [["p3", "gone"]]
    assert rep["wrong"] == [["p3", "r003"]]


def test_an_entry_under_the_wrong_value_is_missing_there_and_extra_here() -> None:
    rows = [row("p", "r", 1)]
    stale = entry_ops(IDX, "p", "r", None, row("p", "r", 2)[3])[0]  # the entry of the row's old value
    ents = [[stale[0], stale[1], 7, stale[2]]]
    _, diffs = differences(look(IDX, rows, ents, C), [""])
    assert sorted(d.kind for d in diffs) == ["extra", "missing"]


def test_rows_changed_after_the_cursor_are_in_flight_on_both_sides() -> None:
    rows = [row("p", "a", 1), row("p", "b", 2, ts=C + 1), row("p", "c", 3, ts=C)]
    ents = entries_of([row("p", "a", 1), row("p", "b", 7)])  # b's entry still has its value of before the cursor
    lk = look(IDX, rows, ents, C)
    assert lk.in_flight == {("p", "b")} and lk.base_rows == 2
    _, diffs = differences(lk, [""])
    assert [(d.kind, d.base) for d in diffs] == [("missing", ("p", "c"))]


def test_the_progress_row_and_rows_without_the_property_make_no_entry() -> None:
    lk = look(IDX, [row("p", "x", None)], [["", "progress", 1, {}]], C)
    assert lk.expected == {} and lk.actual == {} and lk.base_rows == 1


def test_values_compare_by_type_and_bits() -> None:
    idx = IndexDef("T", "All", ("qty",), None)
    props: dict[str, Any] = {"qty": [INT32, 1], "x": [DOUBLE, 0.0]}
    base = [["p", "r", 1, props]]
    ent = entry_ops(idx, "p", "r", None, props)[0]
    for bad in ({"qty": [INT32, 1], "x": [DOUBLE, -0.0]}, {"qty": [INT32, 1]}, {"qty": [INT32, 1], "x": [INT32, 0]}):
        _, diffs = differences(look(idx, base, [[ent[0], ent[1], 7, bad]], C), [""])
        assert [d.kind for d in diffs] == ["wrong"]
    same = {"x": (DOUBLE, 0.0), "qty": (INT32, 1)}  # tuples and another order: the same value
    assert packed(same) == packed(props)


def test_range_of_buckets_by_base_partition_key() -> None:
    lows = ["", "m", "t"]
    assert [range_of(lows, ("S", entry_rk(pk, "r"))) for pk in ("", "a", "m", "s", "t", "zz")] == [0, 0, 1, 1, 2, 2]
    assert range_of(["b"], ("S", entry_rk("a", "r"))) == 0  # below the first low (the map covers it anyway)


def test_only_differences_seen_twice_persist() -> None:
    a, b, c = (Diff("extra", ("S1", entry_rk("p", k))) for k in "abc")
    assert persisting([a, b], [Diff("missing", b.key, {}), c]) == [Diff("missing", b.key, {})]
    assert persisting([], [a]) == [] and persisting([a], []) == []


def test_a_report_lists_the_first_keys_of_each_kind() -> None:
    diffs = [Diff("missing", ("S", entry_rk("p", f"r{i:04d}")), {}) for i in range(LISTED + 5)]
    rep = report(diffs)
    assert rep["differences"] == LISTED + 5 and len(rep["missing"]) == LISTED and rep["extra"] == rep["wrong"] == []
    assert report([]) == {"differences": 0, "missing": [], "extra": [], "wrong": []}
