"""Tests for rangetable.index_keys: the encoding follows the filter evaluator's order, and entry_ops."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangetable.edm import (
    BINARY,
    BOOLEAN,
    DATETIME,
    DOUBLE,
    GUID,
    INT32,
    INT32_MAX,
    INT32_MIN,
    INT64,
    INT64_MAX,
    INT64_MIN,
    MAX_DATETIME_TICKS,
    STRING,
)
from rangetable.filter import Compare, compile_filter
from rangetable.index_def import IndexDef
from rangetable.index_keys import (
    ABSENT,
    MAX_CHARS,
    base_key,
    encode_value,
    entry_key,
    entry_ops,
    entry_pk,
    entry_rk,
    entry_value,
    is_exact,
)
from rangetable.keys import encode_key

NAN, INF = float("nan"), float("inf")
TRICKY = "\x00\x01\x02\x03 a\x7f\x80é\ud7fe\ud7ff\ud800\udbff\udc00\udfff\ue000\uffff\U00010000\U0010ffff"


def texts() -> st.SearchStrategy[str]:
    """Short strings over tricky characters (lone surrogates too), and long ones sharing a prefix."""
    alphabet = st.sampled_from(TRICKY)
    return st.one_of(
        st.text(alphabet, max_size=6),
        st.text(st.characters(exclude_categories=()), max_size=8),
        st.builds(lambda tail: "x" * (MAX_CHARS - 2) + tail, st.text(alphabet, max_size=5)),
    )


def groups() -> dict[str, st.SearchStrategy[list[Any]]]:
    ints53 = st.integers(-(2**53) - 4, -(2**53) + 4) | st.integers(2**53 - 4, 2**53 + 4)
    return {
        "number": st.one_of(
            st.builds(lambda v: [INT32, v], st.integers(INT32_MIN, INT32_MAX) | st.integers(-3, 3)),
            st.builds(lambda v: [INT64, v], st.integers(INT64_MIN, INT64_MAX) | ints53 | st.integers(-3, 3)),
            st.builds(lambda v: [DOUBLE, v], st.floats(allow_nan=False) | st.sampled_from(
                [0.0, -0.0, 2.0**53, -(2.0**53), 1.5, -1.5, 2.0**63, -(2.0**63), 5e-324, -5e-324]))),
        "string": st.builds(lambda v: [STRING, v], texts()),
        "guid": st.builds(lambda v: [GUID, str(v)], st.uuids()),
        "binary": st.builds(lambda v: [BINARY, v], st.binary(max_size=6)
                            | st.builds(lambda t: b"\xff" * (MAX_CHARS - 2) + t, st.binary(max_size=4))),
        "boolean": st.builds(lambda v: [BOOLEAN, v], st.booleans()),
        "datetime": st.builds(lambda v: [DATETIME, v], st.integers(0, MAX_DATETIME_TICKS)),
    }


GROUPS = groups()
ANY = st.one_of(*GROUPS.values())


def evaluator_says(op: str, x: list[Any], y: list[Any]) -> bool:
    """``x op y`` as the $filter evaluator decides it (x a property value, y a literal)."""
    return compile_filter(Compare(op, "p", y[0], y[1]))("pk", "rk", 0, {"p": x})


def exact(pair: list[Any]) -> bool:
    if pair[0] in (INT32, INT64):
        return abs(pair[1]) <= 2**53
    return pair[0] == DOUBLE or is_exact(pair)


def check_encoding(e: str) -> None:
    assert "\x00" not in e
    e.encode("utf-8")  # plain UTF-8: no lone surrogates


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_order_within_a_group_follows_the_evaluator(group: str) -> None:
    @settings(max_examples=200, deadline=None)
    @given(GROUPS[group], GROUPS[group])
    def check(x: list[Any], y: list[Any]) -> None:
        ex, ey = encode_value(x), encode_value(y)
        check_encoding(ex)
        check_encoding(ey)
        assert ex.startswith(ey) == (ex == ey) and ey.startswith(ex) == (ex == ey)  # self-delimiting
        if evaluator_says("eq", x, y):
            assert ex == ey
        elif evaluator_says("lt", x, y):
            assert ex < ey if exact(x) and exact(y) else ex <= ey
        else:
            assert evaluator_says("gt", x, y)
            assert ex > ey if exact(x) and exact(y) else ex >= ey

    check()


@settings(max_examples=200, deadline=None)
@given(ANY, ANY)
def test_groups_never_interleave(x: list[Any], y: list[Any]) -> None:
    ex, ey = encode_value(x), encode_value(y)
    if ex[0] != ey[0]:
        assert not any(evaluator_says(op, x, y) for op in ("eq", "lt", "gt", "le", "ge"))
        assert not ex.startswith(ey) and not ey.startswith(ex)
    assert ABSENT < ex and ABSENT < ey


def test_fixed_points() -> None:
    assert encode_value([DOUBLE, -0.0]) == encode_value([DOUBLE, 0.0]) == encode_value([INT32, 0]) \
        == encode_value([INT64, 0])
    assert encode_value([INT64, 2**53 + 1]) == encode_value([DOUBLE, 2.0**53])  # rounds: a superset
    nan = encode_value([DOUBLE, NAN])
    assert nan == encode_value([DOUBLE, -NAN]) and nan > encode_value([DOUBLE, INF]) > encode_value([INT64, INT64_MAX])
    assert encode_value([DOUBLE, -INF]) < encode_value([INT64, INT64_MIN])
    assert encode_value([BOOLEAN, False]) < encode_value([BOOLEAN, True])
    assert encode_value(None) == ABSENT
    assert encode_value([STRING, "a" * 1000]) == encode_value([STRING, "a" * MAX_CHARS + "b"])
    assert encode_value([STRING, ""]) < encode_value([STRING, "\x00"]) < encode_value([STRING, "\x01"]) \
        < encode_value([STRING, "\x02"]) < encode_value([STRING, "\x03"])
    assert encode_value([STRING, "\ud7ff"]) < encode_value([STRING, "\ud800"]) < encode_value([STRING, "\udfff"]) \
        < encode_value([STRING, "\ue000"])
    with pytest.raises(ValueError):
        encode_value([99, 1])


@settings(max_examples=200, deadline=None)
@given(st.lists(ANY, min_size=2, max_size=2), st.lists(ANY, min_size=2, max_size=2))
def test_composite_keys_sort_by_first_value_then_second(a: list[list[Any]], b: list[list[Any]]) -> None:
    idx = IndexDef("t", "i", ("p", "q"), ())
    ka = entry_pk(idx, {"p": a[0], "q": a[1]})
    kb = entry_pk(idx, {"p": b[0], "q": b[1]})
    assert ka is not None and kb is not None
    e = [(encode_value(a[0]), encode_value(a[1])), (encode_value(b[0]), encode_value(b[1]))]
    assert (ka < kb) == (e[0] < e[1]) and (ka == kb) == (e[0] == e[1])


def test_entry_keys() -> None:
    idx = IndexDef("t", "i", ("p", "q"), ("r",))
    assert entry_pk(idx, {"q": [INT32, 1]}) is None  # sparse: no first property, no entry
    assert entry_pk(idx, {"p": [INT32, 1]}) == encode_value([INT32, 1]) + ABSENT
    assert entry_rk("pk", "rk") == "pk\x01rk" and base_key("pk\x01rk") == ("pk", "rk")
    assert base_key(entry_rk("", "")) == ("", "")
    with pytest.raises(ValueError):
        base_key("no separator")
    assert entry_key("a", "b\x01c") == encode_key("a", "b\x01c") == b"a\x00b\x01c"
    props = {"p": [INT32, 1], "r": [STRING, "x"], "s": [BOOLEAN, True]}
    assert entry_value(idx, props) == {"r": [STRING, "x"]}
    assert entry_value(IndexDef("t", "i", ("p",), ()), props) == {}
    assert entry_value(IndexDef("t", "i", ("p",), None), props) == props
    assert entry_value(idx, {"p": [INT32, 1]}) == {}


# --- entry_ops ---------------------------------------------------------------------------------

IDX = IndexDef("t", "i", ("p",), ("k",))
ALL = IndexDef("t", "i", ("p",), None)
ERK = "PK\x01RK"


def pk_of(v: Any) -> str:
    return encode_value([INT32, v]) if isinstance(v, int) else encode_value(v)


ENTRY_OPS_CASES = [
    # (index, before, after, expected ops)
    (IDX, None, None, []),
    (IDX, None, {"x": [INT32, 1]}, []),  # not in the index
    (IDX, {"x": [INT32, 1]}, None, []),
    (IDX, {"x": [INT32, 1]}, {"x": [INT32, 2]}, []),
    (IDX, None, {"p": [INT32, 1]}, [(pk_of(1), ERK, {})]),  # inserted
    (IDX, None, {"p": [INT32, 1], "k": [STRING, "v"]}, [(pk_of(1), ERK, {"k": [STRING, "v"]})]),
    (IDX, {"p": [INT32, 1]}, None, [(pk_of(1), ERK, None)]),  # deleted
    (IDX, {"p": [INT32, 1]}, {"x": [INT32, 1]}, [(pk_of(1), ERK, None)]),  # left the index
    (IDX, {"x": [INT32, 1]}, {"p": [INT32, 1]}, [(pk_of(1), ERK, {})]),  # joined it
    (IDX, {"p": [INT32, 1]}, {"p": [INT32, 2]}, [(pk_of(1), ERK, None), (pk_of(2), ERK, {})]),  # moved
    (IDX, {"p": [INT32, 1]}, {"p": [INT64, 1]}, []),  # same key (1 eq 1L), nothing kept changed
    (IDX, {"p": [INT32, 1]}, {"p": [DOUBLE, 1.0], "x": [INT32, 5]}, []),  # an unkept property changed
    (IDX, {"p": [INT32, 1]}, {"p": [INT32, 1], "k": [INT32, 5]}, [(pk_of(1), ERK, {"k": [INT32, 5]})]),
    (IDX, {"p": [INT32, 1], "k": [INT32, 5]}, {"p": [INT32, 1]}, [(pk_of(1), ERK, {})]),
    (IDX, {"p": [INT32, 1], "k": [INT32, 5]}, {"p": [INT32, 1], "k": [INT64, 5]},
     [(pk_of(1), ERK, {"k": [INT64, 5]})]),  # the kept value's type changed
    (IDX, {"p": [INT32, 1], "k": [DOUBLE, 0.0]}, {"p": [INT32, 1], "k": [DOUBLE, -0.0]},
     [(pk_of(1), ERK, {"k": [DOUBLE, -0.0]})]),  # 0.0 == -0.0, but the kept value changed
    (IDX, {"p": [INT32, 1], "k": [DOUBLE, NAN]}, {"p": [INT32, 1], "k": [DOUBLE, float("nan")]}, []),
    (IDX, {"p": [INT32, 1], "k": [INT32, 5]}, {"p": [INT32, 1], "k": [INT32, 5], "x": [INT32, 0]}, []),
    (IDX, {"p": [INT32, 1], "k": [INT32, 5]}, {"p": [INT32, 2], "k": [INT32, 5]},
     [(pk_of(1), ERK, None), (pk_of(2), ERK, {"k": [INT32, 5]})]),
    (ALL, {"p": [INT32, 1]}, {"p": [INT32, 1]}, []),
    (ALL, {"p": [INT32, 1]}, {"p": [INT32, 1], "x": [BOOLEAN, True]},
     [(pk_of(1), ERK, {"p": [INT32, 1], "x": [BOOLEAN, True]})]),  # everything is kept
    (ALL, {"p": [INT32, 1]}, {"p": [INT64, 1]}, [(pk_of(1), ERK, {"p": [INT64, 1]})]),
    (ALL, {"p": [DOUBLE, 0.0]}, {"p": [DOUBLE, -0.0]}, [(pk_of([DOUBLE, 0.0]), ERK, {"p": [DOUBLE, -0.0]})]),
]


@pytest.mark.parametrize(("idx", "before", "after", "expected"), ENTRY_OPS_CASES)
def test_entry_ops(idx: IndexDef, before: dict | None, after: dict | None, expected: list) -> None:
    ops = entry_ops(idx, "PK", "RK", before, after)
    assert [(p, r, None if v is None else {k: [c, repr(x)] for k, (c, x) in v.items()}) for p, r, v in ops] == \
        [(p, r, None if v is None else {k: [c, repr(x)] for k, (c, x) in v.items()}) for p, r, v in expected]


PROPS = st.dictionaries(st.sampled_from(["p", "q", "k", "x"]),
                        st.sampled_from([[INT32, 1], [INT64, 1], [INT32, 2], [STRING, "a"], [DOUBLE, -0.0],
                                         [DOUBLE, 0.0], [BOOLEAN, True]]), max_size=4)
INDEXES = [IndexDef("t", "i", ("p",), ()), IndexDef("t", "i", ("p", "q"), ("k",)), IndexDef("t", "i", ("q",), None)]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(INDEXES), st.none() | PROPS, st.none() | PROPS)
def test_entry_ops_replay_to_the_entries_of_after(idx: IndexDef, before: dict | None, after: dict | None) -> None:
    """Applying the ops to the entries of ``before`` gives exactly the entries of ``after``."""

    def entries(props: dict | None) -> dict[tuple[str, str], str]:
        epk = None if props is None else entry_pk(idx, props)
        return {} if epk is None else {(epk, ERK): show(entry_value(idx, props or {}))}

    def show(value: dict) -> str:
        return repr(sorted(value.items()))

    state = entries(before)
    ops = entry_ops(idx, "PK", "RK", before, after)
    for epk, erk, value in ops:
        if value is None:
            assert (epk, erk) in state
            del state[(epk, erk)]
        else:
            assert state.get((epk, erk)) != show(value)  # never a put that changes nothing
            state[(epk, erk)] = show(value)
    assert state == entries(after)
