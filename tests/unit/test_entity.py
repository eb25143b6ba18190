"""Validation of table names, keys and entities (rangetable.entity)."""

from __future__ import annotations

import pytest

from rangetable.edm import (
    BINARY,
    BOOLEAN,
    DATETIME,
    DOUBLE,
    GUID,
    INT32,
    INT64,
    MAX_DATETIME_TICKS,
    MIN_DATETIME_TICKS,
    STRING,
)
from rangetable.entity import (
    validate_entity,
    validate_key,
    validate_props,
    validate_table_name,
)
from rangetable.errors import TableError
from tests.oracles import entity_size

GUID_TEXT = "c9da6455-213d-42c9-9a79-3e9149a57833"


def fails(code: str, fn, *args) -> TableError:  # type: ignore[no-untyped-def]
    with pytest.raises(TableError) as info:
        fn(*args)
    assert info.value.error_code == code, info.value
    return info.value


# --- keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["", "p", "a" * 512, "é" * 512, "😀" * 256, "a b.c-d_e~f!@$%^&*()", "\u00a0", "\u00a0\uffff", "'quote'"],
)
def test_valid_keys(value: str) -> None:
    validate_key("PartitionKey", value)
    validate_key("RowKey", value)


@pytest.mark.parametrize(
    "value",
    [
        "a" * 513,
        "é" * 513,
        "😀" * 256 + "a",  # 513 UTF-16 code units
        "a/b",
        "a\\b",
        "a#b",
        "a?b",
        "\x00",
        "a\x1fb",
        "\t",
        "\n",
        "\x7f",
        "\x9f",
        "\x85",
        "\ud800",  # lone surrogate
    ],
)
def test_invalid_keys(value: str) -> None:
    fails("InvalidInput", validate_key, "PartitionKey", value)
    fails("InvalidInput", validate_key, "RowKey", value)


@pytest.mark.parametrize("value", [None, 1, 1.5, True, b"x", ["a"]])
def test_keys_must_be_strings(value: object) -> None:
    err = fails("InvalidInput", validate_key, "RowKey", value)
    assert "RowKey" in err.message


def test_key_messages_name_the_key() -> None:
    assert "PartitionKey" in fails("InvalidInput", validate_key, "PartitionKey", "x" * 600).message
    assert "RowKey" in fails("InvalidInput", validate_key, "RowKey", "a/b").message


# --- property names and count ------------------------------------------------------------------


def test_property_count_limit() -> None:
    validate_props({f"p{i}": [INT32, i] for i in range(252)})
    fails("TooManyProperties", validate_props, {f"p{i}": [INT32, i] for i in range(253)})


@pytest.mark.parametrize("name", ["a", "_", "_x1", "Name", "a" * 255, "Ünïcödé", "名前", "x_9_y"])
def test_valid_property_names(name: str) -> None:
    validate_props({name: [STRING, "v"]})


def test_property_name_too_long() -> None:
    fails("PropertyNameTooLong", validate_props, {"a" * 256: [STRING, "v"]})


@pytest.mark.parametrize(
    "name",
    ["", "123", "1a", "a-b", "a b", "a.b", "a@odata.type", "odata.etag", "$x", "ä-", 5, None],
)
def test_invalid_property_names(name: object) -> None:
    fails("PropertyNameInvalid", validate_props, {name: [STRING, "v"]})


@pytest.mark.parametrize("name", ["PartitionKey", "RowKey", "Timestamp"])
def test_reserved_property_names(name: str) -> None:
    fails("PropertyNameInvalid", validate_props, {name: [STRING, "v"]})


def test_name_cache_does_not_hide_errors() -> None:
    validate_props({"cached": [STRING, "v"]})
    validate_props({"cached": [STRING, "v"]})
    fails("InvalidValueType", validate_props, {"cached": [INT32, "v"]})


# --- values ------------------------------------------------------------------------------------

