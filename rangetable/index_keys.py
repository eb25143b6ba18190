"""The keys of a secondary index's entries: an order-preserving encoding of typed values.

An index ``NAME`` of table ``T`` on properties ``(p1, …, pn)`` stores one *entry* per base entity that has
``p1``, as an entity of table ``T$NAME``:

* entry PartitionKey: ``encode_value(p1) + … + encode_value(pn)`` (:func:`entry_pk`);
* entry RowKey: ``base_pk + "\\x01" + base_rk`` (:func:`entry_rk`; base keys have no control characters);
* entry properties: the properties the index keeps (:func:`entry_value`).

The store keys an entity as ``utf8(pk) + b"\\x00" + utf8(rk)`` (:func:`rangetable.keys.encode_key`), so an entry
PK must hold no ``"\\x00"`` and must encode as plain UTF-8. :func:`encode_value` is *self-delimiting* (no
encoding is a proper prefix of another) and *order-preserving*: code-point order on encodings follows the
order in which the ``$filter`` evaluator (:mod:`rangetable.filter`) compares values. Hence byte order on entry
keys is the order of ``(v1, …, vn, base key)``, and ``+ b"\\xff"`` (never in UTF-8) is the successor of every
key starting with a given encoding. An encoding is a type tag, then the value:

=========== ==== =================================================================================
group       tag  value
=========== ==== =================================================================================
absent      ``!``  nothing (a missing property sorts below every value)
Boolean     ``B``  ``0`` or ``1``
DateTime    ``D``  ticks + 2**63 as 11 digits of 6 bits (``chr(0x30 + d)``), fixed width
Guid        ``G``  the text, escaped as a String
number      ``N``  Int32, Int64 and Double in one group (the evaluator compares them numerically): the
                   double's IEEE bits made sortable (sign bit flipped, or all bits when negative) as 11
                   digits; ``-0.0`` is ``0.0``, NaN sorts above ``+inf``; Int64 beyond 2**53 rounds
String      ``S``  the first :data:`MAX_CHARS` characters, each as itself except ``\\x00``–``\\x02``
                   (``"\\x02" + chr(0x30 + c)``) and U+D7FF and lone surrogates (``"\\ud7ff" + chr(…)``,
                   plain UTF-8, between U+D7FF and U+E000), then the terminator ``"\\x01"``, which sorts
                   below every character that can continue a string
Binary      ``X``  the first :data:`MAX_CHARS` bytes, byte ``b`` as ``chr(b + 3)``, then ``"\\x01"``
=========== ==== =================================================================================

Truncation and rounding are monotone (``x < y`` gives ``enc(x) <= enc(y)``), so an index scan with inclusive
bounds on such values is a superset of the matches; every hit is re-checked against the base row anyway.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, GUID, INT32, INT64, STRING
from rangetable.index_def import IndexDef
from rangetable.keys import encode_key

MAX_CHARS = 256  # a String, Guid or Binary value is keyed on this many characters (bytes) at most
ABSENT = "!"
TAGS = {BOOLEAN: "B", DATETIME: "D", GUID: "G", INT32: "N", INT64: "N", DOUBLE: "N", STRING: "S", BINARY: "X"}
NUMBER_TAG = "N"
END = "\x01"  # ends a String, Guid or Binary value
RK_SEPARATOR = "\x01"  # between the base PartitionKey and RowKey in an entry's RowKey

_DIGITS = 11  # 6-bit digits of a fixed-width value: 66 bits
_NAN = 1 << 64  # above every sortable double
_ESCAPES: dict[int, str] = {c: "\x02" + chr(0x30 + c) for c in range(3)}
_ESCAPES[0xD7FF] = "\ud7ff\x30"
_ESCAPES.update({s: "\ud7ff" + chr(0x100 + s - 0xD800) for s in range(0xD800, 0xE000)})
_BYTES = {b: chr(b + 3) for b in range(256)}
_PACK_D, _UNPACK_Q = struct.Struct(">d").pack, struct.Struct(">Q").unpack


def _fixed(u: int) -> str:
    """``u`` in [0, 2**66) as 11 order-preserving characters."""
    return "".join(chr(0x30 + ((u >> shift) & 63)) for shift in range(60, -1, -6))


def _number(v: float | int) -> str:
    f = float(v)
    if f != f:
        return _fixed(_NAN)
    if f == 0.0:
        f = 0.0  # -0.0 == 0.0
    (u,) = _UNPACK_Q(_PACK_D(f))
    return _fixed(u ^ 0xFFFFFFFFFFFFFFFF if u >> 63 else u | (1 << 63))


def _text(s: str) -> str:
    return s[:MAX_CHARS].translate(_ESCAPES) + END


def encode_value(pair: list[Any] | tuple[int, Any] | None) -> str:
    """The order-preserving, self-delimiting encoding of one typed value ``[code, value]``; None: absent."""
    if pair is None:
        return ABSENT
    code, v = pair[0], pair[1]
    if code == INT32 or code == INT64 or code == DOUBLE:
        return NUMBER_TAG + _number(v)
    if code == STRING:
        return "S" + _text(v)
    if code == DATETIME:
        return "D" + _fixed(min(max(v + (1 << 63), 0), (1 << 64) - 1))
    if code == BOOLEAN:
        return "B1" if v else "B0"
    if code == GUID:
        return "G" + _text(v)
    if code == BINARY:
        return "X" + bytes(v[:MAX_CHARS]).decode("latin-1").translate(_BYTES) + END
    raise ValueError(f"unknown type code {code!r}")


def is_exact(pair: list[Any] | tuple[int, Any]) -> bool:
    """True when no other value of the group has this value's encoding (no rounding, no truncation), so
    a strict bound on it may exclude the encoding itself. Numbers never are: a big Int64 *property*
    may round onto a literal's encoding."""
    code, v = pair[0], pair[1]
    if code == STRING or code == GUID or code == BINARY:
        return len(v) < MAX_CHARS
    return code == BOOLEAN or code == DATETIME


