"""The SDK-shaped value layer (rangetable.values): Python ⇄ typed, checked against the SDK (the JSON form:
``test_values_rest_json.py``)."""

from __future__ import annotations

import copy
import math
import pickle
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from azure.data.tables import EdmType as AzEdmType
from azure.data.tables import EntityProperty as AzEntityProperty
from azure.data.tables import TableEntity as AzTableEntity
from azure.data.tables._deserialize import TablesEntityDatetime, _convert_to_entity
from azure.data.tables._serialize import _add_entity_properties

from rangetable.edm import (
    BINARY,
    BOOLEAN,
    DATETIME,
    DOUBLE,
    GUID,
    INT32,
    INT64,
    STRING,
    datetime_to_ticks,
    etag_from_ticks,
)
from rangetable.entity import validate_entity
from rangetable.values import (
    EdmType,
    EntityProperty,
    TableEntity,
    TablesDatetime,
    entity_to_typed,
    from_typed,
    to_typed,
    typed_to_entity,
)
from tests.unit.value_samples import (
    DT,
    DT_TICKS,
    EP,
    II,
    INF,
    STORED,
    TICKS7,
    TS,
    Color,
    E,
    G,
    Level,
    Name,
    U,
    fails,
)


def same(a: Any, b: Any) -> bool:
    """Equality that also holds for NaN and checks the Python type."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


# --- Python value -> typed -> Python -------------------------------------------------------------

INT64_OF = {v: EntityProperty(v, EdmType.INT64) for v in (2**31, -(2**31) - 1, 2**63 - 1, -(2**63))}
# fmt: off
ROUND_TRIPS = [
    ("s", [STRING, "s"], "s"), ("", [STRING, ""], ""), ("😀é", [STRING, "😀é"], "😀é"),
    (True, [BOOLEAN, True], True), (False, [BOOLEAN, False], False),
    (0, [INT32, 0], 0), (2**31 - 1, [INT32, 2**31 - 1], 2**31 - 1), (-(2**31), [INT32, -(2**31)], -(2**31)),
    *[(v, [INT64, v], ep) for v, ep in INT64_OF.items()],
    (1.5, [DOUBLE, 1.5], 1.5), (5.0, [DOUBLE, 5.0], 5.0), (-0.0, [DOUBLE, -0.0], -0.0),
    (INF, [DOUBLE, INF], INF), (-INF, [DOUBLE, -INF], -INF),
    (DT, [DATETIME, DT_TICKS], DT),
    (DT.replace(tzinfo=None), [DATETIME, DT_TICKS], DT),  # naive is UTC
    (DT.astimezone(timezone(timedelta(hours=2))), [DATETIME, DT_TICKS], DT),
    (TablesDatetime.from_ticks(TICKS7), [DATETIME, TICKS7], TablesDatetime.from_ticks(TICKS7)),
    (U, [GUID, G], U),
    (b"", [BINARY, b""], b""), (b"\x00\xff", [BINARY, b"\x00\xff"], b"\x00\xff"),
    (bytearray(b"ab"), [BINARY, b"ab"], b"ab"), (memoryview(b"ab"), [BINARY, b"ab"], b"ab"),
    (Color.RED, [STRING, "Color.RED"], "Color.RED"),  # the SDK sends str(member)
    (Level.HIGH, [STRING, str(Level.HIGH)], str(Level.HIGH)), (Name.BOB, [STRING, "bob"], "bob"),
]
# fmt: on


@pytest.mark.parametrize("value,pair,back", ROUND_TRIPS, ids=repr)
def test_round_trip(value: Any, pair: list, back: Any) -> None:
    typed = to_typed(value)
    assert typed == pair and all(type(x) is type(y) for x, y in zip(typed, pair, strict=True))
    result = from_typed(typed)
    assert same(result, back) or (isinstance(back, datetime) and result == back)
    if isinstance(back, datetime):
        assert isinstance(result, TablesDatetime) and result.tzinfo is not None
        assert to_typed(result) == pair  # and back again, keeping every tick
    validate_entity("p", "r", {"v": typed})


def test_nan_round_trip() -> None:
    pair = to_typed(float("nan"))
    assert pair is not None and pair[0] == DOUBLE and math.isnan(pair[1])
    assert math.isnan(from_typed(pair))


def test_enum_matches_sdk() -> None:
    for member in (Color.RED, Level.HIGH, Name.BOB):
        assert to_typed(member) == [STRING, _add_entity_properties({"x": member})["x"]]


def test_none_is_absent() -> None:
    assert to_typed(None) is None
    assert to_typed(EntityProperty(None, EdmType.INT64)) is None


# fmt: off
@pytest.mark.parametrize("value,code", [
    (2**63, II), (-(2**63) - 1, II),
    (object(), "InvalidValueType"), ([1, 2], "InvalidValueType"), ({"a": 1}, "InvalidValueType"),
    (Decimal("1.5"), "InvalidValueType"), (DT.date(), "InvalidValueType"), ((1, 2, 3), "InvalidValueType"),
    (EP(1, "Edm.Decimal"), II), (EP(1, 5), II),
    (EP("abc", E.INT32), II), (EP(2**31, E.INT32), II), (EP(2**63, E.INT64), II),
    (EP("9223372036854775808", E.INT64), II), (EP(1.5, E.INT64), II), (EP(True, E.INT64), II),
    (EP("x", E.DOUBLE), II), (EP("nan", E.DOUBLE), II), (EP(True, E.DOUBLE), II),
    (EP("maybe", E.BOOLEAN), II), (EP(1, E.BOOLEAN), II),
    (EP("not a date", E.DATETIME), II), (EP(5, E.DATETIME), II),
    (EP("xyz", E.GUID), II), (EP(5, E.GUID), II), (EP(5, E.BINARY), II),
], ids=repr)
# fmt: on
def test_to_typed_errors(value: Any, code: str) -> None:
    fails(code, to_typed, value)


# fmt: off
@pytest.mark.parametrize("prop,pair", [
    (EP("123", E.INT64), [INT64, 123]), (EP(5, E.INT64), [INT64, 5]),
    (EP("-9223372036854775808", E.INT64), [INT64, -(2**63)]),
    (EP(5, E.INT32), [INT32, 5]), (EP(" 5", E.INT32), [INT32, 5]), (EP(5.0, E.INT32), [INT32, 5]),
    (EP(5, E.DOUBLE), [DOUBLE, 5.0]), (EP("3.5", E.DOUBLE), [DOUBLE, 3.5]),
    (EP("-Infinity", E.DOUBLE), [DOUBLE, -INF]),
    (EP(True, E.BOOLEAN), [BOOLEAN, True]), (EP("False", E.BOOLEAN), [BOOLEAN, False]),
    (EP("2013-08-22T01:12:06.2608595Z", E.DATETIME), [DATETIME, TICKS7]),
    (EP("2008-07-10T12:30:15.123456", E.DATETIME), [DATETIME, DT_TICKS]),
    (EP(DT, E.DATETIME), [DATETIME, DT_TICKS]),
    (EP(G.upper(), E.GUID), [GUID, G]), (EP(U, E.GUID), [GUID, G]),
    (EP("abc", E.BINARY), [BINARY, b"abc"]),  # the SDK sends a str as its UTF-8 bytes
    (EP(b"x", E.BINARY), [BINARY, b"x"]),
    (EP(5, E.STRING), [STRING, "5"]), (EP("x", "Edm.String"), [STRING, "x"]),
    (EP("7", "edm.int64"), [INT64, 7]), (AzEntityProperty("7", AzEdmType.INT64), [INT64, 7]),
    (("7", "Edm.Int64"), [INT64, 7]),
], ids=repr)
# fmt: on
def test_entity_property_conversion(prop: Any, pair: list) -> None:
    assert to_typed(prop) == pair


def test_entity_property_is_sdk_compatible() -> None:
    assert EntityProperty._fields == AzEntityProperty._fields == ("value", "edm_type")
    assert from_typed([INT64, 5]) == AzEntityProperty(5, AzEdmType.INT64)
    assert EdmType.INT64 == AzEdmType.INT64 == "Edm.Int64"
    assert {m.name for m in EdmType} == {m.name for m in AzEdmType}


# --- datetimes -----------------------------------------------------------------------------------


def test_tables_datetime() -> None:
    d = TablesDatetime.from_ticks(TICKS7)
    assert d == datetime(2013, 8, 22, 1, 12, 6, 260859, tzinfo=UTC)
    assert d.ticks == TICKS7
    assert d.tables_service_value == "2013-08-22T01:12:06.2608595Z"
    assert pickle.loads(pickle.dumps(d)).ticks == TICKS7
    assert copy.deepcopy(d).ticks == TICKS7 and copy.copy(d).ticks == TICKS7
    later = d + timedelta(seconds=1)  # arithmetic keeps µs only
    assert later.ticks == datetime_to_ticks(later) == TICKS7 - 5 + 10_000_000
    assert to_typed(later) == [DATETIME, TICKS7 - 5 + 10_000_000]
    assert to_typed(d.replace(microsecond=0))[1] == TICKS7 - 2608595


def test_sdk_datetime_keeps_100ns() -> None:
    wire = {"PartitionKey": "p", "RowKey": "r", "W@odata.type": "Edm.DateTime", "W": "2013-08-22T01:12:06.2608595Z"}
    sdk_dt = _convert_to_entity(wire)["W"]
    assert isinstance(sdk_dt, TablesEntityDatetime)
    assert to_typed(sdk_dt) == [DATETIME, TICKS7]
    stale = TablesEntityDatetime(2020, 1, 1, tzinfo=UTC)
    stale._service_value = "2013-08-22T01:12:06.2608595Z"  # disagrees with the datetime: ignored
    assert to_typed(stale) == [DATETIME, datetime_to_ticks(datetime(2020, 1, 1, tzinfo=UTC))]
    plain = TablesEntityDatetime(2020, 1, 1, tzinfo=UTC)
    assert to_typed(plain)[1] == datetime_to_ticks(datetime(2020, 1, 1))


# --- entities ------------------------------------------------------------------------------------


def test_table_entity() -> None:
    e = TableEntity(a=1)
    assert isinstance(e, dict) and e == {"a": 1}
    assert e.metadata == {"etag": None, "timestamp": None} == AzTableEntity().metadata


def test_entity_to_typed() -> None:
    # fmt: off
    entity = {"PartitionKey": "p", "RowKey": "", "Timestamp": DT, "timestamp": DT, "odata.etag": "W/x",
              "Missing": None, "Big": EntityProperty(5, EdmType.INT64), "Name": "n"}
    # fmt: on
    expected = {"timestamp": [DATETIME, DT_TICKS], "Big": [INT64, 5], "Name": [STRING, "n"]}
    assert entity_to_typed(entity) == ("p", "", expected)
    assert entity_to_typed(AzTableEntity(PartitionKey="a", RowKey="b", x=1)) == ("a", "b", {"x": [INT32, 1]})
    assert entity_to_typed({"PartitionKey": EntityProperty("p", EdmType.STRING), "RowKey": "r"})[0] == "p"


@pytest.mark.parametrize(
    "entity,code",
    [
        ({"RowKey": "r"}, "PropertiesNeedValue"),
        ({"PartitionKey": "p"}, "PropertiesNeedValue"),
        ({"PartitionKey": None, "RowKey": "r"}, "PropertiesNeedValue"),
        ({"PartitionKey": 1, "RowKey": "r"}, "InvalidInput"),
        ({"PartitionKey": "p", "RowKey": b"r"}, "InvalidInput"),
        ({"PartitionKey": "p", "RowKey": EntityProperty(1, EdmType.INT32)}, "InvalidInput"),
        ({"PartitionKey": "p", "RowKey": "r", "x": object()}, "InvalidValueType"),
    ],
    ids=repr,
)
def test_entity_to_typed_errors(entity: dict, code: str) -> None:
    fails(code, entity_to_typed, entity)


def test_typed_to_entity() -> None:
    e = typed_to_entity(STORED)
    assert isinstance(e, TableEntity) and "Timestamp" not in e
    assert list(e)[:2] == ["PartitionKey", "RowKey"] and e["Age"] == 23 and e["Raw"] == b"\x01\x02"
    assert e["Big"] == EntityProperty(1099511627776, EdmType.INT64) and e["Id"] == U
    assert isinstance(e["Exact"], TablesDatetime) and e["Exact"].ticks == TICKS7
    assert e.metadata["etag"] == etag_from_ticks(TS) and e.metadata["timestamp"].ticks == TS
    assert e.metadata is e.metadata  # made on first use (the fast path), then kept: a caller's change stays
    lazy = typed_to_entity(STORED)
    assert copy.copy(lazy).metadata == e.metadata == lazy.metadata  # a copy made before first use makes it too
    assert typed_to_entity(STORED, include_timestamp=True)["Timestamp"].ticks == TS
    sel = typed_to_entity(STORED, ["Age", "Nope", "RowKey"])
    assert sel == {"RowKey": "r", "Age": 23, "Nope": None} and sel.metadata["timestamp"] is None
    assert typed_to_entity(STORED, ["Timestamp"]).metadata["timestamp"].ticks == TS
    assert typed_to_entity(STORED, ["Timestamp"], include_timestamp=True) == {
        "Timestamp": TablesDatetime.from_ticks(TS)
    }