VALID_VALUES = [
    [STRING, ""],
    [STRING, "a" * 32768],
    [STRING, "é" * 32768],
    [STRING, "😀" * 16384],
    [INT32, -(2**31)],
    [INT32, 2**31 - 1],
    [INT64, -(2**63)],
    [INT64, 2**63 - 1],
    [DOUBLE, 0.0],
    [DOUBLE, float("nan")],
    [DOUBLE, float("inf")],
    [DOUBLE, float("-inf")],
    [BOOLEAN, True],
    [BOOLEAN, False],
    [DATETIME, MIN_DATETIME_TICKS],
    [DATETIME, MAX_DATETIME_TICKS],
    [GUID, GUID_TEXT],
    [BINARY, b""],
    [BINARY, b"\x00" * 65536],
    (INT32, 1),  # a tuple pair is fine too
]


@pytest.mark.parametrize("pair", VALID_VALUES, ids=repr)
def test_valid_values(pair: list) -> None:
    validate_props({"v": pair})


@pytest.mark.parametrize(
    "pair,code",
    [
        ([STRING, "a" * 32769], "PropertyValueTooLarge"),
        ([STRING, "é" * 32769], "PropertyValueTooLarge"),
        ([STRING, "😀" * 16384 + "a"], "PropertyValueTooLarge"),
        ([BINARY, b"\x00" * 65537], "PropertyValueTooLarge"),
        ([INT32, 2**31], "InvalidInput"),
        ([INT32, -(2**31) - 1], "InvalidInput"),
        ([INT64, 2**63], "InvalidInput"),
        ([INT64, -(2**63) - 1], "InvalidInput"),
        ([DATETIME, MIN_DATETIME_TICKS - 1], "InvalidInput"),
        ([DATETIME, MAX_DATETIME_TICKS + 1], "InvalidInput"),
        ([GUID, GUID_TEXT.upper()], "InvalidInput"),
        ([GUID, "{" + GUID_TEXT + "}"], "InvalidInput"),
        ([GUID, GUID_TEXT.replace("-", "")], "InvalidInput"),
        ([GUID, GUID_TEXT[:-1] + "g"], "InvalidInput"),
        ([STRING, "bad\ud800"], "InvalidInput"),
        ([8, "x"], "InvalidInput"),
        ([-1, "x"], "InvalidInput"),
        (["Edm.String", "x"], "InvalidInput"),
        ([STRING], "InvalidInput"),
        ([STRING, "x", 1], "InvalidInput"),
        ("xx", "InvalidInput"),
        (None, "InvalidInput"),
        ([STRING, 1], "InvalidValueType"),
        ([STRING, b"x"], "InvalidValueType"),
        ([INT32, True], "InvalidValueType"),
        ([INT32, 1.0], "InvalidValueType"),
        ([INT32, "1"], "InvalidValueType"),
        ([INT64, False], "InvalidValueType"),
        ([DOUBLE, 1], "InvalidValueType"),
        ([DOUBLE, "1.0"], "InvalidValueType"),
        ([BOOLEAN, 1], "InvalidValueType"),
        ([BOOLEAN, "true"], "InvalidValueType"),
        ([DATETIME, 1.0], "InvalidValueType"),
        ([DATETIME, "2020-01-01T00:00:00Z"], "InvalidValueType"),
        ([GUID, 5], "InvalidValueType"),
        ([BINARY, bytearray(b"x")], "InvalidValueType"),
        ([BINARY, "eA=="], "InvalidValueType"),
    ],
    ids=repr,
)
def test_invalid_values(pair: object, code: str) -> None:
    fails(code, validate_props, {"v": pair})


def test_props_must_be_a_dict() -> None:
    fails("InvalidInput", validate_props, [("a", [STRING, "x"])])


# --- entity size -------------------------------------------------------------------------------


