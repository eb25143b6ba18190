"""Order-preserving byte encoding of entity keys.

An entity key is stored as ``utf8(PartitionKey) + b"\\x00" + utf8(RowKey)``. UTF-8 preserves
code-point order byte-wise, and valid keys never contain U+0000 (control characters are rejected by
:func:`rangetable.entity.validate_key`), so the separator sorts below every character that can follow
a PartitionKey. Hence comparing encoded keys as bytes is the same as comparing ``(pk, rk)`` tuples by
code point, which is the ordering the storage engine and range routing rely on.

Meta keys (range descriptors, counters, …) start with :data:`META_PREFIX` ``b"\\xff"``. That byte never
occurs in well-formed UTF-8, so no entity key can start with it and every meta key sorts after every
entity key. An unbounded scan (``high`` is ``None``) therefore has to stop at ``META_PREFIX`` itself.
"""

from __future__ import annotations

SEPARATOR = b"\x00"
META_PREFIX = b"\xff"


def encode_key(pk: str, rk: str) -> bytes:
    """Encode ``(pk, rk)`` as ``utf8(pk) + b"\\x00" + utf8(rk)``, preserving tuple order."""
    return pk.encode("utf-8") + SEPARATOR + rk.encode("utf-8")


def decode_key(b: bytes) -> tuple[str, str]:
    """Inverse of :func:`encode_key`; raises ValueError if ``b`` has no separator."""
    pk, sep, rk = b.partition(SEPARATOR)
    if not sep:
        raise ValueError(f"not an entity key: {b!r}")
    return pk.decode("utf-8"), rk.decode("utf-8")


def partition_bounds(pk: str) -> tuple[bytes, bytes]:
    """The half-open byte span ``[pk\\x00, pk\\x01)`` holding exactly the keys of partition ``pk``."""
    p = pk.encode("utf-8")
    return p + b"\x00", p + b"\x01"


def range_bounds(low_pk: str, high_pk: str | None) -> tuple[bytes, bytes | None]:
    """The byte span of the PartitionKey range ``[low_pk, high_pk)``; ``None`` means unbounded.

    A key with partition ``pk`` lies in ``[low, high)`` as bytes exactly when ``low_pk <= pk < high_pk``.
    With ``high_pk=None`` the span also covers meta keys, so stop such scans at :data:`META_PREFIX`.
    """
    return low_pk.encode("utf-8"), None if high_pk is None else high_pk.encode("utf-8")
