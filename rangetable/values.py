"""The SDK-shaped value layer: Python values ⇄ typed pairs ``[code, value]`` ⇄ Azure's JSON bodies.

Names and behaviour mirror ``azure-data-tables`` 12.x (EntityProperty, TableEntity with ``.metadata``,
EdmType, Int64 read back as ``EntityProperty(int, EdmType.INT64)``, DateTime as a tz-aware datetime
with ``tables_service_value``), so user code can switch by changing its import. Azure's JSON bodies are
:mod:`rangetable.rest_json`. Conversion only ensures well-typed pairs; limits are checked by
:func:`rangetable.entity.validate_entity`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import Enum
from operator import index
from typing import Any, NamedTuple
from uuid import UUID

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
    STRING,
    TYPE_NAMES,
    EdmType,
    Entity,
    datetime_to_ticks,
    etag_from_ticks,
    iso_to_ticks,
    ticks_to_datetime,
    ticks_to_iso,
)
from rangetable.errors import TableError

__all__ = ["EdmType", "EntityProperty", "TableEntity", "TablesDatetime", "entity_to_typed", "from_typed"]
__all__ += ["to_typed", "typed_to_entity"]

_RESERVED = ("PartitionKey", "RowKey", "Timestamp")
_CODE_BY_LOWER = {n.lower(): i for i, n in enumerate(TYPE_NAMES)}
_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class EntityProperty(NamedTuple):
    """A value with an explicit EDM type, exactly like ``azure.data.tables.EntityProperty``."""

    value: Any
    edm_type: str | EdmType


class TableEntity(dict[str, Any]):
    """An entity dict with ``.metadata`` (``etag``, ``timestamp``), like the SDK's TableEntity.

    An entity read from the service keeps its Timestamp's ticks and makes the metadata on first use (fast
    path: a page of 1,000 entities is mostly iterated, and the ETag's text and the datetime were 40 % of the
    native client's CPU per entity; ``tests/unit/test_values.py`` checks them against the eager form)."""

    _metadata: dict[str, Any] = {"etag": None, "timestamp": None}
    _ticks: int | None = None  # the read entity's Timestamp, its metadata not made yet
    _with_ts: bool = False  # whether its metadata carries the timestamp (Timestamp selected)

    @property
    def metadata(self) -> dict[str, Any]:
        """The entity's metadata: ``{"etag": str | None, "timestamp": datetime | None}``."""
        ticks = self._ticks
        if ticks is not None:
            self._metadata = {"etag": etag_from_ticks(ticks),
                              "timestamp": TablesDatetime.from_ticks(ticks) if self._with_ts else None}
            self._ticks = None
        return self._metadata


class TablesDatetime(datetime):
    """A tz-aware UTC datetime that remembers its exact 100 ns ticks.

    Like the SDK's ``TablesEntityDatetime`` it has ``tables_service_value`` (the 7-digit ISO text), so
    writing it back through rangetable or the SDK keeps the full precision. Arithmetic and
    ``replace()`` produce instances without remembered ticks, which fall back to the datetime value.
    """

    __slots__ = ("_ticks",)
    _ticks: int  # set by from_ticks only; absent on instances made by arithmetic or replace()

    @classmethod
    def from_ticks(cls, ticks: int) -> TablesDatetime:
        """The datetime for ``ticks`` (truncated to µs) carrying the exact ticks."""
        dt = ticks_to_datetime(ticks)
        obj = cls(dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.microsecond, tzinfo=UTC)
        obj._ticks = ticks
        return obj

    @property
    def ticks(self) -> int:
        """The exact value in 100 ns ticks since 0001-01-01T00:00:00Z."""
        try:
            return self._ticks
        except AttributeError:
            return datetime_to_ticks(self)

    @property
    def tables_service_value(self) -> str:
        """The value as Azure prints a Timestamp, ``YYYY-MM-DDTHH:MM:SS.fffffffZ``."""
        return ticks_to_iso(self.ticks, full=True)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (TablesDatetime.from_ticks, (self.ticks,))  # pickle/copy keep the exact ticks


