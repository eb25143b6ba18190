"""The scan prefilter (partition_server/store/prefilter.py), a fast path: the byte strings a stored value must
hold for a filter's equalities to hold, and scans with it give exactly the pages the plain path (decode every
value, run the predicate) gives, on generated entities and filters."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from partition_server.store.prefilter import Needles, matcher, needles
from partition_server.store.range_store import RangeStore
from rangetable import protocol
from rangetable.edm import BOOLEAN, DOUBLE, INT32, INT64, STRING
from rangetable.filter import compile_cached, parse_cached


def _needles(text: str) -> tuple:
    return needles(parse_cached(text))


def test_needles_of_the_equalities_that_must_hold() -> None:
    cat = protocol.pack("Cat")
    assert _needles("Cat eq 'c1'") == ((cat + protocol.pack([STRING, "c1"]),),)
    assert _needles("Cat eq 'c1' and (x gt 3 and ok eq true)") == (
        (cat + protocol.pack([STRING, "c1"]),), (protocol.pack("ok") + protocol.pack([BOOLEAN, True]),))
    n = protocol.pack("n")
    assert _needles("n eq 7") == ((n + protocol.pack([INT32, 7]), n + protocol.pack([INT64, 7]),
                                   n + protocol.pack([DOUBLE, 7.0])),)
    assert _needles("n eq 7.5") == ((n + protocol.pack([DOUBLE, 7.5]),),)
    assert _needles("n eq 0.0")[0][-1] == n + protocol.pack([DOUBLE, -0.0])  # 0 and -0.0 are equal
    assert _needles("n eq 5000000000L") == ((n + protocol.pack([INT64, 5_000_000_000]),
                                             n + protocol.pack([DOUBLE, 5e9])),)
    for none in ("Cat eq 'a' or x eq 1", "not (Cat eq 'a')", "Cat ne 'a'", "PartitionKey eq 'a'",
                 "Timestamp eq datetime'2020-01-01T00:00:00Z'", "g eq guid'00000000-0000-0000-0000-000000000001'",
                 "d eq datetime'2020-01-01T00:00:00Z'", "b eq X'00ff'"):
        assert _needles(none) == (), none


def may_match(value: bytes, wanted: Needles) -> bool:
    """The plain test :func:`matcher` is the fast one of: one form of every group occurs in the value."""
    return all(any(n in value for n in group) for group in wanted)


def test_the_matcher_needs_one_form_of_every_group() -> None:
    value = protocol.pack([1, {"Cat": [STRING, "c1"], "n": [DOUBLE, 7.0], "s": [STRING, "a|b.*"]}])
    for text, want in (("Cat eq 'c1' and n eq 7", True), ("Cat eq 'c2' and n eq 7", False),
                       ("Cat eq 'c1' and n eq 8", False), ("n eq 7", True), ("n eq 7.5", False),
                       ("s eq 'a|b.*'", True), ("s eq 'a'", False)):  # the regex escapes what it looks for
        assert matcher(_needles(text))(value) is want is may_match(value, _needles(text)), text


NAMES = ("a", "b", "Cat")
VALUES = st.one_of(
    st.tuples(st.just(STRING), st.sampled_from(["", "x", "c1", "c10", "é", "a" * 40])),
    st.tuples(st.just(INT32), st.integers(-3, 3)),
    st.tuples(st.just(INT64), st.sampled_from([-1, 0, 1, 3, 2**40])),
    st.tuples(st.just(DOUBLE), st.sampled_from([0.0, -0.0, 1.0, 3.0, 2.5, -1.0, 2.0**40, math.nan])),
    st.tuples(st.just(BOOLEAN), st.booleans()),
)
LITERALS = st.sampled_from(["''", "'x'", "'c1'", "'é'", "0", "1", "3", "-1", "2.5", "0.0", "-0.0", "3.0",
                            "1099511627776L", "true", "false", "1L"])
ENTITIES = st.lists(st.dictionaries(st.sampled_from(NAMES), VALUES.map(list), max_size=3), min_size=1, max_size=40)


@st.composite
def filters(draw: st.DrawFn) -> str:
    terms = [f"{draw(st.sampled_from(NAMES))} eq {draw(LITERALS)}" for _ in range(draw(st.integers(1, 3)))]
    glue = draw(st.sampled_from([" and ", " and ", " or "]))
    text = glue.join(terms)
    if draw(st.booleans()):
        text = f"({text}) and {draw(st.sampled_from(NAMES))} ne {draw(LITERALS)}"
    return text


@settings(max_examples=300, deadline=None)
@given(ENTITIES, filters(), st.integers(1, 50))
def test_scans_with_the_prefilter_page_as_the_plain_path(tmp_path_factory, rows, text, limit) -> None:
    store = RangeStore.open(tmp_path_factory.mktemp("s"))
    try:
        for i, props in enumerate(rows):
            store.write({"op": "insert", "pk": f"p{i % 3}", "rk": f"r{i:03d}", "props": props})
        _, pred = compile_cached(text)
        wanted = _needles(text)
        if wanted:
            values = [v for k, v in store._db.items() if not k.startswith(b"\xff")]
            assert [matcher(wanted)(v) for v in values] == [may_match(v, wanted) for v in values]
        lo: bytes | None = b""
        while lo is not None:
            plain = store.scan(lo, None, pred, None, limit=limit, wire=True)
            fast = store.scan(lo, None, pred, None, limit=limit, wire=True, wanted=wanted)
            assert fast == plain, text
            lo = plain[1]
    finally:
        store.close()