def entry_pk(idx: IndexDef, props: dict[str, Any]) -> str | None:
    """The entry PartitionKey of an entity with ``props``; None when it lacks the first indexed property."""
    if idx.on[0] not in props:
        return None
    get = props.get
    return "".join(encode_value(get(p)) for p in idx.on)


def entry_rk(pk: str, rk: str) -> str:
    """The entry RowKey for base key ``(pk, rk)``."""
    return pk + RK_SEPARATOR + rk


def base_key(erk: str) -> tuple[str, str]:
    """The base key ``(pk, rk)`` of an entry RowKey (the inverse of :func:`entry_rk`)."""
    pk, sep, rk = erk.partition(RK_SEPARATOR)
    if not sep:
        raise ValueError(f"not an index entry's RowKey: {erk!r}")
    return pk, rk


def entry_key(epk: str, erk: str) -> bytes:
    """The store key of an entry (:func:`rangetable.keys.encode_key`)."""
    return encode_key(epk, erk)


def entry_value(idx: IndexDef, props: dict[str, Any]) -> dict[str, Any]:
    """The properties an entry keeps: every one (``include`` None), none (``()``) or the named ones."""
    if idx.include is None:
        return dict(props)
    return {p: props[p] for p in idx.include if p in props}


def _same_value(a: Any, b: Any) -> bool:
    """Identical values: unlike ``==``, ``0.0`` differs from ``-0.0`` and NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return _PACK_D(a) == _PACK_D(b) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def _same_props(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        a[k][0] == b[k][0] and _same_value(a[k][1], b[k][1]) for k in a)


def entry_ops(idx: IndexDef, pk: str, rk: str, before: dict[str, Any] | None,
              after: dict[str, Any] | None) -> list[tuple[str, str, dict[str, Any] | None]]:
    """The index writes for base entity ``(pk, rk)`` going from ``before`` to ``after`` (None: absent):
    ``(entry_pk, entry_rk, value)`` puts and ``(entry_pk, entry_rk, None)`` deletes, deletes first."""
    old = None if before is None else entry_pk(idx, before)
    new = None if after is None else entry_pk(idx, after)
    erk = entry_rk(pk, rk)
    ops: list[tuple[str, str, dict[str, Any] | None]] = []
    if old is not None and old != new:
        ops.append((old, erk, None))
    if new is not None and after is not None:
        value = entry_value(idx, after)
        if old != new or before is None or not _same_props(value, entry_value(idx, before)):
            ops.append((new, erk, value))
    return ops
