"""Azure's REST JSON entity bodies ⇄ typed pairs (reference §2.2 input, §2.3 output).

:func:`json_to_typed` decodes what a client sends (``Prop@odata.type`` annotations, Int64 as strings,
100 ns DateTimes); :func:`typed_to_json` is the reference encoder of what the service answers (the
HTTP frontend's fast writer in :mod:`frontend.http.odata` is tested byte for byte against it).
Values are converted like an SDK ``EntityProperty`` (:mod:`rangetable.values`); limits are checked
by :func:`rangetable.entity.validate_entity`.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from typing import Any

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
    STRING,
    TICKS_PER_SECOND,
    TYPE_NAMES,
    iso_to_ticks,
    ticks_to_iso,
)
from rangetable.errors import TableError
from rangetable.values import (
    _COERCE,
    _INT_RE,
    _RESERVED,
    _SPECIAL_FLOATS,
    _invalid,
)

__all__ = ["json_to_typed", "typed_to_json"]

_ANNOTATION = "@odata.type"
_CODE_BY_NAME = {n: i for i, n in enumerate(TYPE_NAMES)}
_GUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_LEVELS = {"no": 0, "nometadata": 0, "minimal": 1, "minimalmetadata": 1, "full": 2, "fullmetadata": 2}

# JSON types each annotation accepts; the value is then converted like an EntityProperty's.
_JSON_TYPES = [(str,), (int, str), (int, str), (int, float, str), (bool, str), (str,), (str,), (str,)]
# The DateTime shape clients send; anything else goes through iso_to_ticks.
_ISO_FAST = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,7}))?Z?")
_day_ticks: dict[str, int] = {}  # "YYYY-MM-DD" -> ticks of its midnight


def _iso_fast(text: str) -> int | None:
    """``iso_to_ticks(text)`` for ``YYYY-MM-DDTHH:MM:SS[.fffffff][Z]``; None for any other text."""
    m = _ISO_FAST.fullmatch(text)
    if m is None:
        return None
    date, hour, minute, second, fraction = m.groups()
    day = _day_ticks.get(date)
    if day is None:
        try:
            day = iso_to_ticks(date + "T00:00")
        except ValueError:
            return None
        if len(_day_ticks) > 4096:
            _day_ticks.clear()
        _day_ticks[date] = day
    h, mi, s = int(hour), int(minute), int(second)
    if h > 23 or mi > 59 or s > 59:
        return None
    return day + (h * 3600 + mi * 60 + s) * TICKS_PER_SECOND + (int(fraction.ljust(7, "0")) if fraction else 0)


def _json_value(name: str, v: Any, annotation: Any) -> list[Any]:
    t = type(v)
    if annotation is None:
        if t is str:
            return [STRING, v]
        if t is bool:
            return [BOOLEAN, v]
        if t is int:
            if INT32_MIN <= v <= INT32_MAX:
                return [INT32, v]
            raise _invalid(f"The value of {name!r} is out of range for Edm.Int32; annotate it as Edm.Int64.")
        if t is float and math.isfinite(v):
            return [DOUBLE, v]
        raise _invalid(f"The value of {name!r} is not a valid property value.")
    if t is str:  # fast paths for the usual annotated shapes; the general code below decides the rest
        if annotation == "Edm.DateTime":
            ticks = _iso_fast(v)
            if ticks is not None:
                return [DATETIME, ticks]
        elif annotation == "Edm.Guid":
            if _GUID_RE.fullmatch(v):
                return [GUID, v.lower()]
        elif annotation == "Edm.Int64":
            if len(v) < 19 and _INT_RE.fullmatch(v):
                return [INT64, int(v)]
        elif annotation == "Edm.String":
            return [STRING, v]
    elif t is float and annotation == "Edm.Double" and v - v == 0.0:  # finite
        return [DOUBLE, v]
    code = _CODE_BY_NAME.get(annotation) if type(annotation) is str else None
    if code is None:
        raise _invalid(f"Unknown type annotation {annotation!r} on {name!r}.")
    try:
        if type(v) not in _JSON_TYPES[code]:
            raise TypeError
        if code == BINARY:
            return [code, base64.b64decode(v, validate=True)]
        value = _COERCE[code](v)
        if code == DOUBLE and math.isinf(value) and v not in _SPECIAL_FLOATS:
            raise ValueError  # overflowed to ±Infinity
        return [code, value]
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise _invalid(f"The value of {name!r} is not a valid {annotation}.") from None


def _json_key(name: str, v: Any, annotation: Any, default: str | None) -> str:
    if v is None:
        if default is None:
            raise TableError("PropertiesNeedValue", f"The {name} must be present and not null.")
        v = default
    elif annotation is not None and annotation != "Edm.String":
        raise _invalid(f"The {name} must be an Edm.String.")
    if type(v) is not str:
        raise _invalid(f"The {name} must be a string.")
    return v


_plans: dict[tuple[str, ...], list[tuple[str, str | None]]] = {}  # body names -> their properties
_NOT_PROPERTIES = ("PartitionKey", "RowKey", "Timestamp")


def _plan(names: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """The custom properties among a body's member names, each with its annotation's member name.

    ``odata.*`` members and annotations are not properties; an annotation without its property raises
    InvalidInput. Plans are cached by the tuple of names, which bodies of one client share.
    """
    plan = _plans.get(names)
    if plan is None:
        values: list[str] = []
        annotated: dict[str, None] = {}
        for name in names:
            if "." in name:  # only odata.* members and annotations have a dot
                if name.startswith("odata."):
                    continue
                if name.endswith(_ANNOTATION):
                    annotated[name[: -len(_ANNOTATION)]] = None
                    continue
            values.append(name)
        present = set(values)
        for name in annotated:
            if name not in present:
                raise _invalid(f"The type annotation for {name!r} has no property.")
        plan = [(n, n + _ANNOTATION if n in annotated else None) for n in values if n not in _NOT_PROPERTIES]
        if len(_plans) >= 1024:
            _plans.clear()
        _plans[names] = plan
    return plan


def json_to_typed(
    body: Mapping[str, Any], *, pk: str | None = None, rk: str | None = None
) -> tuple[str, str, dict[str, list[Any]]]:
    """Decode a REST entity body into ``(pk, rk, typed props)``.

    Reads ``Prop@odata.type`` annotations (reference §2.2); untyped null values are absent (a null with
    an ``@odata.type`` is InvalidInput, as a typed value admits no null), ``odata.*`` members
    and a client-supplied ``Timestamp`` are ignored. ``pk``/``rk`` (e.g. from the URL) stand in for
    keys the body leaves out. Raises PropertiesNeedValue for a missing key and InvalidInput for a
    non-string key, an unknown annotation, a value that does not match its annotation, an annotation
    without its property, or an unannotated integer outside Int32.
    """
    if type(body) is not dict and not isinstance(body, Mapping):
        raise _invalid("The entity body must be a JSON object.")
    plan = _plan(tuple(body))
    get = body.get
    pk = _json_key("PartitionKey", get("PartitionKey"), get("PartitionKey@odata.type"), pk)
    rk = _json_key("RowKey", get("RowKey"), get("RowKey@odata.type"), rk)
    props: dict[str, list[Any]] = {}
    for name, annotation in plan:
        v = body[name]
        if annotation is None:
            if type(v) is str:
                props[name] = [STRING, v]
            elif v is not None:
                props[name] = _json_value(name, v, None)
        elif v is not None:
            a = body[annotation]
            props[name] = [STRING, v] if a == "Edm.String" and type(v) is str else _json_value(name, v, a)
        else:  # a typed null (the JS SDK's invalid Date or NaN): the type admits no null
            raise _invalid(f"The value of {name!r} is null, which is not a valid {body[annotation]}.")
    return pk, rk, props


def _put_json(out: dict[str, Any], name: str, code: int, v: Any, annotate: bool) -> None:
    if code == STRING or code == INT32 or code == BOOLEAN:
        out[name] = v
        return
    if code == DOUBLE:
        if math.isfinite(v):
            out[name] = float(v)
            return
        text = "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
        if annotate:
            out[name + _ANNOTATION] = "Edm.Double"
        out[name] = text
        return
    if code == INT64:
        text = str(v)
    elif code == DATETIME:
        text = ticks_to_iso(v)
    elif code == GUID:
        text = v
    elif code == BINARY:
        text = base64.b64encode(v).decode("ascii")
    else:
        raise _invalid(f"Unknown type code {code!r} for {name!r}.")
    if annotate:
        out[name + _ANNOTATION] = TYPE_NAMES[code]
    out[name] = text


def typed_to_json(
    pk: str,
    rk: str,
    ts: int,
    props: Mapping[str, list[Any]],
    metadata: str = "minimal",
    select: list[str] | None = None,
) -> dict[str, Any]:
    """Encode an entity as Azure's JSON output (reference §2.3), without any ``odata.*`` members.

    Order: PartitionKey, RowKey, Timestamp (7 digits; ``Timestamp@odata.type`` only for "full"), then
    custom properties, each preceded by its annotation: Int64 (as a string), DateTime, Guid, Binary
    (base64) and non-finite Double are annotated for "minimal" and "full", nothing for "no".
    ``metadata`` also accepts "nometadata"/"minimalmetadata"/"fullmetadata". With ``select`` only the
    selected properties are output (keys and Timestamp too), missing ones as None.
    """
    level = _LEVELS.get(metadata)
    if level is None:
        raise ValueError(f"unknown metadata level {metadata!r}")
    annotate = level > 0
    out: dict[str, Any] = {}
    everything = not select or "*" in select
    wanted = {} if everything else dict.fromkeys(select or ())
    if everything or "PartitionKey" in wanted:
        out["PartitionKey"] = pk
    if everything or "RowKey" in wanted:
        out["RowKey"] = rk
    if everything or "Timestamp" in wanted:
        if level == 2:
            out["Timestamp" + _ANNOTATION] = "Edm.DateTime"
        out["Timestamp"] = ticks_to_iso(ts, full=True)
    for name in props if everything else wanted:
        if name not in _RESERVED:
            pair = props.get(name)
            if pair is None:
                out[name] = None
            else:
                _put_json(out, name, pair[0], pair[1], annotate)
    return out