def _invalid(message: str) -> TableError:
    return TableError("InvalidInput", message)


# --- Python value -> typed pair ----------------------------------------------------------------


def _int_pair(v: int) -> list[Any]:
    if INT32_MIN <= v <= INT32_MAX:
        return [INT32, v]
    if INT64_MIN <= v <= INT64_MAX:
        return [INT64, v]
    raise _invalid(f"The integer {v} does not fit in Edm.Int64.")


def _datetime_ticks(dt: datetime) -> int:
    """Ticks of a datetime, keeping 100 ns precision carried by a round-tripped value."""
    ticks = datetime_to_ticks(dt)
    if isinstance(dt, TablesDatetime):
        exact = dt.ticks
    else:
        text = getattr(dt, "tables_service_value", None)  # the SDK's TablesEntityDatetime
        if not text or type(text) is not str:
            return ticks
        try:
            exact = iso_to_ticks(text)
        except ValueError:
            return ticks
    return exact if exact // 10 == ticks // 10 else ticks


def _as_int(v: Any) -> int:
    if isinstance(v, str) and _INT_RE.fullmatch(v.strip()):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, bool | str | float):
        raise ValueError(f"not an integer: {v!r}")
    return index(v)


def _ranged(v: int, low: int, high: int, edm: str) -> int:
    if not low <= v <= high:
        raise ValueError(f"{v} is out of range for {edm}")
    return v


def _as_double(v: Any) -> float:
    if isinstance(v, str):
        s = v.strip()
        if s in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[s]
        if _FLOAT_RE.fullmatch(s):
            return float(s)
    elif isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    raise ValueError(f"not a number: {v!r}")


def _as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ValueError(f"not a boolean: {v!r}")


def _as_datetime(v: Any) -> int:
    if isinstance(v, datetime):
        return _datetime_ticks(v)
    return iso_to_ticks(v)  # AttributeError/ValueError for non-strings and bad text


def _as_guid(v: Any) -> str:
    return str(v if isinstance(v, UUID) else UUID(v))  # UUID() raises for non-strings and bad text


def _as_binary(v: Any) -> bytes:
    if isinstance(v, str):  # the SDK sends str(value).encode("utf-8") for a Binary EntityProperty
        return v.encode("utf-8")
    return bytes(memoryview(v))  # TypeError unless bytes-like


_COERCE: list[Callable[[Any], Any]] = [
    lambda v: v if type(v) is str else str(v),
    lambda v: _ranged(_as_int(v), INT32_MIN, INT32_MAX, "Edm.Int32"),
    lambda v: _ranged(_as_int(v), INT64_MIN, INT64_MAX, "Edm.Int64"),
    _as_double,
    _as_bool,
    _as_datetime,
    _as_guid,
    _as_binary,
]


def _edm_code(edm_type: Any) -> int:
    code = _CODE_BY_LOWER.get(edm_type.lower()) if isinstance(edm_type, str) else None
    if code is None:
        raise _invalid(f"Unknown EDM type {edm_type!r}.")
    return code


def to_typed(value: Any) -> list[Any] | None:
    """Convert one Python value to ``[code, value]`` the way the SDK types it; None means absent.

    bool → Boolean, int → Int32 or (if wider) Int64, float → Double, str → String, datetime →
    DateTime (naive is UTC; 100 ns kept from ``tables_service_value``), UUID → Guid, bytes/bytearray →
    Binary, Enum → String ``str(member)`` (as the SDK does), ``EntityProperty(value, edm_type)`` (any
    2-tuple, like the SDK) → that type after conversion. Raises TableError InvalidInput for values
    that do not convert or fit, InvalidValueType for unsupported Python types.
    """
    t = type(value)
    if t is str:
        return [STRING, value]
    if t is bool:
        return [BOOLEAN, value]
    if t is int:
        return _int_pair(value)
    if t is float:
        return [DOUBLE, value]
    if value is None:
        return None
    if isinstance(value, Enum):
        return [STRING, str(value)]
    if isinstance(value, datetime):
        return [DATETIME, _datetime_ticks(value)]
    if isinstance(value, tuple):
        if len(value) != 2:
            raise TableError("InvalidValueType", "A typed value must be an EntityProperty(value, edm_type).")
        v, edm_type = value
        if v is None:
            return None
        code = _edm_code(edm_type)
        try:
            return [code, _COERCE[code](v)]
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise _invalid(f"The value {v!r} is not a valid {TYPE_NAMES[code]}: {exc}") from None
    if isinstance(value, UUID):
        return [GUID, str(value)]
    if isinstance(value, bytes | bytearray | memoryview):
        return [BINARY, bytes(value)]
    if isinstance(value, int):
        return _int_pair(int(value))
    if isinstance(value, float):
        return [DOUBLE, float(value)]
    if isinstance(value, str):
        return [STRING, str(value)]
    raise TableError("InvalidValueType", f"Type not supported when sending data to the service: {t!r}.")


