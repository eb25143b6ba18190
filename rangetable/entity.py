"""Validation of table names, keys and entities against Azure Table Storage's limits.

All checks raise :class:`rangetable.errors.TableError` with the code Azure answers with. They run on
every write, so the common path is kept cheap: property names already seen valid are cached, and
UTF-16 lengths are only computed when a string is long enough to possibly exceed a limit.

Sizes follow Azure's conventions: string limits are in UTF-16 code units (a character outside the
BMP counts twice), binary limits in bytes.
"""

from __future__ import annotations

import re
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
    INT64_MAX,
    INT64_MIN,
    MAX_DATETIME_TICKS,
    MIN_DATETIME_TICKS,
    STRING,
    TYPE_NAMES,
)
from rangetable.errors import TableError

MAX_KEY_BYTES = 1024  # UTF-16 bytes, i.e. 512 UTF-16 code units (Azurite's reading of "1 KiB")
MAX_CUSTOM_PROPERTIES = 252  # 255 including PartitionKey, RowKey and Timestamp
MAX_PROPERTY_NAME = 255
MAX_STRING_BYTES = 65536  # UTF-16 bytes, i.e. 32768 code units
MAX_BINARY_BYTES = 65536
MAX_ENTITY_SIZE = 1048576
RESERVED_NAMES = frozenset(("PartitionKey", "RowKey", "Timestamp"))

# Characters Azure forbids in keys, plus lone surrogates (not encodable, so never storable).
BAD_KEY_CHARS = re.compile("[/\\\\#?\x00-\x1f\x7f-\x9f\ud800-\udfff]")
SURROGATE = re.compile("[\ud800-\udfff]")
_GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TABLE_CHARS = re.compile(r"[A-Za-z][A-Za-z0-9]*")

_valid_names: dict[str, int] = {}  # property names known to be valid → 8 + 2·len (bounded cache)
_VALID_NAMES_CAP = 65536
MAX_STRING_CHARS = MAX_STRING_BYTES // 2
# A key of at most this many characters fits in MAX_KEY_BYTES whatever they are (each is 1 or 2 UTF-16
# units), so only a longer one needs its UTF-16 length measured.
KEY_CHARS_ALWAYS_SHORT = MAX_KEY_BYTES // 4


