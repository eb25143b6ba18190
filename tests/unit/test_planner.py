"""Tests for rangetable.planner: a table of filter -> plan, and soundness/tightness properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rangetable.edm import INT32, STRING
from rangetable.filter import And, Compare, Const, Not, Or, compile_filter, describe, parse_filter
from rangetable.filter_syntax import chain
from rangetable.planner import MAX_BOXES, MAX_MEETS, Plan, Scan, keys_only, plan


def key(pk: str, rk: str | None = None) -> bytes:
    return pk.encode() + b"\x00" + (rk.encode() if rk is not None else b"")


P, R = "PartitionKey", "RowKey"

# (filter, kind, [(lo, hi), ...]) -- lo inclusive, hi exclusive, None unbounded.
PLAN_CASES = [
    # point
    ("PartitionKey eq 'a' and RowKey eq 'b'", "point", [(key("a", "b"), key("a", "b") + b"\x00")]),
    ("RowKey eq 'b' and PartitionKey eq 'a'", "point", [(key("a", "b"), key("a", "b") + b"\x00")]),
    ("'a' eq PartitionKey and 'b' eq RowKey", "point", [(key("a", "b"), key("a", "b") + b"\x00")]),
    # row range: the four bound operators
    ("PartitionKey eq 'a' and RowKey ge 'r'", "row_range", [(key("a", "r"), b"a\x01")]),
    ("PartitionKey eq 'a' and RowKey gt 'r'", "row_range", [(key("a", "r") + b"\x00", b"a\x01")]),
    ("PartitionKey eq 'a' and RowKey lt 'r'", "row_range", [(key("a"), key("a", "r"))]),
    ("PartitionKey eq 'a' and RowKey le 'r'", "row_range", [(key("a"), key("a", "r") + b"\x00")]),
    ("PartitionKey eq 'a' and RowKey ge 'r1' and RowKey lt 'r5'", "row_range", [(key("a", "r1"), key("a", "r5"))]),
    ("RowKey lt 'r' and RowKey gt 'b' and PartitionKey eq 'a'", "row_range",
     [(key("a", "b") + b"\x00", key("a", "r"))]),
    # a whole partition is a row range with no row bounds
    ("PartitionKey eq 'a'", "row_range", [(key("a"), b"a\x01")]),
    ("PartitionKey ge 'a' and PartitionKey le 'a'", "row_range", [(key("a"), b"a\x01")]),
    # partition ranges
    ("PartitionKey gt 'a'", "partition_range", [(b"a\x01", None)]),
    ("PartitionKey ge 'a'", "partition_range", [(key("a"), None)]),
    ("PartitionKey lt 'a'", "partition_range", [(b"", key("a"))]),
    ("PartitionKey le 'a'", "partition_range", [(b"", b"a\x01")]),
    ("PartitionKey ge 'a' and PartitionKey lt 'c'", "partition_range", [(key("a"), key("c"))]),
    # rk bounds only narrow the first/last partition of a closed pk range
    ("PartitionKey ge 'a' and PartitionKey le 'c' and RowKey gt 'm' and RowKey lt 'x'", "partition_range",
     [(key("a", "m") + b"\x00", key("c", "x"))]),
    ("PartitionKey gt 'a' and PartitionKey lt 'c' and RowKey eq 'm'", "partition_range", [(b"a\x01", key("c"))]),
    # full: no pk bound
    ("RowKey eq 'x'", "full", [(b"", None)]),
    ("Age gt 3", "full", [(b"", None)]),
    ("PartitionKey eq 'a' or Age gt 3", "full", [(b"", None)]),
    ("PartitionKey ne 'a'", "full", [(b"", None)]),
    ("not (PartitionKey eq 'a')", "full", [(b"", None)]),
    ("not (PartitionKey eq 1)", "full", [(b"", None)]),
    # or of points stays several narrow scans, sorted
    ("(PartitionKey eq 'b' and RowKey eq '2') or (PartitionKey eq 'a' and RowKey eq '1')", "point",
     [(key("a", "1"), key("a", "1") + b"\x00"), (key("b", "2"), key("b", "2") + b"\x00")]),
    ("PartitionKey eq 'p' and (RowKey eq '1' or RowKey eq '2' or RowKey eq '1')", "point",
     [(key("p", "1"), key("p", "1") + b"\x00"), (key("p", "2"), key("p", "2") + b"\x00")]),
    ("PartitionKey eq 'a' or PartitionKey eq 'c'", "partition_range",
     [(key("a"), b"a\x01"), (key("c"), b"c\x01")]),
    ("PartitionKey eq 'p' and (RowKey lt 'b' or RowKey gt 'x')", "row_range",
     [(key("p"), key("p", "b")), (key("p", "x") + b"\x00", b"p\x01")]),
    # overlapping and touching scans are merged
    ("PartitionKey eq 'p' and (RowKey lt 'm' or RowKey ge 'm')", "row_range", [(key("p"), b"p\x01")]),
    ("PartitionKey eq 'p' and (RowKey le 'm' or RowKey gt 'c')", "row_range", [(key("p"), b"p\x01")]),
    ("PartitionKey lt 'c' or PartitionKey ge 'c'", "full", [(b"", None)]),
    ("PartitionKey lt 'c' or PartitionKey gt 'c'", "partition_range", [(b"", key("c")), (b"c\x01", None)]),
    # intersection
    ("PartitionKey ge 'a' and PartitionKey lt 'm' and PartitionKey gt 'c'", "partition_range", [(b"c\x01", key("m"))]),
    ("(PartitionKey eq 'a' or PartitionKey eq 'b') and (PartitionKey eq 'b' or PartitionKey eq 'c')", "row_range",
     [(key("b"), b"b\x01")]),
    # empty
    ("PartitionKey eq 'a' and PartitionKey eq 'b'", "empty", []),
    ("PartitionKey gt 'b' and PartitionKey lt 'a'", "empty", []),
    ("PartitionKey gt 'a' and PartitionKey lt 'a'", "empty", []),
    ("PartitionKey eq 'a' and RowKey gt 'x' and RowKey le 'x'", "empty", []),
    ("PartitionKey eq 1", "empty", []),
    ("PartitionKey lt ''", "empty", []),
    ("PartitionKey ge '' and RowKey lt '' and PartitionKey le 'z'", "empty", []),
    ("PartitionKey eq '' and RowKey eq ''", "point", [(b"\x00", b"\x00\x00")]),
    ("RowKey gt 5L and PartitionKey eq 'a'", "empty", []),
    ("PartitionKey eq 1 or PartitionKey eq 'a'", "row_range", [(key("a"), b"a\x01")]),
    # not/ne and other properties constrain nothing, but do not widen a conjunction
    ("PartitionKey eq 'a' and RowKey ne 'x'", "row_range", [(key("a"), b"a\x01")]),
    ("PartitionKey eq 'a' and not (RowKey eq 'x')", "row_range", [(key("a"), b"a\x01")]),
    ("PartitionKey eq 'a' and RowKey eq 'b' and Age gt 3 and Name ne 'z'", "point",
     [(key("a", "b"), key("a", "b") + b"\x00")]),
    ("PartitionKey eq 'a' and (RowKey eq 'b' or Age gt 3)", "row_range", [(key("a"), b"a\x01")]),
    # non-ASCII keys keep code-point order
    ("PartitionKey ge 'é' and PartitionKey lt '☃'", "partition_range", [(key("é"), key("☃"))]),
    # bare true/false: true constrains nothing, false empties its conjunction
    ("true", "full", [(b"", None)]),
    ("false", "empty", []),
    ("not true", "empty", []),
    ("not false", "full", [(b"", None)]),
    ("(true and RowKey eq '1') and (false or PartitionKey eq 'p')", "point", [(key("p", "1"), key("p", "1") + b"\x00")]),
    ("false or PartitionKey eq 'a'", "row_range", [(key("a"), b"a\x01")]),
    ("true or PartitionKey eq 'a'", "full", [(b"", None)]),
    ("false and PartitionKey eq 'a'", "empty", []),
]


@pytest.mark.parametrize(("text", "kind", "scans"), PLAN_CASES)
def test_plan(text: str, kind: str, scans: list) -> None:
    result = plan(parse_filter(text))
    assert result.kind == kind
    assert [(s.lo, s.hi) for s in result.scans] == scans


def test_plan_none_and_routing() -> None:
    assert plan(None) == Plan("full", (Scan(b"", None),))
    assert plan(parse_filter("PartitionKey eq 'a' and RowKey gt 'x'")).covers_single_partition == "a"
    assert plan(parse_filter("PartitionKey eq 'é'")).covers_single_partition == "é"
    assert plan(parse_filter("PartitionKey ge 'a' and PartitionKey le 'b'")).covers_single_partition is None
    assert plan(parse_filter("PartitionKey eq 'a' or PartitionKey eq 'b'")).covers_single_partition is None
    assert plan(parse_filter("PartitionKey eq 'a' and Age eq 1")).covers_single_partition == "a"
    assert plan(parse_filter("PartitionKey eq 'a' and PartitionKey eq 'b'")).covers_single_partition is None


def test_scan_cap_falls_back_to_covering_scan() -> None:
    # 8 x 7 = 56 distinct points in 8 partitions stay separate
    pks = " or ".join(f"PartitionKey eq 'p{i}'" for i in range(8))
    rks = " or ".join(f"RowKey eq 'r{i}'" for i in range(7))
    result = plan(parse_filter(f"({pks}) and ({rks})"))
    assert result.kind == "point" and len(result.scans) == 56
    # an `and` of two unions whose pairs exceed MAX_MEETS intersects one side's hull instead
    n = 65
    assert n * n > MAX_MEETS
    pks = " or ".join(f"PartitionKey eq 'p{i:02d}'" for i in range(n))
    rks = " or ".join(f"RowKey eq 'r{i:02d}'" for i in range(n))
    capped = plan(parse_filter(f"({pks}) and ({rks})"))
    assert len(capped.scans) <= n
    assert all(capped.contains(key(f"p{i:02d}", f"r{j:02d}")) for i in range(n) for j in range(n))
    # more boxes than MAX_BOXES: one covering scan
    many = chain(Or, [Compare("eq", P, STRING, f"p{i:05d}") for i in range(MAX_BOXES + 1)])
    covering = plan(many)
    assert len(covering.scans) == 1 and covering.contains(key("p00000", "")) and covering.contains(key("p04096", "z"))


def test_or_of_many_point_keys_stays_point_reads() -> None:
    # what Orleans' grain directory sends: 201 comparisons, 100 point keys (and more)
    keys = [(f"silo{i % 7}", f"grain{i:04d}") for i in range(200)]
    text = " or ".join(f"(PartitionKey eq '{pk}' and RowKey eq '{rk}')" for pk, rk in keys)
    result = plan(parse_filter(text))
    assert result.kind == "point" and len(result.scans) == 200
    assert all(result.contains(key(pk, rk)) for pk, rk in keys)
    assert not result.contains(key("silo0", "grain0001"))
    pred = compile_filter(parse_filter(text + " or Age gt 3"))
    assert pred("silo3", "grain0003", 0, {}) and not pred("silo3", "grain0004", 0, {})
    assert pred("x", "y", 0, {"Age": [INT32, 4]}) and not pred("x", "y", 0, {"Age": [INT32, 3]})


@pytest.mark.parametrize(("text", "only"), [
    ("PartitionKey eq 'a' and RowKey eq 'b'", True),
    ("RowKey eq 'b' and PartitionKey eq 'a'", True),
    ("(PartitionKey eq 'a' and RowKey eq 'b') or (PartitionKey eq 'c' and RowKey eq 'd')", True),
    ("PartitionKey eq 'a'", False),  # a partition: the plan is no point read
    ("PartitionKey eq 'a' and RowKey ge 'b'", False),
    ("PartitionKey eq 'a' and RowKey eq 'b' and Age gt 3", False),  # a property to filter on
    ("(PartitionKey eq 'a' and RowKey eq 'b') or Age gt 3", False),
    ("PartitionKey eq 'a' and PartitionKey eq 'b'", False),
    ("not (PartitionKey eq 'a' and RowKey eq 'b')", False),
    ("PartitionKey eq 'a' and RowKey eq 1", False),  # a number never equals a RowKey
])
def test_keys_only(text: str, only: bool) -> None:
    assert keys_only(parse_filter(text)) is only


def test_keys_only_walks_a_long_or_without_recursion() -> None:
    text = " or ".join(f"(PartitionKey eq 'p{i}' and RowKey eq 'r{i}')" for i in range(1500))
    assert keys_only(parse_filter(text)) and not keys_only(parse_filter(text + " or Age gt 3"))
    assert not keys_only(None)


# --- property tests --------------------------------------------------------------------------------

# Keys over an alphabet with the lowest allowed char (space), ASCII, and a multi-byte char.
ALPHABET = " aé"
UNIVERSE = ["".join(t) for n in range(4) for t in itertools.product(ALPHABET, repeat=n)]
KEYS = [(pk, rk) for pk in UNIVERSE for rk in UNIVERSE]
strings = st.text(alphabet=ALPHABET, max_size=3)
OPS = ["eq", "ne", "gt", "ge", "lt", "le"]


def _key_leaf(ops: list[str]) -> st.SearchStrategy:
    return st.builds(Compare, st.sampled_from(ops), st.sampled_from([P, R]), st.just(STRING), strings)


any_leaf = st.one_of(
    _key_leaf(OPS),
    _key_leaf(OPS),
    st.builds(Compare, st.sampled_from(OPS), st.sampled_from([P, R]), st.just(INT32), st.integers(0, 3)),
    st.builds(Compare, st.sampled_from(OPS), st.just("X"), st.just(INT32), st.integers(0, 3)),
    st.builds(Const, st.booleans()),
)
any_filter = st.recursive(
    any_leaf,
    lambda sub: st.one_of(st.builds(And, sub, sub), st.builds(Or, sub, sub), st.builds(Not, sub)),
    max_leaves=10,
)


def _check_shape(result: Plan) -> None:
    scans = result.scans
    assert (result.kind == "empty") == (not scans)
    for a, b in itertools.pairwise(scans):
        assert a.hi is not None and a.hi < b.lo  # sorted, disjoint, not touching
    for s in scans:
        assert s.hi is None or s.lo < s.hi


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_filter, st.lists(st.sampled_from(KEYS), min_size=1, max_size=60), st.integers(0, 3))
def test_plan_is_sound(node: object, keys: list, x: int) -> None:
    result = plan(node)
    _check_shape(result)
    assert plan(parse_filter(describe(node))) == result
    pred = compile_filter(node)
    for pk, rk in keys:
        if pred(pk, rk, 0, {"X": [INT32, x]}):
            assert result.contains(key(pk, rk)), (describe(node), pk, rk, result)


tight_ops = ["eq", "gt", "ge", "lt", "le"]
conjunction = st.lists(_key_leaf(tight_ops), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conjunction, strings)
def test_plan_is_tight_for_key_conjunctions(leaves: list, pinned: str) -> None:
    # A single scan can only be exact when rk bounds apply within one partition, so pin the pk
    # whenever the conjunction bounds the rk.
    if any(c.prop == R for c in leaves) and not any(c.prop == P and c.op == "eq" for c in leaves):
        leaves = [*leaves, Compare("eq", P, STRING, pinned)]
    node = leaves[0]
    for leaf in leaves[1:]:
        node = And(node, leaf)
    result = plan(node)
    _check_shape(result)
    assert len(result.scans) <= 1
    pred = compile_filter(node)
    for pk, rk in KEYS:
        assert result.contains(key(pk, rk)) == pred(pk, rk, 0, {}), (describe(node), pk, rk, result)
    if result.covers_single_partition is not None:
        assert all(pk == result.covers_single_partition for pk, rk in KEYS if pred(pk, rk, 0, {}))


point_term = st.builds(lambda pk, rk: And(Compare("eq", P, STRING, pk), Compare("eq", R, STRING, rk)), strings, strings)
key_terms = st.recursive(point_term, lambda sub: st.builds(Or, sub, sub), max_leaves=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(key_terms, any_filter))
def test_a_keys_only_point_plan_reads_exactly_the_matches(node: object) -> None:
    # what lets a range read such a plan's point keys without the filter
    result = plan(node)
    if not (keys_only(node) and result.kind == "point"):
        return
    pred = compile_filter(node)
    for pk, rk in KEYS:
        assert result.contains(key(pk, rk)) == pred(pk, rk, 0, {}), (describe(node), pk, rk)
