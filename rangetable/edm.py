"""EDM type codes, DateTime ticks and ETags: the typed core every layer shares.

Inside rangetable a property value is a pair ``[code, value]`` (a list, because msgpack turns tuples
into lists), with the value normalised per type:

======== ==== ==========================================================
EdmType  code value
======== ==== ==========================================================
String   0    ``str``
Int32    1    ``int`` in [-2**31, 2**31)
Int64    2    ``int`` in [-2**63, 2**63)
Double   3    ``float`` (NaN and ±Infinity allowed)
Boolean  4    ``bool``
DateTime 5    ``int``: 100 ns ticks since 0001-01-01T00:00:00Z (.NET ticks)
Guid     6    ``str``: canonical lower-case ``8-4-4-4-12``
Binary   7    ``bytes``
======== ==== ==========================================================

A set of properties ("typed props") is ``dict[str, list]`` mapping names to such pairs; it never
holds PartitionKey, RowKey or Timestamp, which travel separately.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import Enum
from functools import lru_cache
from urllib.parse import unquote

STRING, INT32, INT64, DOUBLE, BOOLEAN, DATETIME, GUID, BINARY = range(8)


class EdmType(str, Enum):  # noqa: UP042  (same base classes as the SDK's EdmType)
    """The eight EDM types, with the same member names as ``azure.data.tables.EdmType``."""

    STRING = "Edm.String"
    INT32 = "Edm.Int32"
    INT64 = "Edm.Int64"
    DOUBLE = "Edm.Double"
    BOOLEAN = "Edm.Boolean"
    DATETIME = "Edm.DateTime"
    GUID = "Edm.Guid"
    BINARY = "Edm.Binary"

    @property
    def type_code(self) -> int:
        """The compact integer code used in storage and on the wire."""
        return _CODE_OF[self]

    @classmethod
    def from_code(cls, c: int) -> EdmType:
        """The EdmType for an integer code."""
        return _TYPES[c]


_TYPES = [
    EdmType.STRING,
    EdmType.INT32,
    EdmType.INT64,
    EdmType.DOUBLE,
    EdmType.BOOLEAN,
    EdmType.DATETIME,
    EdmType.GUID,
    EdmType.BINARY,
]
_CODE_OF = {t: i for i, t in enumerate(_TYPES)}
TYPE_NAMES = [t.value for t in _TYPES]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# --- DateTime as ticks -------------------------------------------------------------------------

_EPOCH = datetime(1, 1, 1, tzinfo=UTC)
TICKS_PER_SECOND = 10_000_000
UNIX_EPOCH_TICKS = 621355968000000000  # ticks of 1970-01-01T00:00:00Z
MIN_DATETIME_TICKS = 504911232000000000  # 1601-01-01T00:00:00Z, Azure's lower limit
MAX_DATETIME_TICKS = 3155378975999999999  # 9999-12-31T23:59:59.9999999Z

_ISO_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,7}))?)?(Z|[+-]00:00)?$"
)


def datetime_to_ticks(dt: datetime) -> int:
    """Ticks of a datetime; naive datetimes are taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - _EPOCH
    return (delta.days * 86400 + delta.seconds) * TICKS_PER_SECOND + delta.microseconds * 10


def ticks_to_datetime(ticks: int) -> datetime:
    """A UTC datetime for ticks, truncated to microseconds (Python's precision)."""
    return _EPOCH + timedelta(microseconds=ticks // 10)


def iso_to_ticks(text: str) -> int:
    """Parse an ISO-8601 UTC timestamp with up to 7 fractional digits into ticks.

    Raises ValueError on anything else. A value without an offset is taken as UTC.
    """
    m = _ISO_RE.match(text.strip())
    if not m:
        raise ValueError(f"not an ISO-8601 UTC datetime: {text!r}")
    y, mo, d, h, mi, s, frac, _ = m.groups()
    base = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s or 0), tzinfo=UTC)
    ticks = datetime_to_ticks(base)
    if frac:
        ticks += int(frac.ljust(7, "0"))
    return ticks


