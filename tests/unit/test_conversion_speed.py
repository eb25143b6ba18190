"""The fast paths of the REST conversions give exactly what the plain code (or the stdlib) gives.

``json_to_typed``'s annotation fast paths against the EntityProperty conversion, ``parse_json_object``
(orjson plus a duplicate check, :func:`frontend.http.fastpath.parse_json_fast`) against its plain
version :func:`~frontend.http.odata.parse_json_plain` and the stdlib decoder, ``entity_feed``/``entity_text``
(orjson) against ``json.dumps`` of ``typed_to_json``, and the remembered ``$batch`` header parser
against its plain version :func:`~frontend.http.oracles.read_headers`.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.http import batch, odata
from frontend.http.odata import entity_path
from rangetable.edm import MAX_DATETIME_TICKS, MIN_DATETIME_TICKS, iso_to_ticks, ticks_to_iso
from rangetable.errors import TableError
from rangetable.rest_json import json_to_typed, typed_to_json
from rangetable.values import EntityProperty, to_typed
from tests import oracles

# --- json_to_typed ------------------------------------------------------------------------------------

ISO_TEXT = st.one_of(
    st.integers(MIN_DATETIME_TICKS, MAX_DATETIME_TICKS).map(ticks_to_iso),
    st.integers(MIN_DATETIME_TICKS, MAX_DATETIME_TICKS).map(lambda t: ticks_to_iso(t, full=True)),
    st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,8})?)?(Z|[+-]0[01]:00)?", fullmatch=True),
    st.builds("{}T{:02d}:{:02d}:{:02d}{}{}".format, st.dates().map(str), st.integers(0, 25), st.integers(0, 61),
              st.integers(0, 61), st.sampled_from(["", ".5", ".1234567", ".12345678"]), st.sampled_from(["", "Z", "z"])),
    st.text(alphabet="0123456789-T:.Z+ ２", max_size=30),
)
GUID_TEXT = st.one_of(
    st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()), st.uuids().map(lambda u: u.hex),
    st.uuids().map(lambda u: "{" + str(u) + "}"), st.text(alphabet="0123456789abcdefABCDEFg-{} ", max_size=40),
)
INT_TEXT = st.one_of(st.integers(-(2**64), 2**64).map(str), st.text(alphabet="0123456789+- .١", max_size=22))


def _typed_or_code(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except TableError as exc:
        return exc.error_code


def _check_annotated(edm: str, v: Any) -> None:
    got = _typed_or_code(lambda: json_to_typed({"PartitionKey": "p", "RowKey": "r", "x@odata.type": edm, "x": v})[2]["x"])
    want = _typed_or_code(to_typed, EntityProperty(v, edm))
    assert got == want and type(got) is type(want)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.tuples(st.just("Edm.Guid"), GUID_TEXT), st.tuples(st.just("Edm.Int64"), INT_TEXT),
                 st.tuples(st.just("Edm.Double"), st.floats(allow_nan=False, allow_infinity=False))))
def test_annotated_fast_paths_match_entity_property(case: tuple[str, Any]) -> None:
    _check_annotated(*case)


@settings(max_examples=300, deadline=None)
@given(ISO_TEXT)
def test_datetime_fast_path_matches_entity_property(text: str) -> None:
    _check_annotated("Edm.DateTime", text)


@pytest.mark.parametrize("text", ["2024-01-01T00:00:07.000000Z", "2024-02-29T23:59:59.9999999Z", "2008-07-10T00:00:00",
                                  "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.1Z"])
def test_datetime_fast_path_keeps_ticks(text: str) -> None:
    body = {"PartitionKey": "p", "RowKey": "r", "d@odata.type": "Edm.DateTime", "d": text}
    assert json_to_typed(body)[2]["d"] == [5, iso_to_ticks(text)]


def test_bodies_of_one_shape_keep_their_own_values_and_errors() -> None:
    body = {"PartitionKey": "p", "RowKey": "r", "a": 1, "a@odata.type": "Edm.Int64", "b": "x", "odata.etag": "e"}
    assert json_to_typed(body)[2] == {"a": [2, 1], "b": [0, "x"]}
    assert json_to_typed({**body, "a": "7", "b": None})[2] == {"a": [2, 7]}
    assert _typed_or_code(json_to_typed, {**body, "a@odata.type": "Edm.Nope"}) == "InvalidInput"
    assert _typed_or_code(json_to_typed, {**body, "PartitionKey": None}) == "PropertiesNeedValue"
    orphan = {"PartitionKey": "p", "RowKey": "r", "c@odata.type": "Edm.Int64"}
    for _ in range(2):  # the second time from the cached shape
        assert _typed_or_code(json_to_typed, orphan) == "InvalidInput"


# --- parse_json_object -----------------------------------------------------------------------------------


class _Duplicate(Exception):
    pass


def _unique(items: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(dict(items)) != len(items):
        raise _Duplicate
    return dict(items)


def _stdlib_parse(body: bytes) -> Any:
    """What the stdlib decoder makes of a body: the object, or the error code it should give."""
    try:
        doc = json.loads(body, object_pairs_hook=_unique, parse_constant=lambda c: 1 / 0)
    except _Duplicate:
        return "DuplicatePropertiesSpecified"
    except (ValueError, UnicodeDecodeError, RecursionError, ZeroDivisionError):
        return "InvalidInput"
    return doc if isinstance(doc, dict) else "InvalidInput"


def _parsed(body: bytes, parse: Any = odata.parse_json_object) -> Any:
    try:
        return parse(body)
    except TableError as exc:
        return exc.error_code


SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                   st.text(max_size=6), st.sampled_from(["\\", '"', "\x7f", "é"]))
MEMBER = st.tuples(st.sampled_from(["a", "b", "PartitionKey", "x@odata.type", "é", ""]),
                   st.one_of(SCALAR, st.lists(SCALAR, max_size=2), st.dictionaries(st.sampled_from("ab"), SCALAR, max_size=2)))


@settings(max_examples=400, deadline=None)
@given(st.lists(MEMBER, max_size=6), st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]), st.booleans())
def test_parse_json_object_matches_stdlib(members: list, separators: tuple[str, str], ascii_only: bool) -> None:
    body = ("{" + separators[0].join(json.dumps(k) + separators[1] + json.dumps(v, ensure_ascii=ascii_only)
                                       for k, v in members) + "}").encode()
    assert repr(_parsed(body)) == repr(_stdlib_parse(body))  # repr: int vs float and -0.0 count
    assert repr(_parsed(body)) == repr(_parsed(body, odata.parse_json_plain))  # the fast path and the plain one


@pytest.mark.parametrize("body", [b'{"a":123456789012345678901234567890}', b'{"a":-9223372036854775809}',
                                  b'{"a":18446744073709551615}', b'{"a":1e400}', b'\xef\xbb\xbf{"a":1}',
                                  '{"a":1}'.encode("utf-16"), b'{"a":"\\ud800"}', b'{"a":{"b":1},"a":1}'])
def test_parse_json_object_edge_cases_match_stdlib(body: bytes) -> None:
    assert repr(_parsed(body)) == repr(_stdlib_parse(body))
    assert repr(_parsed(body)) == repr(_parsed(body, odata.parse_json_plain))


# --- entity_feed / entity_text ------------------------------------------------------------------------------

# Mostly printable ASCII (orjson's output is used as is), sometimes DEL or non-ASCII (escaped or redone).
CHARS = st.one_of(st.characters(min_codepoint=32, max_codepoint=126), st.characters(exclude_categories=("Cs",)))
KEY = st.one_of(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=8), st.text(CHARS, max_size=8))
TYPED = st.one_of(
    st.tuples(st.just(0), KEY),
    st.tuples(st.just(1), st.integers(-(2**31), 2**31 - 1)), st.tuples(st.just(2), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(3), st.floats()), st.tuples(st.just(3), st.floats(-1e-3, 1e-3)),
    st.tuples(st.just(4), st.booleans()), st.tuples(st.just(5), st.integers(MIN_DATETIME_TICKS, MAX_DATETIME_TICKS)),
    st.tuples(st.just(6), st.uuids().map(str)), st.tuples(st.just(7), st.binary(max_size=8)),
).map(list)
ENTITY = st.tuples(KEY, KEY, st.integers(0, MAX_DATETIME_TICKS),
                   st.dictionaries(st.sampled_from(["A", "b", "c", "Név", "Ω"]), TYPED, max_size=5)).map(list)
LEVELS = {"nometadata": odata.NO, "minimalmetadata": odata.MINIMAL, "fullmetadata": odata.FULL}


def _stdlib_entity(e: list, level: str, select: list[str] | None, base: str = "http://h/acct") -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if level != "nometadata":
        if level == "fullmetadata":
            doc["odata.type"] = "acct.t"
            doc["odata.id"] = f"{base}/" + entity_path("t", e[0], e[1])
        doc["odata.etag"] = odata.etag_of(e[2])
        if level == "fullmetadata":
            doc["odata.editLink"] = entity_path("t", e[0], e[1])
    doc.update(typed_to_json(e[0], e[1], e[2], e[3], level, select))
    return doc


@settings(max_examples=300, deadline=None)
@given(st.lists(ENTITY, max_size=3), st.sampled_from(list(LEVELS)), st.sampled_from([None, ["*"], ["b", "Nope", "Timestamp"]]))
def test_entity_feed_is_byte_identical_to_json_dumps(ents: list, level: str, select: list[str] | None) -> None:
    doc: dict[str, Any] = {} if level == "nometadata" else {"odata.metadata": "http://h/acct/$metadata#t"}
    doc["value"] = [_stdlib_entity(e, level, select) for e in ents]
    want = json.dumps(doc, separators=(",", ":")).encode()
    assert odata.entity_feed(ents, LEVELS[level], "http://h/acct", "acct", "t", select) == want
    for e in ents:
        text = odata.entity_text(e, LEVELS[level], select=select, base="http://h/acct", account="acct", table="t")
        assert text == json.dumps(_stdlib_entity(e, level, select), separators=(",", ":"))


@pytest.mark.parametrize("base", ["http://h/a", "http://h/\u00e9"])  # the second is redone by json.dumps
@pytest.mark.parametrize("s", ["\x7f", "\u00e9 \U0001f600 \u2028", "plain"])
def test_entity_feed_escapes_like_json_dumps(base: str, s: str) -> None:
    props = {"S": [0, s], "Tiny": [3, 1.5e-05], "Zero": [3, -0.0], "Big": [3, 1e16], "Nan": [3, math.nan],
             "G": [6, str(uuid.UUID(int=7))], "I": [1, 3]}
    ents = [["p" + s, "r", 638500000001234567, props], ["p", "r", 1, {"A": [0, "plain"]}]]
    body = odata.entity_feed(ents, odata.MINIMAL, base, "acct", "t", None)
    doc = {"odata.metadata": base + "/$metadata#t", "value": [_stdlib_entity(e, "minimalmetadata", None, base) for e in ents]}
    assert body == json.dumps(doc, separators=(",", ":")).encode()
    assert b"1.5e-05" in body and json.loads(body)["value"][0]["S"] == s


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(st.characters(max_codepoint=127), max_size=8), st.text(max_size=4)), st.text(max_size=4))
def test_edit_link_matches_entity_path(pk: str, rk: str) -> None:
    assert odata.edit_link("t", pk, rk) == entity_path("t", pk, rk)
    assert odata.edit_link("t", "a-b_c.~()*!$&+,;=@:9Z", rk) == entity_path("t", "a-b_c.~()*!$&+,;=@:9Z", rk)


# --- $batch headers -------------------------------------------------------------------------------------------

def _plain_headers(block: bytes) -> dict[str, str] | str:
    try:
        return oracles.read_headers(block)
    except TableError as exc:
        return exc.error_code


LINE = st.one_of(st.sampled_from(["Content-Type: application/http", " X-A : y ", "X:\r", "Name\r : v", "\x0bX: y",
                                  ":x", "x", "  ", "\t", "\xa0", "\x85: v", "a\x0b: b", "X-D:\t v \t\r", "X: a:b", ""]),
                 st.text(st.characters(max_codepoint=255, exclude_characters="\n"), max_size=12))


@settings(max_examples=200, deadline=None)
@given(st.lists(LINE, max_size=6))
def test_batch_headers_fast_match_plain(lines: list[str]) -> None:
    block = "\n".join(lines).encode("latin-1")
    want = _plain_headers(block)
    try:
        got: Any = batch._headers(block)
    except TableError as exc:
        got = exc.error_code
    assert got == want