def _u16(s: str) -> int:
    """Length of ``s`` in UTF-16 code units."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) >> 1


def validate_key(name: str, value: object) -> None:
    """Check a PartitionKey or RowKey value (``name`` is used in messages).

    It must be a ``str`` of at most 512 UTF-16 code units (1 KiB as UTF-16, Azurite's reading of
    Azure's 1 KiB limit) without ``/ \\ # ?``, control characters U+0000–U+001F, U+007F–U+009F or lone
    surrogates. The empty string is valid. Violations raise InvalidInput.
    """
    if type(value) is not str:
        if not isinstance(value, str):
            raise TableError("InvalidInput", f"The {name} must be a string, not {type(value).__name__}.")
    if len(value) > KEY_CHARS_ALWAYS_SHORT and _u16(value) > MAX_KEY_BYTES // 2:
        raise TableError(
            "InvalidInput", f"The {name} is longer than the maximum allowed length of 1 KiB (512 characters)."
        )
    if BAD_KEY_CHARS.search(value) is not None:
        raise TableError("InvalidInput", f"The {name} contains an invalid character.")


def _check_name(name: object) -> int:
    """Validate one custom property name, raising PropertyNameTooLong/PropertyNameInvalid; returns
    its share of the entity size (``8 + 2·len``), as cached in ``_valid_names``."""
    if not isinstance(name, str):
        raise TableError("PropertyNameInvalid", f"The property name {name!r} is not a string.")
    if len(name) > MAX_PROPERTY_NAME:
        raise TableError("PropertyNameTooLong")
    if not name.isidentifier():
        raise TableError("PropertyNameInvalid", f"The property name {name!r} is invalid.")
    if name in RESERVED_NAMES:
        raise TableError("PropertyNameInvalid", f"The property name {name!r} is reserved.")
    if len(_valid_names) >= _VALID_NAMES_CAP:
        _valid_names.clear()
    cost = _valid_names[name] = 8 + 2 * len(name)
    return cost


def _bad_value(name: str, code: Any, what: str, err: str = "InvalidInput") -> TableError:
    tname = TYPE_NAMES[code] if type(code) is int and 0 <= code < len(TYPE_NAMES) else repr(code)
    return TableError(err, f"The value of property {name!r} ({tname}) {what}.")


def _check_value(name: str, code: Any, v: Any) -> int:
    """Validate one ``[code, value]`` pair (every rule, in order) and return the value's size."""
    t = type(v)
    if code == STRING:
        if t is not str:
            raise _bad_value(name, code, "must be a str", "InvalidValueType")
        n = len(v)
        if not v.isascii():
            if SURROGATE.search(v) is not None:
                raise _bad_value(name, code, "contains a lone surrogate")
            n = len(v.encode("utf-16-le")) >> 1
        if n > MAX_STRING_BYTES // 2:
            raise TableError("PropertyValueTooLarge")
        return 2 * n + 4
    if code == INT32:
        if t is not int:
            raise _bad_value(name, code, "must be an int", "InvalidValueType")
        if not INT32_MIN <= v <= INT32_MAX:
            raise _bad_value(name, code, "is out of range")
        return 4
    if code == DOUBLE:
        if t is not float:
            raise _bad_value(name, code, "must be a float", "InvalidValueType")
        return 8
    if code == BOOLEAN:
        if t is not bool:
            raise _bad_value(name, code, "must be a bool", "InvalidValueType")
        return 1
    if code == INT64:
        if t is not int:
            raise _bad_value(name, code, "must be an int", "InvalidValueType")
        if not INT64_MIN <= v <= INT64_MAX:
            raise _bad_value(name, code, "is out of range")
        return 8
    if code == DATETIME:
        if t is not int:
            raise _bad_value(name, code, "must be int ticks", "InvalidValueType")
        if not MIN_DATETIME_TICKS <= v <= MAX_DATETIME_TICKS:
            raise _bad_value(name, code, "is outside 1601-01-01..9999-12-31")
        return 8
    if code == GUID:
        if t is not str:
            raise _bad_value(name, code, "must be a str", "InvalidValueType")
        if len(v) != 36 or _GUID.fullmatch(v) is None:
            raise _bad_value(name, code, "is not a canonical lower-case GUID")
        return 16
    if code == BINARY:
        if t is not bytes:
            raise _bad_value(name, code, "must be bytes", "InvalidValueType")
        if len(v) > MAX_BINARY_BYTES:
            raise TableError("PropertyValueTooLarge")
        return len(v) + 4
    raise _bad_value(name, code, "has an unknown type code")


def _check_props(props: dict[str, Any]) -> int:
    """Validate typed props and return their share of the entity size (Azure's estimate: ``4 + 2·len(PK+RK) +
    Σ(8 + 2·len(name) + value size)``, lengths in UTF-16 code units; ``entity_size`` in ``tests/oracles.py``).

    The loop accepts the usual valid pairs by the value's type first (a few comparisons each); any
    other pair goes through :func:`_check_value`, which applies every rule in order and raises the
    first error, so the outcome is exactly that of checking every pair with it: ``props_size_plain`` in
    ``tests/oracles.py``, the plain version (``tests/unit/test_ps_write_fastpath.py`` compares the two on
    generated props).
    """
    if type(props) is not dict:
        raise TableError("InvalidInput", "Properties must be a dict of name to [code, value].")
    if len(props) > MAX_CUSTOM_PROPERTIES:
        raise TableError("TooManyProperties")
    size = 0
    valid = _valid_names
    for name, pair in props.items():
        cost = valid.get(name)  # only str names are cached, and no other key equals one
        if cost is None:
            cost = _check_name(name)
        try:
            code, v = pair
        except (TypeError, ValueError):
            raise TableError("InvalidInput", f"Property {name!r} is not a [code, value] pair.") from None
        t = type(v)
        if t is str:
            if code == STRING:
                if v.isascii() and len(v) <= MAX_STRING_CHARS:
                    size += cost + 2 * len(v) + 4
                    continue
            elif code == GUID and len(v) == 36 and _GUID.fullmatch(v) is not None:
                size += cost + 16
                continue
        elif t is int:
            if code == INT32:
                if INT32_MIN <= v <= INT32_MAX:
                    size += cost + 4
                    continue
            elif code == INT64:
                if INT64_MIN <= v <= INT64_MAX:
                    size += cost + 8
                    continue
            elif code == DATETIME and MIN_DATETIME_TICKS <= v <= MAX_DATETIME_TICKS:
                size += cost + 8
                continue
        elif t is float:
            if code == DOUBLE:
                size += cost + 8
                continue
        elif t is bool:
            if code == BOOLEAN:
                size += cost + 1
                continue
        elif t is bytes:
            if code == BINARY and len(v) <= MAX_BINARY_BYTES:
                size += cost + len(v) + 4
                continue
        size += cost + _check_value(name, code, v)
    return size


def validate_props(props: dict[str, Any]) -> None:
    """Check typed props: count, names, and each value's type, range and size.

    Raises TooManyProperties, PropertyNameTooLong, PropertyNameInvalid (also for PartitionKey, RowKey
    and Timestamp, which callers strip), PropertyValueTooLarge, InvalidValueType (Python type does not
    match the code) or InvalidInput (out of range, malformed pair, unknown code, non-canonical Guid).
    """
    _check_props(props)


def validate_entity(pk: str, rk: str, props: dict[str, Any]) -> None:
    """Validate both keys and the typed props, then the 1 MiB entity size (EntityTooLarge).

    Both valid keys are recognised at once (the usual case); ``validate_entity_plain`` in ``tests/oracles.py``
    is the plain version.
    """
    bad = BAD_KEY_CHARS.search
    short = KEY_CHARS_ALWAYS_SHORT
    if (type(pk) is str and type(rk) is str and len(pk) <= short and len(rk) <= short
            and bad(pk) is None and bad(rk) is None):  # both keys valid (the usual case, checked at once)
        keys = len(pk) + len(rk) if pk.isascii() and rk.isascii() else _u16(pk) + _u16(rk)
    else:
        validate_key("PartitionKey", pk)
        validate_key("RowKey", rk)
        keys = _u16(pk) + _u16(rk)
    size = 4 + 2 * keys + _check_props(props)
    if size > MAX_ENTITY_SIZE:
        raise TableError("EntityTooLarge")


def validate_table_name(name: str) -> None:
    """Check a table name against ``^[A-Za-z][A-Za-z0-9]{2,62}$`` and the reserved name ``tables``.

    Bad characters or a leading digit raise InvalidResourceName; a length outside 3..63 raises
    OutOfRangeInput; ``tables`` in any case raises InvalidResourceName.
    """
    if not isinstance(name, str) or (name and _TABLE_CHARS.fullmatch(name) is None):
        raise TableError("InvalidResourceName")
    if not 3 <= len(name) <= 63:
        raise TableError(
            "OutOfRangeInput", "The specified resource name length is not within the permissible limits."
        )
    if name.lower() == "tables":
        raise TableError("InvalidResourceName", "The table name 'tables' is reserved.")