def test_entity_size_formula() -> None:
    props = {
        "s": [STRING, "abc"],  # 8+2 + 2*3+4
        "b": [BINARY, b"12345"],  # 8+2 + 5+4
        "d": [DATETIME, MIN_DATETIME_TICKS],  # 8+2 + 8
        "l": [INT64, 1],  # 8+2 + 8
        "f": [DOUBLE, 1.0],  # 8+2 + 8
        "g": [GUID, GUID_TEXT],  # 8+2 + 16
        "i": [INT32, 1],  # 8+2 + 4
        "t": [BOOLEAN, True],  # 8+2 + 1
    }
    expected = 4 + 2 * (2 + 3) + 8 * 10 + 10 + 9 + 8 + 8 + 8 + 16 + 4 + 1
    assert entity_size("pk", "row", props) == expected
    assert entity_size("", "", {}) == 4
    assert entity_size("😀", "", {"x": [STRING, "😀"]}) == 4 + 4 + 8 + 2 + 4 + 4


def _entity_of_size(target: int) -> dict[str, list]:
    """Props that make entity_size("p", "r", props) exactly ``target`` (binary filler)."""
    props: dict[str, list] = {}
    base = 4 + 2 * 2
    i = 0
    while True:
        name = f"b{i:02d}"
        overhead = 8 + 2 * len(name) + 4
        remaining = target - base - entity_size("", "", props) + 4
        if remaining <= 65536 + overhead:
            props[name] = [BINARY, b"\x00" * (remaining - overhead)]
            return props
        props[name] = [BINARY, b"\x00" * 65536]
        i += 1


def test_entity_size_limit() -> None:
    at_limit = _entity_of_size(1048576)
    assert entity_size("p", "r", at_limit) == 1048576
    validate_entity("p", "r", at_limit)
    over = _entity_of_size(1048577)
    assert entity_size("p", "r", over) == 1048577
    fails("EntityTooLarge", validate_entity, "p", "r", over)


def test_validate_entity_checks_keys_and_props() -> None:
    validate_entity("", "", {})
    validate_entity("p", "r", {"a": [STRING, "x"], "b": [INT64, 5]})
    fails("InvalidInput", validate_entity, "p/", "r", {})
    fails("InvalidInput", validate_entity, "p", "r#", {})
    fails("PropertyNameInvalid", validate_entity, "p", "r", {"RowKey": [STRING, "x"]})
    fails("InvalidInput", validate_entity, 1, "r", {})


def test_validate_entity_accepts_a_typical_entity() -> None:
    props = {
        "Name": [STRING, "Alice Example"],
        "Age": [INT32, 23],
        "Big": [INT64, 2**40],
        "Amount": [DOUBLE, 200.5],
        "Active": [BOOLEAN, True],
        "When": [DATETIME, 633506688000000000],
        "Id": [GUID, GUID_TEXT],
        "Raw": [BINARY, b"\x01\x02"],
        "City": [STRING, "Zürich"],
        "Count": [INT32, 7],
    }
    validate_entity("partition", "row", props)  # speed is measured by `rangetable bench store`, not asserted


# --- table names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["abc", "A12", "Customers", "a" * 63, "MyTable2024", "tables1", "Tabless"])
def test_valid_table_names(name: str) -> None:
    validate_table_name(name)


@pytest.mark.parametrize(
    "name,code",
    [
        ("ab", "OutOfRangeInput"),
        ("a", "OutOfRangeInput"),
        ("", "OutOfRangeInput"),
        ("a" * 64, "OutOfRangeInput"),
        ("1abc", "InvalidResourceName"),
        ("12", "InvalidResourceName"),
        ("a-bc", "InvalidResourceName"),
        ("a_bc", "InvalidResourceName"),
        ("abc ", "InvalidResourceName"),
        ("$MetricsHourPrimaryTransactionsTable", "InvalidResourceName"),
        ("tablé", "InvalidResourceName"),
        ("tables", "InvalidResourceName"),
        ("Tables", "InvalidResourceName"),
        ("TABLES", "InvalidResourceName"),
        (None, "InvalidResourceName"),
        (123, "InvalidResourceName"),
    ],
)
def test_invalid_table_names(name: object, code: str) -> None:
    fails(code, validate_table_name, name)