def from_typed(pair: list[Any] | tuple[int, Any]) -> Any:
    """Convert ``[code, value]`` to what the SDK returns: Int64 as ``EntityProperty(int, INT64)``,
    DateTime as :class:`TablesDatetime`, Guid as UUID, Binary as bytes, others as plain values."""
    code, v = pair
    if code == STRING or code == INT32 or code == DOUBLE or code == BOOLEAN:
        return v
    if code == INT64:
        return EntityProperty(v, EdmType.INT64)
    if code == DATETIME:
        return TablesDatetime.from_ticks(v)
    if code == GUID:
        return UUID(v)
    if code == BINARY:
        return bytes(v)
    raise _invalid(f"Unknown type code {code!r}.")


# --- entities ----------------------------------------------------------------------------------


def _key(name: str, value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and value[0] is not None:
        if _edm_code(value[1]) != STRING:
            raise _invalid(f"The {name} must be an Edm.String.")
        value = value[0]
    if value is None:
        raise TableError("PropertiesNeedValue", f"The {name} must be present and not null.")
    if not isinstance(value, str):
        raise _invalid(f"The {name} must be a string, not {type(value).__name__}.")
    return value


def entity_to_typed(entity: Mapping[str, Any]) -> tuple[str, str, dict[str, list[Any]]]:
    """Split an entity mapping into ``(pk, rk, typed props)``.

    None values are skipped, ``Timestamp`` and ``odata.*`` keys ignored. A missing or null key raises
    PropertiesNeedValue, a non-string key InvalidInput.
    """
    pk: Any = None
    rk: Any = None
    props: dict[str, list[Any]] = {}
    for name, value in entity.items():
        if name == "PartitionKey":
            pk = value
        elif name == "RowKey":
            rk = value
        elif name == "Timestamp" or (isinstance(name, str) and name.startswith("odata.")):
            continue
        else:
            pair = to_typed(value)
            if pair is not None:
                props[name] = pair
    return _key("PartitionKey", pk), _key("RowKey", rk), props


def typed_to_entity(
    e: Entity, select: list[str] | None = None, *, include_timestamp: bool = False
) -> TableEntity:
    """The :class:`TableEntity` the SDK would return for a stored entity.

    Like the SDK, Timestamp is reported in ``metadata["timestamp"]`` and not as a key (pass
    ``include_timestamp=True`` to also get ``entity["Timestamp"]``). With ``select`` only the selected
    properties appear, selected-but-missing ones as None, and ``metadata["timestamp"]`` is set only
    when Timestamp was selected (as the SDK sees it).
    """
    everything = not select or "*" in select
    wanted = {} if everything else dict.fromkeys(select or ())
    out = TableEntity()
    for key, value in (("PartitionKey", e.pk), ("RowKey", e.rk)):
        if everything or key in wanted:
            out[key] = value
    with_ts = everything or "Timestamp" in wanted
    if include_timestamp and with_ts:
        out["Timestamp"] = TablesDatetime.from_ticks(e.ts)
    props = e.props
    for name in props if everything else wanted:
        if name not in _RESERVED:
            pair = props.get(name)
            out[name] = None if pair is None else from_typed(pair)
    out._ticks, out._with_ts = e.ts, with_ts  # the metadata is made when first asked for
    return out
