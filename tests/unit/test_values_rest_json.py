"""The REST JSON form of values (rangetable.rest_json): typed ⇄ JSON with odata annotations, checked
against the azure-data-tables SDK's own (de)serializer."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import pytest
from azure.data.tables import EdmType as AzEdmType
from azure.data.tables import EntityProperty as AzEntityProperty
from azure.data.tables import TableEntity as AzTableEntity
from azure.data.tables._deserialize import _convert_to_entity
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
    etag_from_ticks,
    iso_to_ticks,
)
from rangetable.entity import validate_entity
from rangetable.rest_json import json_to_typed, typed_to_json
from rangetable.values import (
    EdmType,
    EntityProperty,
    TablesDatetime,
    entity_to_typed,
    to_typed,
    typed_to_entity,
)
from tests.unit.value_samples import DT, DT_TICKS, EP, II, INF, STORED, TICKS7, TS, Color, E, G, U, fails

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
