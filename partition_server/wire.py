"""Reply bodies spliced from stored bytes, without decoding and re-encoding entities.

An entity is stored as ``msgpack([ts, props])`` (see :mod:`partition_server.range_store`) and travels
as ``msgpack([pk, rk, ts, props])`` (docs/protocol.md). Both are msgpack arrays, so the wire form is
a 4-element array header, the two keys as msgpack strings, then the stored value without its own
2-element array header. The bytes are exactly what ``msgpack.packb`` of the decoded entity gives
(``use_bin_type=True`` encodes a str of 32-255 bytes as str8), so a receiver cannot tell the
difference; ``tests/unit/test_ps_fastpath.py`` checks this on varied data.

Writes answer the same way: the entity written (or a batch's list of them) is spliced from the value
just packed for storage, and the request record stored with it from those same bytes
(``tests/unit/test_ps_write_fastpath.py``).
"""

from __future__ import annotations

import struct
from itertools import repeat
from operator import getitem, itemgetter

import msgpack

from rangetable.protocol import Packed
from rangetable.protocol import pack as _packb

STORED_HEADER = 0x92  # fixarray of 2: the first byte of every stored entity value
ENTITY_HEADER = b"\x94"  # fixarray of 4: [pk, rk, ts, props]
NIL = b"\xc0"  # a delete's result
_PAGE_HEAD = b"\x82\xa8entities"  # map of 2, key "entities" (then the array of entities)
_PAGE_NEXT = b"\xa4next"  # key "next" (then the continuation key or nil)
_STR_HEADERS = [bytes([0xA0 | n]) for n in range(32)] + [b"\xd9" + bytes([n]) for n in range(32, 256)]
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_UINT64 = 0xCF
_first = itemgetter(0)
_join = b"".join
_REST = slice(1, None)

_unpackb = msgpack.unpackb


def str_header(n: int) -> bytes:
    """The msgpack header of a str of ``n`` UTF-8 bytes."""
    if n < 256:
        return _STR_HEADERS[n]
    if n < 65536:
        return b"\xda" + _U16.pack(n)
    return b"\xdb" + _U32.pack(n)


def array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 65536:
        return b"\xdc" + _U16.pack(n)
    return b"\xdd" + _U32.pack(n)


def key_prefix(pkb: bytes) -> bytes:
    """The start of an entity's wire form up to and including its PartitionKey (UTF-8 ``pkb``)."""
    return ENTITY_HEADER + str_header(len(pkb)) + pkb


def entity(prefix: bytes, rkb: bytes, value: bytes) -> bytes:
    """``msgpack([pk, rk, ts, props])`` from :func:`key_prefix`, the UTF-8 RowKey and the stored value."""
    n = len(rkb)
    if value[0] == STORED_HEADER:
        return prefix + (_STR_HEADERS[n] if n < 256 else str_header(n)) + rkb + value[1:]
    # Not the layout this module knows (never written today): decode and pack instead of splicing.
    pk = _unpackb(prefix[1:])
    return _packb([pk, rkb.decode(), *_unpackb(value)])


def entities(prefix: bytes, rkbs: list[bytes], values: list[bytes]) -> list[bytes]:
    """:func:`entity` of each UTF-8 RowKey in ``rkbs`` and stored value in ``values`` (one partition),
    spliced at C level in the usual case."""
    if values and max(map(len, rkbs)) < 256 and bytes(map(_first, values)).count(STORED_HEADER) == len(values):
        hdrs = map(_STR_HEADERS.__getitem__, map(len, rkbs))
        return list(map(_join, zip(repeat(prefix), hdrs, rkbs, map(getitem, values, repeat(_REST)))))
    return list(map(entity, repeat(prefix), rkbs, values))


def entity_bytes(key: bytes, value: bytes) -> bytes:
    """``msgpack([pk, rk, ts, props])`` from the encoded entity key and the stored value."""
    pkb, _, rkb = key.partition(b"\x00")
    p, r = len(pkb), len(rkb)
    if p < 256 and r < 256 and value[0] == STORED_HEADER:  # the usual case, spliced in one go
        return b"".join((ENTITY_HEADER, _STR_HEADERS[p], pkb, _STR_HEADERS[r], rkb, value[1:]))
    return entity(key_prefix(pkb), rkb, value)


def entity_at(key: bytes, value: bytes) -> Packed:
    """A point read's result from the encoded entity key and the stored value."""
    return Packed(entity_bytes(key, value))


def array(items: list[bytes]) -> Packed:
    """The result ``[item, …]`` from items already packed (a batch's entities in wire form or nil)."""
    return Packed(array_header(len(items)), *items)


def entity_pk(item: bytes) -> str:
    """The PartitionKey of an entity in wire form."""
    return _unpackb(item)[0]


def stored_ts(value: bytes) -> int:
    """The Timestamp of a stored value, decoding only that field when it is a uint64 (the usual case)."""
    if value[0] == STORED_HEADER and value[1] == _UINT64:
        return int.from_bytes(value[2:10], "big")
    return _unpackb(value)[0]


def page(items: list[bytes], next_key: bytes | None) -> Packed:
    """The scan result ``{"entities": [...], "next": next_key}`` from entities in wire form."""
    return Packed(_PAGE_HEAD, array_header(len(items)), *items, _PAGE_NEXT, _packb(next_key))
