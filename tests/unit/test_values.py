"""The SDK-shaped value layer (rangetable.values): Python ⇄ typed ⇄ JSON, checked against the SDK."""

from __future__ import annotations

import copy
import enum
import json
import math
import pickle
import uuid
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
    Entity,
    datetime_to_ticks,
    etag_from_ticks,
    iso_to_ticks,
)
from rangetable.entity import validate_entity
from rangetable.errors import TableError
from rangetable.rest_json import json_to_typed, typed_to_json
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

U = uuid.UUID("c9da6455-213d-42c9-9a79-3e9149a57833")
G = str(U)
DT = datetime(2008, 7, 10, 12, 30, 15, 123456, tzinfo=UTC)
DT_TICKS = datetime_to_ticks(DT)
TICKS7 = iso_to_ticks("2013-08-22T01:12:06.2608595Z")
TS = iso_to_ticks("2024-01-02T03:04:05.1234567Z")


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


class Name(enum.StrEnum):
    BOB = "bob"


def same(a: Any, b: Any) -> bool:
    """Equality that also holds for NaN and checks the Python type."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def fails(code: str, fn: Any, *args: Any, **kwargs: Any) -> TableError:
    with pytest.raises(TableError) as info:
        fn(*args, **kwargs)
    assert info.value.error_code == code, info.value
    return info.value


# --- Python value -> typed -> Python -------------------------------------------------------------

INT64_OF = {v: EntityProperty(v, EdmType.INT64) for v in (2**31, -(2**31) - 1, 2**63 - 1, -(2**63))}
INF = float("inf")
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


EP, E = EntityProperty, EdmType
II = "InvalidInput"


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


# fmt: off
STORED = Entity("p", "r", TS, {
    "Age": [INT32, 23], "Amount": [DOUBLE, 200.5], "Whole": [DOUBLE, 5.0],
    "Nan": [DOUBLE, float("nan")], "Inf": [DOUBLE, INF], "Big": [INT64, 1099511627776],
    "When": [DATETIME, iso_to_ticks("2008-07-10T00:00:00Z")], "Exact": [DATETIME, TICKS7],
    "Id": [GUID, G], "Raw": [BINARY, b"\x01\x02"], "Ok": [BOOLEAN, True], "Name": [STRING, "n"],
})
# fmt: on


def test_typed_to_entity() -> None:
    e = typed_to_entity(STORED)
    assert isinstance(e, TableEntity) and "Timestamp" not in e
    assert list(e)[:2] == ["PartitionKey", "RowKey"] and e["Age"] == 23 and e["Raw"] == b"\x01\x02"
    assert e["Big"] == EntityProperty(1099511627776, EdmType.INT64) and e["Id"] == U
    assert isinstance(e["Exact"], TablesDatetime) and e["Exact"].ticks == TICKS7
    assert e.metadata["etag"] == etag_from_ticks(TS) and e.metadata["timestamp"].ticks == TS
    assert typed_to_entity(STORED, include_timestamp=True)["Timestamp"].ticks == TS
    sel = typed_to_entity(STORED, ["Age", "Nope", "RowKey"])
    assert sel == {"RowKey": "r", "Age": 23, "Nope": None} and sel.metadata["timestamp"] is None
    assert typed_to_entity(STORED, ["Timestamp"]).metadata["timestamp"].ticks == TS
    assert typed_to_entity(STORED, ["Timestamp"], include_timestamp=True) == {
        "Timestamp": TablesDatetime.from_ticks(TS)
    }


# --- JSON input ------------------------------------------------------------------------------------


def body(**props: Any) -> dict[str, Any]:
    return {"PartitionKey": "p", "RowKey": "r", **props}


def dec(**props: Any) -> dict[str, list]:
    return json_to_typed(body(**props))[2]


def ann(name: str, edm: str, value: Any) -> dict[str, Any]:
    return {name + "@odata.type": edm, name: value}


D0 = [DATETIME, iso_to_ticks("2008-07-10T00:00:00Z")]


# fmt: off
@pytest.mark.parametrize("props,expected", [
    ({"s": "x"}, [STRING, "x"]), ({"b": False}, [BOOLEAN, False]),
    ({"i": 2**31 - 1}, [INT32, 2**31 - 1]), ({"i": -(2**31)}, [INT32, -(2**31)]),
    ({"f": 5.0}, [DOUBLE, 5.0]), ({"f": 1e308}, [DOUBLE, 1e308]),
    (ann("s", "Edm.String", "x"), [STRING, "x"]),
    (ann("i", "Edm.Int32", 12345), [INT32, 12345]), (ann("i", "Edm.Int32", "12345"), [INT32, 12345]),
    (ann("i", "Edm.Int32", "-2147483648"), [INT32, -(2**31)]),
    (ann("l", "Edm.Int64", "9223372036854775807"), [INT64, 2**63 - 1]),
    (ann("l", "Edm.Int64", "-9223372036854775808"), [INT64, -(2**63)]), (ann("l", "Edm.Int64", 255), [INT64, 255]),
    (ann("f", "Edm.Double", "NaN"), None),  # checked separately (NaN != NaN)
    (ann("f", "Edm.Double", "Infinity"), [DOUBLE, INF]), (ann("f", "Edm.Double", "-Infinity"), [DOUBLE, -INF]),
    (ann("f", "Edm.Double", "3.14"), [DOUBLE, 3.14]), (ann("f", "Edm.Double", 5), [DOUBLE, 5.0]),
    (ann("f", "Edm.Double", 2.5e-3), [DOUBLE, 2.5e-3]),
    (ann("b", "Edm.Boolean", "False"), [BOOLEAN, False]), (ann("b", "Edm.Boolean", "TRUE"), [BOOLEAN, True]),
    (ann("b", "Edm.Boolean", True), [BOOLEAN, True]),
    (ann("d", "Edm.DateTime", "2008-07-10T00:00:00Z"), D0), (ann("d", "Edm.DateTime", "2008-07-10T00:00:00"), D0),
    (ann("d", "Edm.DateTime", "2013-08-22T01:12:06.2608595Z"), [DATETIME, TICKS7]),
    (ann("d", "Edm.DateTime", "2008-07-10T12:30:15.123456+00:00"), [DATETIME, DT_TICKS]),
    (ann("g", "Edm.Guid", G), [GUID, G]), (ann("g", "Edm.Guid", G.upper()), [GUID, G]),
    (ann("x", "Edm.Binary", "AQI="), [BINARY, b"\x01\x02"]), (ann("x", "Edm.Binary", ""), [BINARY, b""]),
], ids=repr)
# fmt: on
def test_json_decode(props: dict, expected: list | None) -> None:
    typed = dec(**props)
    assert len(typed) == 1
    (pair,) = typed.values()
    if expected is None:
        assert pair[0] == DOUBLE and math.isnan(pair[1])
    else:
        assert pair == expected and all(type(a) is type(b) for a, b in zip(pair, expected, strict=True))


def test_json_decode_ignores_and_skips() -> None:
    # fmt: off
    b = {"odata.metadata": "http://x/$metadata#t/@Element", "odata.etag": "W/x",
         "PartitionKey@odata.type": "Edm.String", "PartitionKey": "p", "RowKey@odata.type": "Edm.String",
         "RowKey": "", "Timestamp@odata.type": "Edm.DateTime", "Timestamp": "2020-01-01T00:00:00Z",
         "timestamp": "lower", "gone": None}
    # fmt: on
    assert json_to_typed(b) == ("p", "", {"timestamp": [STRING, "lower"]})
    assert json_to_typed({"x": 1}, pk="a", rk="b") == ("a", "b", {"x": [INT32, 1]})
    assert json_to_typed({"PartitionKey": "p", "RowKey": "r"}, pk="a", rk="b")[:2] == ("p", "r")


def bad(edm: str, value: Any) -> dict[str, Any]:
    return body(**ann("x", edm, value))


# fmt: off
@pytest.mark.parametrize("b,code", [
    ({"RowKey": "r"}, "PropertiesNeedValue"), ({"PartitionKey": "p"}, "PropertiesNeedValue"),
    ({"PartitionKey": None, "RowKey": "r"}, "PropertiesNeedValue"),
    ({"PartitionKey": 1, "RowKey": "r"}, II), ({"PartitionKey": "p", "RowKey": True}, II),
    ({"PartitionKey@odata.type": "Edm.Int32", "PartitionKey": "1", "RowKey": "r"}, II),
    (body(**{"x@odata.type": "Edm.Int64"}), II),  # annotation without its property
    (bad("Edm.Decimal", "1"), II), (bad(5, "1"), II), (bad("edm.int64", "1"), II),
    (bad("Edm.Int32", "abc"), II), (bad("Edm.Int32", 1.5), II), (bad("Edm.Int32", True), II),
    (bad("Edm.Int32", "2147483648"), II), (bad("Edm.Int64", "9223372036854775808"), II),
    (bad("Edm.Int64", "1.0"), II), (bad("Edm.Int64", ""), II),
    (bad("Edm.Double", "nan"), II), (bad("Edm.Double", "1e400"), II), (bad("Edm.Double", INF), II),
    (bad("Edm.Double", True), II), (bad("Edm.Double", "abc"), II),
    (bad("Edm.Boolean", "yes"), II), (bad("Edm.Boolean", 1), II),
    (bad("Edm.DateTime", "2008-07-10"), II), (bad("Edm.DateTime", "2008-13-10T00:00:00Z"), II),
    (bad("Edm.DateTime", "2008-07-10T00:00:00+02:00"), II), (bad("Edm.DateTime", 0), II),
    (bad("Edm.Guid", "xyz"), II), (bad("Edm.Guid", 5), II),
    (bad("Edm.Binary", "AQI"), II), (bad("Edm.Binary", "A@=="), II), (bad("Edm.Binary", 5), II),
    (bad("Edm.String", 5), II),
    # a null that carries a type (the JS SDK's invalid Date, NaN as a Double) is refused
    (bad("Edm.DateTime", None), II), (bad("Edm.Double", None), II), (bad("Edm.String", None), II),
    (bad("Edm.Int64", None), II),
    (body(x=2**31), II), (body(x=-(2**31) - 1), II), (body(x=INF), II), (body(x=[1]), II),
    (body(x={"a": 1}), II), ([], II),
], ids=repr)
# fmt: on
def test_json_decode_errors(b: Any, code: str) -> None:
    fails(code, json_to_typed, b)


def test_json_decode_overflowing_literal() -> None:
    assert json.loads('{"x": 1e400}')["x"] == float("inf")
    fails("InvalidInput", json_to_typed, body(**json.loads('{"x": 1e400}')))


# --- JSON output -----------------------------------------------------------------------------------

# fmt: off
MINIMAL = {
    "PartitionKey": "p", "RowKey": "r", "Timestamp": "2024-01-02T03:04:05.1234567Z",
    "Age": 23, "Amount": 200.5, "Whole": 5.0,
    "Nan@odata.type": "Edm.Double", "Nan": "NaN",
    "Inf@odata.type": "Edm.Double", "Inf": "Infinity",
    "Big@odata.type": "Edm.Int64", "Big": "1099511627776",
    "When@odata.type": "Edm.DateTime", "When": "2008-07-10T00:00:00Z",
    "Exact@odata.type": "Edm.DateTime", "Exact": "2013-08-22T01:12:06.2608595Z",
    "Id@odata.type": "Edm.Guid", "Id": G,
    "Raw@odata.type": "Edm.Binary", "Raw": "AQI=",
    "Ok": True, "Name": "n",
}
# fmt: on


def encode(**kw: Any) -> dict[str, Any]:
    return typed_to_json(STORED.pk, STORED.rk, STORED.ts, STORED.props, **kw)


def test_json_encode_minimal() -> None:
    out = encode()
    assert out == MINIMAL and list(out) == list(MINIMAL)
    assert type(out["Whole"]) is float and '"Whole": 5.0' in json.dumps(out)
    assert encode(metadata="minimalmetadata") == MINIMAL


def test_json_encode_full() -> None:
    out = encode(metadata="full")
    expected = {"PartitionKey": "p", "RowKey": "r", "Timestamp@odata.type": "Edm.DateTime", **MINIMAL}
    assert out == expected and list(out) == list(expected)
    assert encode(metadata="fullmetadata") == out


def test_json_encode_nometadata() -> None:
    out = encode(metadata="no")
    expected = {k: v for k, v in MINIMAL.items() if "@" not in k}
    assert out == expected and list(out) == list(expected)
    assert encode(metadata="nometadata") == out
    with pytest.raises(ValueError):
        encode(metadata="verbose")


def test_json_encode_small_values() -> None:
    d = iso_to_ticks("2020-01-01T00:00:00.5Z")
    props = {"d": [DATETIME, d], "f": [DOUBLE, -INF], "b": [BINARY, b"a"]}
    out = typed_to_json("p", "r", iso_to_ticks("2020-01-01T00:00:00Z"), props)
    assert out["Timestamp"] == "2020-01-01T00:00:00.0000000Z"
    assert out["d"] == "2020-01-01T00:00:00.5Z" and out["f"] == "-Infinity" and out["b"] == "YQ=="


def test_json_encode_select() -> None:
    big = {"Big@odata.type": "Edm.Int64", "Big": "1099511627776"}
    assert encode(select=["Age", "Missing", "Big"]) == {"Age": 23, "Missing": None, **big}
    out = encode(select=["Age", "RowKey", "Timestamp", "PartitionKey", "Age"], metadata="full")
    assert list(out) == ["PartitionKey", "RowKey", "Timestamp@odata.type", "Timestamp", "Age"]
    assert encode(select=["*"]) == encode() == encode(select=[])
    assert encode(select=["Big"], metadata="no") == {"Big": "1099511627776"}


def test_json_round_trip() -> None:
    for level in ("no", "minimal", "full"):
        out = json.loads(json.dumps(encode(metadata=level)))
        if level == "no":
            continue  # types are lost without annotations, as in Azure
        pk, rk, props = json_to_typed(out)
        assert (pk, rk) == ("p", "r")
        assert json.dumps(props, default=repr) == json.dumps(STORED.props, default=repr)


# --- compatibility with the azure-data-tables SDK's own (de)serializer ---------------------------

# fmt: off
SDK_ENTITY = {
    "PartitionKey": "pk é", "RowKey": "rk'1", "Name": "text 😀", "Empty": "",
    "Age": 23, "Min32": -(2**31), "Max32": 2**31 - 1,
    "Big": AzEntityProperty(2**40, AzEdmType.INT64), "Max64": AzEntityProperty(2**63 - 1, AzEdmType.INT64),
    "Min64": EntityProperty(-(2**63), EdmType.INT64),
    "Amount": 200.5, "Whole": 5.0, "Inf": INF, "Ok": True, "No": False,
    "When": DT, "Id": U, "Raw": b"\x00\x01\xfe", "NoBytes": b"", "Color": Color.RED,
    "Typed32": EP(7, E.INT32), "TypedBool": EP(True, E.BOOLEAN), "TypedDouble": EP(2.0, E.DOUBLE),
    "TypedStr": EP("s", E.STRING), "Skipped": None,
}
SDK_EXPECTED = {
    **SDK_ENTITY, "Min64": AzEntityProperty(-(2**63), AzEdmType.INT64), "Color": "Color.RED",
    "Typed32": 7, "TypedBool": True, "TypedDouble": 2.0, "TypedStr": "s",
}
# fmt: on
del SDK_EXPECTED["Skipped"]


def sdk_round_trip(entity: dict[str, Any], select: list[str] | None = None) -> tuple[AzTableEntity, Entity]:
    """SDK serializer → wire JSON → rangetable typed → wire JSON → SDK deserializer."""
    sent = json.loads(json.dumps(_add_entity_properties(entity)))
    pk, rk, props = json_to_typed(sent)
    validate_entity(pk, rk, props)
    answer = {"odata.etag": etag_from_ticks(TS), **typed_to_json(pk, rk, TS, props, select=select)}
    return _convert_to_entity(json.loads(json.dumps(answer))), Entity(pk, rk, TS, props)


def test_sdk_json_round_trip() -> None:
    got, stored = sdk_round_trip(SDK_ENTITY)
    assert got == SDK_EXPECTED
    for k, v in SDK_EXPECTED.items():
        assert type(got[k]) is type(v) or isinstance(v, datetime | AzEntityProperty), k
    assert got.metadata == {"etag": etag_from_ticks(TS), "timestamp": TablesDatetime.from_ticks(TS)}
    # the native path yields exactly what the SDK user sees
    native = typed_to_entity(stored)
    assert native == got and native.metadata == got.metadata
    # and the native client's own conversion agrees with the SDK's serializer
    assert entity_to_typed(SDK_ENTITY) == (stored.pk, stored.rk, stored.props)


def test_sdk_json_round_trip_nan() -> None:
    got, stored = sdk_round_trip({"PartitionKey": "p", "RowKey": "r", "Nan": float("nan")})
    assert math.isnan(got["Nan"]) and math.isnan(stored.props["Nan"][1])


def test_sdk_round_trip_keeps_100ns() -> None:
    stored = Entity("p", "r", TS, {"Exact": [DATETIME, TICKS7]})
    first = _convert_to_entity({"odata.etag": "x", **typed_to_json("p", "r", TS, stored.props)})
    got, again = sdk_round_trip(first)
    assert again.props == stored.props and got["Exact"].tables_service_value.endswith("2608595Z")
    assert to_typed(typed_to_entity(stored)["Exact"]) == [DATETIME, TICKS7]


@pytest.mark.parametrize(
    "select", [["Age", "Missing"], ["PartitionKey", "Big", "Timestamp"], ["RowKey", "When"]]
)
def test_sdk_select_matches_native(select: list[str]) -> None:
    got, stored = sdk_round_trip(SDK_ENTITY, select)
    native = typed_to_entity(stored, select)
    assert native == got and native.metadata == got.metadata
