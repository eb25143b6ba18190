"""Sample values and helpers shared by the value-layer tests (``test_values.py``, ``test_values_rest_json.py``):
a GUID, datetimes with their ticks, enums, a stored entity with every EDM type, and ``fails``."""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

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
    iso_to_ticks,
)
from rangetable.errors import TableError
from rangetable.values import EdmType, EntityProperty

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


def fails(code: str, fn: Any, *args: Any, **kwargs: Any) -> TableError:
    """Call ``fn`` and check that it raises a TableError with ``code``; return the error."""
    with pytest.raises(TableError) as info:
        fn(*args, **kwargs)
    assert info.value.error_code == code, info.value
    return info.value


INF = float("inf")
EP, E = EntityProperty, EdmType
II = "InvalidInput"


# fmt: off
STORED = Entity("p", "r", TS, {
    "Age": [INT32, 23], "Amount": [DOUBLE, 200.5], "Whole": [DOUBLE, 5.0],
    "Nan": [DOUBLE, float("nan")], "Inf": [DOUBLE, INF], "Big": [INT64, 1099511627776],
    "When": [DATETIME, iso_to_ticks("2008-07-10T00:00:00Z")], "Exact": [DATETIME, TICKS7],
    "Id": [GUID, G], "Raw": [BINARY, b"\x01\x02"], "Ok": [BOOLEAN, True], "Name": [STRING, "n"],
})
# fmt: on
