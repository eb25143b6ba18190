"""Tests for rangetable.filter: parsing, errors, evaluation semantics, and property tests."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rangetable.edm import (
    BINARY,
    BOOLEAN,
    DATETIME,
    DOUBLE,
    GUID,
    INT32,
    INT64,
    STRING,
    iso_to_ticks,
)
from rangetable.errors import TableError
from rangetable.filter import (
    And,
    Compare,
    Const,
    Not,
    Or,
    compile_cached,
    compile_filter,
    count_comparisons,
    describe,
    parse_filter,
)


def C(op: str, prop: str, code: int, value: object) -> Compare:
    return Compare(op, prop, code, value)


A1, B2, C3 = C("eq", "A", INT32, 1), C("eq", "B", INT32, 2), C("eq", "C", INT32, 3)
GUID_TEXT = "a455c695-df98-5678-aaaa-81d3367e5a34"

# --- parsing: (filter, expected AST) -------------------------------------------------------------

PARSE_CASES = [
    # strings, with '' escaping a quote
    ("Name eq 'Bob'", C("eq", "Name", STRING, "Bob")),
    ("Name eq 'it''s'", C("eq", "Name", STRING, "it's")),
    ("Name eq ''", C("eq", "Name", STRING, "")),
    ("Name eq ''''", C("eq", "Name", STRING, "'")),
    ("Name eq 'a and b or not c'", C("eq", "Name", STRING, "a and b or not c")),
    ("Name eq 'ünï ☃'", C("eq", "Name", STRING, "ünï ☃")),
    # integers: Int32, negative, L suffix for Int64 (range-checked)
    ("Age eq 42", C("eq", "Age", INT32, 42)),
    ("Age gt -5", C("gt", "Age", INT32, -5)),
    ("Age eq 2147483647", C("eq", "Age", INT32, 2147483647)),
    ("Age eq -2147483648", C("eq", "Age", INT32, -2147483648)),
    ("Big eq 123L", C("eq", "Big", INT64, 123)),
    ("Big eq 3000000000L", C("eq", "Big", INT64, 3000000000)),
    ("Big eq -9223372036854775808L", C("eq", "Big", INT64, -(2**63))),
    ("Big eq 5l", C("eq", "Big", INT64, 5)),
    # doubles, with fraction and/or exponent
    ("D eq 1.5", C("eq", "D", DOUBLE, 1.5)),
    ("D lt -2.0E3", C("lt", "D", DOUBLE, -2000.0)),
    ("D ge 1e5", C("ge", "D", DOUBLE, 100000.0)),
    ("D le 2.5e-3", C("le", "D", DOUBLE, 0.0025)),
    # booleans
    ("Flag eq true", C("eq", "Flag", BOOLEAN, True)),
    ("Flag ne false", C("ne", "Flag", BOOLEAN, False)),
    ("Flag eq TRUE", C("eq", "Flag", BOOLEAN, True)),
    # datetimes: 0-7 fractional digits
    ("T eq datetime'2008-07-10T00:00:00Z'", C("eq", "T", DATETIME, iso_to_ticks("2008-07-10T00:00:00Z"))),
    ("T eq datetime'2008-07-10T00:00:00.000000Z'", C("eq", "T", DATETIME, 633512448000000000)),
    ("T eq datetime'2008-07-10T00:00:00.1234567Z'", C("eq", "T", DATETIME, 633512448001234567)),
    ("T eq datetime'2008-07-10T00:00:00.5Z'", C("eq", "T", DATETIME, 633512448005000000)),
    ("T eq DateTime'0001-01-01T00:00:00Z'", C("eq", "T", DATETIME, 0)),
    # guids are validated and case-folded
    (f"G eq guid'{GUID_TEXT}'", C("eq", "G", GUID, GUID_TEXT)),
    (f"G eq guid'{GUID_TEXT.upper()}'", C("eq", "G", GUID, GUID_TEXT)),
    # binary: X'' and binary'' with an even number of hex digits
    ("B eq X'0AFF'", C("eq", "B", BINARY, b"\x0a\xff")),
    ("B eq binary'0aff'", C("eq", "B", BINARY, b"\x0a\xff")),
    ("B eq X''", C("eq", "B", BINARY, b"")),
    # keys and timestamp are ordinary names in the AST
    ("PartitionKey eq 'p' and RowKey ge 'r'", And(C("eq", "PartitionKey", STRING, "p"), C("ge", "RowKey", STRING, "r"))),
    # a literal on the left flips the operator
    ("5 lt Age", C("gt", "Age", INT32, 5)),
    ("5 le Age", C("ge", "Age", INT32, 5)),
    ("5 gt Age", C("lt", "Age", INT32, 5)),
    ("5 ge Age", C("le", "Age", INT32, 5)),
    ("'x' eq Name", C("eq", "Name", STRING, "x")),
    ("'x' ne Name", C("ne", "Name", STRING, "x")),
    # precedence: not > and > or, left-associative
    ("A eq 1 or B eq 2 and C eq 3", Or(A1, And(B2, C3))),
    ("A eq 1 and B eq 2 or C eq 3", Or(And(A1, B2), C3)),
    ("not A eq 1 and B eq 2", And(Not(A1), B2)),
    ("not (A eq 1 and B eq 2)", Not(And(A1, B2))),
    ("not not A eq 1", Not(Not(A1))),
    ("A eq 1 and B eq 2 and C eq 3", And(And(A1, B2), C3)),
    ("A eq 1 or B eq 2 or C eq 3", Or(Or(A1, B2), C3)),
    # parentheses
    ("(A eq 1 or B eq 2) and C eq 3", And(Or(A1, B2), C3)),
    ("A eq 1 and (B eq 2 or C eq 3)", And(A1, Or(B2, C3))),
    ("((A eq 1))", A1),
    ("(A eq 1)and(B eq 2)", And(A1, B2)),
    # case-insensitive keywords and operators; whitespace
    ("A EQ 1 AND B Eq 2 OR NOT C eQ 3", Or(And(A1, B2), Not(C3))),
    ("  A   eq\t1  ", A1),
    # bare boolean literals are terms of their own (what .NET's PredicateBuilder sends)
    ("true", Const(True)),
    ("false", Const(False)),
    ("not true", Not(Const(True))),
    ("(true and RowKey eq '1') and (false or PartitionKey eq 'p')",
     And(And(Const(True), C("eq", "RowKey", STRING, "1")), Or(Const(False), C("eq", "PartitionKey", STRING, "p")))),
    ("A eq 1 or FALSE", Or(A1, Const(False))),
    ("(true)", Const(True)),
    # 15 comparisons are allowed, and far more (Azure serves Orleans' 201)
    (" or ".join(["A eq 1"] * 15), None),
    (" or ".join(["A eq 1"] * 15) + " or true", None),
    (" or ".join(["A eq 1"] * 15 + ["true"] * 15), None),
    (" or ".join(["A eq 1"] * 4000), None),
    (" or ".join(f"(PartitionKey eq 'p{i}' and RowKey eq 'r{i}')" for i in range(201)), None),
    # a chain is a balanced tree: four terms, two on each side
    ("A eq 1 or B eq 2 or C eq 3 or A eq 1", Or(Or(A1, B2), Or(C3, A1))),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES)
def test_parse(text: str, expected: object) -> None:
    node = parse_filter(text)
    if expected is not None:
        assert node == expected
    assert parse_filter(describe(node)) == node


# --- errors: (filter, error code, message fragment) ----------------------------------------------

ERROR_CASES = [
    ("Name eq 'abc", "InvalidInput", "Unterminated string literal at position 8"),
    ("Name eq 'it''s", "InvalidInput", "Unterminated string literal at position 8"),
    ("T eq datetime'2008", "InvalidInput", "Unterminated string literal at position 5"),
    ("A foo 1", "InvalidInput", "Expected a comparison operator but found 'foo' at position 2"),
    ("A == 1", "InvalidInput", "Unexpected character '=' at position 2"),
    ("A eq", "InvalidInput", "Expected a property name or literal but found end of filter at position 4"),
    ("eq 1", "InvalidInput", "Expected a property name or literal"),
    ("A eq 2147483648", "InvalidInput", "Unrecognized 'Edm.Int32' literal '2147483648' at position 5"),
    ("A eq -2147483649", "InvalidInput", "Unrecognized 'Edm.Int32' literal"),
    ("A eq 9223372036854775808L", "InvalidInput", "Unrecognized 'Edm.Int64' literal"),
    ("A eq 1e999", "InvalidInput", "Unrecognized 'Edm.Double' literal"),
    ("A eq 1.5L", "InvalidInput", "Unrecognized numeric literal '1.5L'"),
    ("A eq 12abc", "InvalidInput", "Unrecognized numeric literal '12abc'"),
    ("A eq 1.", "InvalidInput", "Unexpected character '.' at position 6"),
    ("G eq guid'1234'", "InvalidInput", "Unrecognized 'Edm.Guid' literal"),
    ("G eq guid'a455c695-df98-5678-aaaa-81d3367e5a3z'", "InvalidInput", "Unrecognized 'Edm.Guid' literal"),
    ("B eq X'ABC'", "InvalidInput", "Unrecognized 'Edm.Binary' literal"),
    ("B eq binary'0g'", "InvalidInput", "Unrecognized 'Edm.Binary' literal"),
    ("T eq datetime'2008-07-10'", "InvalidInput", "Unrecognized 'Edm.DateTime' literal"),
    ("T eq datetime'2008-07-10T00:00:00.12345678Z'", "InvalidInput", "Unrecognized 'Edm.DateTime' literal"),
    ("A eq 1 B", "InvalidInput", "Unexpected 'B' at position 7"),
    ("A eq 1 )", "InvalidInput", "Unexpected ')' at position 7"),
    ("A eq 1 and", "InvalidInput", "found end of filter at position 10"),
    ("(A eq 1", "InvalidInput", "Expected ')' but found end of filter at position 7"),
    ("()", "InvalidInput", "Expected a property name or literal but found ')' at position 1"),
    ("", "InvalidInput", "Empty filter"),
    ("   ", "InvalidInput", "Empty filter"),
    (" or ".join(["A eq 1"] * 4001), "InvalidInput", "More than 4000 comparisons"),
    ("(" * 200 + "A eq 1" + ")" * 200, "InvalidInput", "nested too deeply"),
    ("startswith(Name, 'a')", "NotImplemented", "Function 'startswith' is not supported at position 0"),
    ("substringof('a', Name) eq true", "NotImplemented", "Function 'substringof'"),
    ("endswith(Name, 'a') eq true", "NotImplemented", "Function 'endswith'"),
    ("contains(Name, 'a')", "NotImplemented", "Function 'contains'"),
    ("Name eq tolower ('X')", "NotImplemented", "Function 'tolower' is not supported at position 8"),
    ("A eq 1 and length(Name) gt 2", "NotImplemented", "Function 'length'"),
    ("Price add 5 gt 10", "InvalidInput", "Arithmetic operator 'add' is not supported"),
    ("Price mod 2 eq 0", "InvalidInput", "Arithmetic operator 'mod'"),
    ("A eq null", "InvalidInput", "null literals are not supported at position 5"),
    ("null ne A", "InvalidInput", "null literals are not supported at position 0"),
    ("A eq B", "InvalidInput", "Comparing two properties is not supported at position 0"),
    ("1 eq 1", "InvalidInput", "A comparison needs a property on one side"),
    ("Flag", "InvalidInput", "Property 'Flag' alone is not a condition (write 'Flag eq true') at position 0"),
    ("not Flag", "InvalidInput", "Property 'Flag' alone is not a condition"),
    ("Flag and A eq 1", "InvalidInput", "Property 'Flag' alone is not a condition"),
    ("true eq true", "InvalidInput", "A comparison needs a property on one side"),
    (" or ".join(["true"] * 16), "InvalidInput", "More than 15 true/false terms"),
    (" or ".join(["true"] * 3000), "InvalidInput", "More than 15 true/false terms"),
    ("true add 1", "InvalidInput", "Arithmetic operator 'add'"),
    ("not", "InvalidInput", "found end of filter"),
    ("A eq 1 or or B eq 2", "InvalidInput", "found 'or'"),
    ("Address/City eq 'x'", "InvalidInput", "Unexpected character '/'"),
]


@pytest.mark.parametrize(("text", "code", "message"), ERROR_CASES)
def test_parse_errors(text: str, code: str, message: str) -> None:
    with pytest.raises(TableError) as info:
        parse_filter(text)
    assert info.value.error_code == code
    assert message in info.value.message


# --- evaluation: entities x filters -> bool ------------------------------------------------------

TS = iso_to_ticks("2024-01-01T00:00:00Z")
ENTITIES = {
    "full": ("p1", "r1", TS, {
        "Name": [STRING, "Bob"], "Age": [INT32, 30], "Big": [INT64, 12], "Score": [DOUBLE, 2.5],
        "Flag": [BOOLEAN, True], "When": [DATETIME, iso_to_ticks("2020-05-01T12:00:00Z")],
        "Id": [GUID, GUID_TEXT], "Blob": [BINARY, b"\x01\x02"], "Nan": [DOUBLE, math.nan],
        "Str5": [STRING, "5"],
    }),
    "empty": ("p2", "r2", TS + 1, {}),
    "unicode": ("pé", "r☃", TS, {"Name": [STRING, "bob"], "Age": [INT64, 30]}),
}

EVAL_CASES = [
    # plain comparisons
    ("full", "Name eq 'Bob'", True),
    ("full", "Name ne 'Bob'", False),
    ("full", "Name lt 'bob'", True),  # ordinal: 'B' < 'b'
    ("unicode", "Name gt 'Bob'", True),
    ("full", "Age ge 30 and Age lt 31", True),
    ("full", "Age gt 30", False),
    # missing properties: false for every operator, including ne; not negates the whole thing
    ("empty", "Name eq 'Bob'", False),
    ("empty", "Name ne 'Bob'", False),
    ("empty", "Age lt 100", False),
    ("empty", "not (Name eq 'Bob')", True),
    ("empty", "not (Name ne 'Bob')", True),
    ("empty", "not Age gt 1 and not Age le 1", True),
    ("full", "Missing ne 1 or Age eq 30", True),
    # numeric promotion between Int32, Int64 and Double
    ("full", "Big eq 12", True),
    ("full", "Big eq 12L", True),
    ("full", "Big eq 12.0", True),
    ("full", "Age eq 30L", True),
    ("full", "Age lt 30.5", True),
    ("full", "Score gt 2", True),
    ("full", "Score eq 2.5", True),
    ("full", "Score lt 3L", True),
    ("unicode", "Age eq 30", True),
    # type mismatch: false for every operator, including ne
    ("full", "Age eq '30'", False),
    ("full", "Age ne '30'", False),
    ("full", "Str5 eq 5", False),
    ("full", "Str5 ne 5", False),
    ("full", "Flag eq 1", False),
    ("full", "Flag ne 1", False),
    ("full", "Age ne true", False),
    ("full", "Id eq 'a455c695-df98-5678-aaaa-81d3367e5a34'", False),
    ("full", "When gt 5L", False),
    ("full", "not (Flag ne 1)", True),
    # booleans
    ("full", "Flag eq true", True),
    ("full", "Flag ne true", False),
    ("full", "Flag gt false", True),
    # datetimes compare by ticks
    ("full", "When eq datetime'2020-05-01T12:00:00Z'", True),
    ("full", "When eq datetime'2020-05-01T12:00:00.0000000Z'", True),
    ("full", "When lt datetime'2020-05-01T12:00:00.0000001Z'", True),
    ("full", "When gt datetime'2020-05-01T12:00:00.0000001Z'", False),
    # guids (case-folded literal) and binary
    ("full", f"Id eq guid'{GUID_TEXT.upper()}'", True),
    ("full", "Id ne guid'00000000-0000-0000-0000-000000000000'", True),
    ("full", "Blob eq X'0102'", True),
    ("full", "Blob eq binary'0102'", True),
    ("full", "Blob gt X'01'", True),
    ("full", "Blob lt X'0103'", True),
    # NaN follows IEEE: everything false except ne
    ("full", "Nan eq 1.0", False),
    ("full", "Nan lt 1.0", False),
    ("full", "Nan ge 1.0", False),
    ("full", "Nan ne 1.0", True),
    # PartitionKey, RowKey, Timestamp are addressable but not in props
    ("full", "PartitionKey eq 'p1'", True),
    ("full", "PartitionKey eq 'p1' and RowKey eq 'r1'", True),
    ("full", "RowKey gt 'r1'", False),
    ("unicode", "PartitionKey gt 'pz' and RowKey gt 'rz'", True),  # code point order: é > z, ☃ > z
    ("full", "PartitionKey eq 1", False),
    ("full", "PartitionKey ne 1", False),
    ("full", "Timestamp eq datetime'2024-01-01T00:00:00Z'", True),
    ("empty", "Timestamp gt datetime'2024-01-01T00:00:00Z'", True),
    ("full", "Timestamp gt 5", False),
    # precedence and grouping
    ("full", "Age eq 1 or Age eq 30 and Name eq 'Bob'", True),
    ("full", "(Age eq 1 or Age eq 30) and Name eq 'Nobody'", False),
    ("full", "not Age eq 1 and Name eq 'Bob'", True),
    # bare boolean literals
    ("full", "true", True),
    ("empty", "true", True),
    ("full", "false", False),
    ("full", "not false", True),
    ("full", "(true and RowKey eq 'r1') and (false or PartitionKey eq 'p1')", True),
    ("full", "(true and RowKey eq 'r1') and (false or PartitionKey eq 'p2')", False),
    ("empty", "false or Name eq 'Bob'", False),
]


@pytest.mark.parametrize(("entity", "text", "expected"), EVAL_CASES)
def test_evaluate(entity: str, text: str, expected: bool) -> None:
    pred = compile_filter(parse_filter(text))
    assert pred(*ENTITIES[entity]) is expected


def test_none_filter_and_cache() -> None:
    assert compile_filter(None)("p", "r", 0, {}) is True
    assert compile_cached(None)[0] is None
    node, pred = compile_cached("Age eq 30")
    assert node == C("eq", "Age", INT32, 30) and pred(*ENTITIES["full"])
    assert compile_cached("Age eq 30") is compile_cached("Age eq 30")
    with pytest.raises(TableError):
        compile_cached("Age eq")
    assert count_comparisons(parse_filter("A eq 1 and not (B eq 2 or C eq 3)")) == 3


# --- property tests --------------------------------------------------------------------------------

NAMES = ["A", "B", "Num", "PartitionKey", "RowKey", "Timestamp"]
NUMERIC = {INT32, INT64, DOUBLE}
OPS = ["eq", "ne", "gt", "ge", "lt", "le"]

# Small pools so that random entities and random literals collide often.
VALUE_POOLS = {
    STRING: st.sampled_from(["", "a", "b", "ab", "it's", "é"]),
    INT32: st.integers(-2, 2),
    INT64: st.sampled_from([-(2**63), -1, 0, 1, 2, 2**40]),
    DOUBLE: st.sampled_from([-1.5, 0.0, 1.0, 2.0, 0.5, math.nan, math.inf, -math.inf]),
    BOOLEAN: st.booleans(),
    DATETIME: st.sampled_from([0, 1, 633512448000000000, 3155378975999999999]),
    GUID: st.sampled_from([GUID_TEXT, "00000000-0000-0000-0000-000000000000"]),
    BINARY: st.sampled_from([b"", b"\x00", b"\x01\x02", b"\xff"]),
}
WIDE_POOLS = {
    **VALUE_POOLS,
    STRING: st.text(max_size=8),
    INT32: st.integers(-(2**31), 2**31 - 1),
    INT64: st.integers(-(2**63), 2**63 - 1),
    DOUBLE: st.floats(allow_nan=False, allow_infinity=False),
    DATETIME: st.integers(0, 3155378975999999999),
    BINARY: st.binary(max_size=6),
}


def typed_value(pools: dict) -> st.SearchStrategy:
    return st.sampled_from(sorted(pools)).flatmap(lambda c: pools[c].map(lambda v: (c, v)))


def filters(pools: dict) -> st.SearchStrategy:
    def literal_ok(cv: tuple[int, object]) -> bool:
        return not (cv[0] == DOUBLE and not math.isfinite(cv[1]))

    leaf = st.builds(
        lambda op, prop, cv: Compare(op, prop, cv[0], cv[1]),
        st.sampled_from(OPS),
        st.sampled_from(NAMES),
        typed_value(pools).filter(literal_ok),
    )
    return st.recursive(
        st.one_of(leaf, leaf, leaf, st.builds(Const, st.booleans())),
        lambda sub: st.one_of(st.builds(And, sub, sub), st.builds(Or, sub, sub), st.builds(Not, sub)),
        max_leaves=12,
    )


entities = st.tuples(
    st.sampled_from(["", "a", "b", "ab", "é"]),
    st.sampled_from(["", "a", "b", "ab", "é"]),
    VALUE_POOLS[DATETIME],
    st.dictionaries(st.sampled_from(["A", "B", "Num"]), typed_value(VALUE_POOLS).map(list), max_size=3),
)


def reference_eval(node: object, entity: tuple) -> bool:
    """A deliberately naive evaluator of Azure's semantics."""
    pk, rk, ts, props = entity
    if isinstance(node, And):
        return reference_eval(node.left, entity) and reference_eval(node.right, entity)
    if isinstance(node, Or):
        return reference_eval(node.left, entity) or reference_eval(node.right, entity)
    if isinstance(node, Not):
        return not reference_eval(node.expr, entity)
    if isinstance(node, Const):
        return node.value
    assert isinstance(node, Compare)
    special = {"PartitionKey": [STRING, pk], "RowKey": [STRING, rk], "Timestamp": [DATETIME, ts]}
    prop = special.get(node.prop, props.get(node.prop))
    if prop is None:
        return False
    code, value = prop
    if code != node.code and not (code in NUMERIC and node.code in NUMERIC):
        return False
    a, b = value, node.value
    results = {"eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}
    return results[node.op]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filters(WIDE_POOLS))
def test_describe_parse_round_trip(node: object) -> None:
    text = describe(node)
    assert parse_filter(text) == node
    assert describe(parse_filter(text)) == text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filters(VALUE_POOLS), st.lists(entities, min_size=1, max_size=8))
def test_compiled_matches_reference(node: object, ents: list) -> None:
    pred = compile_filter(node)
    reparsed = compile_filter(parse_filter(describe(node)))
    for ent in ents:
        expected = reference_eval(node, ent)
        assert pred(*ent) is expected
        assert reparsed(*ent) is expected
