"""Tests for rangetable.index_plan: which index a filter uses, and that its scans never miss a match."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, GUID, INT32, INT64, STRING
from rangetable.filter import And, Compare, Const, Node, Not, Or, compile_filter, parse_filter
from rangetable.filter_syntax import chain
from rangetable.index_def import IndexDef
from rangetable.index_keys import MAX_CHARS, encode_value, entry_key, entry_pk, entry_rk
from rangetable.index_plan import MAX_SCANS, IndexPlan, choose, plan_index


def ix(name: str, *on: str, state: str = "ready") -> IndexDef:
    return IndexDef("orders", name, on, (), state)


BY_QTY, BY_CUST_QTY, BY_NAME = ix("byQty", "qty"), ix("byCustQty", "cust", "qty"), ix("byName", "name")
DEFS = [BY_QTY, BY_CUST_QTY, BY_NAME]


def key_of(idx: IndexDef, props: dict[str, Any], pk: str = "p", rk: str = "r") -> bytes:
    epk = entry_pk(idx, props)
    assert epk is not None
    return entry_key(epk, entry_rk(pk, rk))


# (filter, chosen index or None, scans, describe) -- scans None: not checked
CHOOSE_CASES: list[tuple[str, IndexDef | None, int | None, str | None]] = [
    ("qty ge 2 and qty le 5", BY_QTY, 1, "index byQty of orders: 1 scan, qty in [2, 5]"),
    ("qty eq 2 or qty eq 7", BY_QTY, 2, "index byQty of orders: 2 scans, qty = 2 or qty = 7"),
    ("qty gt 2", BY_QTY, 1, "index byQty of orders: 1 scan, qty > 2"),
    ("qty lt 2L", BY_QTY, 1, "index byQty of orders: 1 scan, qty < 2L"),
    ("cust eq 'a' and qty gt 3", BY_CUST_QTY, 1, "index byCustQty of orders: 1 scan, cust = 'a' and qty > 3"),
    ("qty gt 3 and cust eq 'a'", BY_CUST_QTY, 1, None),  # more leading equalities
    ("cust eq 'a'", BY_CUST_QTY, 1, "index byCustQty of orders: 1 scan, cust = 'a'"),
    ("(cust eq 'a' or cust eq 'b') and qty eq 1", BY_CUST_QTY, 2, None),
    ("name eq 'x' and qty ne 3", BY_NAME, 1, None),  # an `and` with one bounded side
    ("name eq 'x' and not (qty eq 3)", BY_NAME, 1, None),
    ("name eq 'x' and RowKey eq 'r'", BY_NAME, 1, None),
    ("qty gt 5 and qty lt 2", BY_QTY, 0, "index byQty of orders: 0 scans, nothing can match"),
    ("name gt 'b' and name lt 'a'", BY_NAME, 0, None),
    ("qty eq 1 and qty eq 'x'", BY_QTY, 0, None),  # two groups never meet
    ("qty eq 1 or name eq 'x'", None, None, None),  # each branch bounds a different index
    ("qty ne 3", None, None, None),
    ("not (qty eq 3)", None, None, None),
    ("other eq 3", None, None, None),
    ("qty eq 3 or other eq 3", None, None, None),
    ("PartitionKey eq 'a'", None, None, None),
    ("false", None, None, None),  # matches nothing whatever the index: the base planner's job
    ("true", None, None, None),
]


@pytest.mark.parametrize(("text", "index", "n", "text_plan"), CHOOSE_CASES)
def test_choose(text: str, index: IndexDef | None, n: int | None, text_plan: str | None) -> None:
    p = choose(parse_filter(text), DEFS)
    if index is None:
        assert p is None
        return
    assert p is not None and p.index == index
    if n is not None:
        assert len(p.scans) == n
    if text_plan is not None:
        assert p.describe() == text_plan


def test_no_filter_no_index() -> None:
    assert choose(None, DEFS) is None
    assert choose(parse_filter("qty eq 1"), []) is None


def test_non_ready_indexes_are_never_chosen() -> None:
    building = [ix("byQty", "qty", state="building"), ix("byCustQty", "cust", "qty", state="building")]
    for text in ("qty eq 1", "cust eq 'a' and qty eq 1", "qty gt 5 and qty lt 2"):
        assert choose(parse_filter(text), building) is None
    ready = ix("late", "qty")
    p = choose(parse_filter("cust eq 'a' and qty eq 1"), [*building, ready])
    assert p is not None and p.index == ready


def test_ties_go_to_fewer_scans_then_the_first_declared() -> None:
    a, b = ix("a", "qty"), ix("b", "name")
    p = choose(parse_filter("(qty gt 1 and qty lt 3 or qty gt 5) and name gt 'x'"), [a, b])
    assert p is not None and p.index == b
    p = choose(parse_filter("qty eq 1 and name eq 'x'"), [a, b])
    assert p is not None and p.index == a


def test_scan_bounds() -> None:
    """Strict bounds on exact encodings exclude the literal; numbers and truncated strings keep it."""
    one = encode_value([STRING, "m"]).encode()
    p = plan_index(parse_filter("name gt 'm'"), BY_NAME)
    assert p is not None and p.scans[0].lo == one + b"\xff" and p.scans[0].hi == b"S\xff"
    p = plan_index(parse_filter("name lt 'm'"), BY_NAME)
    assert p is not None and p.scans[0].lo == b"S" and p.scans[0].hi == one
    long = "m" * MAX_CHARS
    p = plan_index(parse_filter(f"name gt '{long}'"), BY_NAME)
    assert p is not None and p.contains(key_of(BY_NAME, {"name": [STRING, long + "x"]}))
    p = plan_index(parse_filter("qty gt 9007199254740992.0"), BY_QTY)
    assert p is not None and p.contains(key_of(BY_QTY, {"qty": [INT64, 2**53 + 1]}))
    p = plan_index(parse_filter("cust eq 'a' and qty lt 3"), BY_CUST_QTY)
    assert p is not None
    assert p.contains(key_of(BY_CUST_QTY, {"cust": [STRING, "a"], "qty": [INT32, 2]}))
    assert not p.contains(key_of(BY_CUST_QTY, {"cust": [STRING, "a"], "qty": [STRING, "2"]}))
    assert not p.contains(key_of(BY_CUST_QTY, {"cust": [STRING, "a"]}))
    assert not p.contains(key_of(BY_CUST_QTY, {"cust": [STRING, "ab"], "qty": [INT32, 2]}))


def test_literals_that_never_compare_true_give_no_scan() -> None:
    for node in (Compare("eq", "qty", DOUBLE, float("nan")), Compare("gt", "qty", DOUBLE, float("nan")),
                 Compare("eq", "qty", 99, 1)):
        p = plan_index(node, BY_QTY)
        assert p is not None and p.scans == ()
    assert plan_index(Compare("ne", "qty", DOUBLE, float("nan")), BY_QTY) is None


def test_many_points_fall_back_to_a_hull() -> None:
    node = chain(Or, [Compare("eq", "qty", INT32, i) for i in range(MAX_SCANS + 10)])
    p = plan_index(node, BY_QTY)
    assert p is not None and len(p.scans) == 1
    assert all(p.contains(key_of(BY_QTY, {"qty": [INT32, i]})) for i in (0, 17, MAX_SCANS + 9))
    node = chain(Or, [Compare("eq", "qty", INT32, i) for i in range(100)])
    p = plan_index(And(node, node), BY_QTY)
    assert p is not None and len(p.scans) <= 100
    assert all(p.contains(key_of(BY_QTY, {"qty": [INT32, i]})) for i in range(100))
    assert p.describe().endswith("(97 more)")


# --- soundness: no scan ever misses a match ----------------------------------------------------

PROPS = ("a", "b", "c")
VALUES: list[list[Any]] = [
    *([c, v] for c in (INT32, INT64) for v in (-2, 0, 1, 3)),
    [INT64, 2**53], [INT64, 2**53 + 1], [INT64, -(2**53) - 1], [INT64, 2**63 - 1],
    *([DOUBLE, v] for v in (-0.0, 0.0, 0.5, 1.0, 3.0, 2.0**53, float("inf"), float("-inf"), float("nan"))),
    *([STRING, v] for v in ("", "a", "ab", "b", "\x00", "\x01x", "\x02", "é", "\ud7ff", "\ue000", "\U0001f600",
                            "z" * MAX_CHARS, "z" * MAX_CHARS + "a", "z" * (MAX_CHARS - 1))),
    [BOOLEAN, False], [BOOLEAN, True],
    [DATETIME, 0], [DATETIME, 630822816000000000], [DATETIME, 630822816000000001],
    [GUID, "00000000-0000-0000-0000-000000000000"], [GUID, "c9da6455-213d-42c9-9a79-3e9149a57833"],
    [BINARY, b""], [BINARY, b"\x00"], [BINARY, b"\xff"], [BINARY, b"\xff" * MAX_CHARS + b"\x00"],
]
OPS = ("eq", "ne", "gt", "ge", "lt", "le")

values = st.sampled_from(VALUES)
compares = st.builds(lambda op, p, v: Compare(op, p, v[0], v[1]), st.sampled_from(OPS), st.sampled_from(PROPS),
                     values)
filters = st.recursive(
    compares | st.builds(Const, st.booleans()),
    lambda sub: st.builds(And, sub, sub) | st.builds(Or, sub, sub) | st.builds(Not, sub),
    max_leaves=8,
)
entities = st.lists(st.dictionaries(st.sampled_from(PROPS), values, min_size=1), min_size=3, max_size=10)
INDEXES = [ix("ia", "a"), ix("iab", "a", "b"), ix("iba", "b", "a"), ix("ibac", "b", "a", "c"), ix("icb", "c", "b")]


def compares_in(node: Node) -> list[Compare]:
    if isinstance(node, Compare):
        return [node]
    if isinstance(node, Not):
        return compares_in(node.expr)
    if isinstance(node, And | Or):
        return compares_in(node.left) + compares_in(node.right)
    return []


def near_literals(node: Node, ents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``ents``, and entities holding the filter's literals (one or two of them) over a few of ``ents``."""
    lits = [{c.prop: [c.code, c.value]} for c in compares_in(node)]
    pairs = [a | b for a in lits for b in lits if a.keys() != b.keys()]
    return ents + [e | extra for extra in lits + pairs for e in ents[:3]]