def ticks_to_iso(ticks: int, *, full: bool = False) -> str:
    """Format ticks as ``YYYY-MM-DDTHH:MM:SS[.fffffff]Z``.

    ``full`` always prints 7 fractional digits (as Azure does for Timestamp); otherwise trailing
    zeros are dropped, so a value written without a fraction reads back without one.
    """
    seconds, frac = divmod(ticks, TICKS_PER_SECOND)
    dt = _EPOCH + timedelta(seconds=seconds)
    head = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"  # strftime: 3× slower
    if full:
        return f"{head}.{frac:07d}Z"
    if frac == 0:
        return head + "Z"
    return f"{head}.{frac:07d}".rstrip("0") + "Z"


def now_ticks() -> int:
    """The current wall-clock time in ticks."""
    return datetime_to_ticks(datetime.now(UTC))


# --- ETags -------------------------------------------------------------------------------------


def etag_from_ticks(ticks: int) -> str:
    """Azure's ETag for an entity whose Timestamp is ``ticks``: ``W/"datetime'<url-encoded>'"``."""
    return "W/\"datetime'" + ticks_to_iso(ticks, full=True).replace(":", "%3A") + "'\""  # quote(): only ':' needs it


def is_weak_etag(etag: str) -> bool:
    """Whether ``etag`` is a well-formed weak entity tag ``W/"…"`` (RFC 9110: no ``"`` inside, no
    control characters). Azure compares any such tag with the entity's own, so one it never issued
    (``W/"wrong"``) is a mismatch (412), not a malformed header (400)."""
    if len(etag) < 4 or not etag.startswith('W/"') or not etag.endswith('"'):
        return False
    body = etag[3:-1]
    return '"' not in body and all(" " < c != "\x7f" for c in body)


def ticks_from_etag(etag: str) -> int:
    """Inverse of :func:`etag_from_ticks`; raises ValueError for anything that is not such an ETag."""
    if not (etag.startswith("W/\"datetime'") and etag.endswith("'\"")):
        raise ValueError(f"not a valid ETag: {etag!r}")
    return iso_to_ticks(unquote(etag[len("W/\"datetime'") : -2]))


def etag_matches(etag: str, ticks: int) -> bool:
    """Whether the weak ETag ``etag`` names the version whose Timestamp is ``ticks``: the text of
    :func:`etag_from_ticks`, or a ``datetime'…'`` ETag of the same instant however it is escaped (the
    legacy JavaScript SDK derives a ``nometadata`` entity's ETag from its Timestamp without escaping
    the colons). Any other weak ETag (``W/"wrong"``) names no version of this store."""
    if etag == etag_from_ticks(ticks):
        return True
    try:
        return ticks_from_etag(etag) == ticks
    except ValueError:
        return False


# --- A stored entity ---------------------------------------------------------------------------

from typing import Any, NamedTuple  # noqa: E402


class Entity(NamedTuple):
    """An entity as the storage and routing layers see it.

    ``ts`` is the Timestamp in ticks (its ETag is ``etag_from_ticks(ts)``); ``props`` are typed props
    (``{name: [code, value]}``) without PartitionKey, RowKey or Timestamp.
    """

    pk: str
    rk: str
    ts: int
    props: dict[str, Any]


_DATE_ONLY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_OFFSET = re.compile(r"^(.*)([+-])(\d{2}):(\d{2})$")


@lru_cache(maxsize=1024)
def parse_time(text: str) -> int:
    """Parse a SAS / access-policy time (ISO 8601, date only, or with an offset) into UTC ticks.

    Raises ValueError on anything else.
    """
    text = text.strip()
    m = _DATE_ONLY.match(text)
    if m:
        return datetime_to_ticks(datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC))
    m = _OFFSET.match(text)
    if m and "T" in m[1] and (m[3], m[4]) != ("00", "00"):
        shift = (int(m[3]) * 3600 + int(m[4]) * 60) * TICKS_PER_SECOND
        return iso_to_ticks(m[1]) - shift if m[2] == "+" else iso_to_ticks(m[1]) + shift
    return iso_to_ticks(text)