def check_sound(node: Node, ents: list[dict[str, Any]], idx: IndexDef) -> IndexPlan | None:
    p = choose(node, [idx])
    if p is None:
        return None
    scans = p.scans
    assert list(scans) == sorted(scans, key=lambda s: s.lo)
    assert all(s.hi is not None and s.lo < s.hi for s in scans)
    assert all(a.hi is not None and a.hi < b.lo for a, b in zip(scans, scans[1:], strict=False))
    match = compile_filter(node)
    for i, props in enumerate(ents):
        if match("pk", str(i), 0, props):
            epk = entry_pk(idx, props)
            assert epk is not None, (props, p.describe())  # a match always has an entry
            assert p.contains(entry_key(epk, entry_rk("pk", str(i)))), (props, p.describe())
    return p


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filters, entities)
def test_scans_cover_every_match(node: Node, ents: list[dict[str, Any]]) -> None:
    ents = near_literals(node, ents)
    for idx in INDEXES:
        check_sound(node, ents, idx)


lit_compares = st.builds(lambda op, v: Compare(op, "a", v[0], v[1]), st.sampled_from(("eq", "gt", "ge", "lt", "le")),
                         values)
constrained = st.recursive(
    lit_compares,
    lambda sub: st.builds(And, sub, filters) | st.builds(And, filters, sub) | st.builds(Or, sub, sub)
    | st.builds(And, sub, sub),
    max_leaves=6,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(constrained, entities)
def test_bounded_shapes_get_a_plan(node: Node, ents: list[dict[str, Any]]) -> None:
    ents = near_literals(node, ents)
    for idx in (INDEXES[0], INDEXES[1]):
        assert check_sound(node, ents, idx) is not None


@settings(max_examples=100, deadline=None)
@given(st.lists(values, min_size=1, max_size=3), st.sampled_from(("gt", "ge", "lt", "le", "eq")), values,
       entities)
def test_leading_equalities_narrow_to_composite_prefixes(eqs: list[list[Any]], op: str, last: list[Any],
                                                         ents: list[dict[str, Any]]) -> None:
    idx = ix("i4", "a", "b", "c", "d")
    names = ("a", "b", "c", "d")
    terms: list[Node] = [Compare("eq", p, v[0], v[1]) for p, v in zip(names, eqs, strict=False)]
    node = chain(And, [*terms, Compare(op, names[len(eqs)], last[0], last[1])])
    p = check_sound(node, ents + [{n: v for n, v in zip(names, [*eqs, last], strict=False)}], idx)
    assert p is not None
    if p.scans and not any(v[0] == DOUBLE and v[1] != v[1] for v in eqs):
        assert p.equalities >= len(eqs)
        prefix = "".join(encode_value(v) for v in eqs).encode()
        assert all(s.lo.startswith(prefix) for s in p.scans)
