"""Plain versions of the product's fast paths, kept only to check them: the readable definitions that the
property tests compare each fast path with, on the same generated inputs (answers, bytes and errors alike).

* :func:`props_size_plain`, :func:`entity_size` and :func:`validate_entity_plain` — ``rangetable.entity``'s
  ``_check_props`` and ``validate_entity`` (Azure's property and entity limits), every pair through the whole
  rule chain (``tests/unit/test_ps_write_fastpath.py``, ``test_entity.py``);
* :func:`wire_answer` — ``partition_server.store.fast_path.entity_bytes``/``answer``, which splice the stored bytes
  into the wire form instead of decoding and packing them (``tests/unit/test_ps_fastpath.py``,
  ``test_ps_fast_vs_plain.py``);
* :func:`read_headers` and :func:`lf` — ``frontend.http.fastpath.headers_of`` and ``lf``, a ``$batch`` part's
  header block and its line ends; :func:`plain_batch` runs the ``$batch`` parser with only these and the
  product's own fallbacks (``tests/unit/test_batch_speed.py``, ``test_conversion_speed.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import msgpack

from frontend.http import fastpath
from rangetable import protocol
from rangetable.edm import Entity
from rangetable.entity import (
    MAX_CUSTOM_PROPERTIES,
    MAX_ENTITY_SIZE,
    _check_name,
    _check_value,
    _u16,
    validate_key,
)
from rangetable.errors import TableError
from rangetable.protocol import entity_to_wire


def props_size_plain(props: dict[str, Any]) -> int:
    """The plain version of :func:`_check_props`: every pair through the whole rule chain."""
    if type(props) is not dict:
        raise TableError("InvalidInput", "Properties must be a dict of name to [code, value].")
    if len(props) > MAX_CUSTOM_PROPERTIES:
        raise TableError("TooManyProperties")
    size = 0
    for name, pair in props.items():
        _check_name(name)
        try:
            code, v = pair
        except (TypeError, ValueError):
            raise TableError("InvalidInput", f"Property {name!r} is not a [code, value] pair.") from None
        size += 8 + 2 * len(name) + _check_value(name, code, v)
    return size


def entity_size(pk: str, rk: str, props: dict[str, Any]) -> int:
    """Azure's size estimate of an entity in bytes.

    ``4 + 2·len(PK+RK) + Σ(8 + 2·len(name) + value size)`` with value sizes string 2·len+4, binary
    n+4, DateTime/Int64/Double 8, Guid 16, Int32 4, Boolean 1; lengths in UTF-16 code units. The props
    must be valid (:func:`props_size_plain` computes their share and raises on an invalid one).
    """
    return 4 + 2 * (_u16(pk) + _u16(rk)) + props_size_plain(props)


def validate_entity_plain(pk: str, rk: str, props: dict[str, Any]) -> None:
    """The plain version of :func:`validate_entity`: each key, then every property, then the size."""
    validate_key("PartitionKey", pk)
    validate_key("RowKey", rk)
    if entity_size(pk, rk, props) > MAX_ENTITY_SIZE:
        raise TableError("EntityTooLarge")


def wire_answer(key: bytes, value: bytes | None) -> bytes:
    """An op's answer in wire form, packed from the decoded entity: ``msgpack([pk, rk, ts, props])``,
    or nil for a delete (:func:`partition_server.store.fast_path.entity_bytes` splices the same bytes)."""
    if value is None:
        return protocol.pack(None)
    pkb, _, rkb = key.partition(b"\x00")
    ts, props = msgpack.unpackb(value, strict_map_key=False)  # a pair may be a map (see validate_props)
    return protocol.pack(entity_to_wire(Entity(pkb.decode(), rkb.decode(), ts, props)))


def read_headers(block: bytes) -> dict[str, str]:
    """The plain version of :func:`frontend.http.fastpath.headers_of`: a batch part's ``Name: value`` lines,
    read line by line without remembering anything (blank lines ignored; 400 InvalidInput on other lines)."""
    out: dict[str, str] = {}
    for line in block.decode("latin-1").split("\n"):
        name, colon, value = line.partition(":")
        name = name.strip(" \t")
        if colon and name and name[0] not in "\r\x0b\x0c":
            out[name.lower()] = value.lstrip(" \t").rstrip(" \t\r")
        elif line.strip():
            raise TableError("InvalidInput", f"Malformed header line in a batch part: {line[:80]!r}")
    return out


def lf(body: bytes) -> bytes:
    """The plain version of :func:`frontend.http.fastpath.lf`: every CRLF turned into LF."""
    return body.replace(b"\r\n", b"\n")


@contextmanager
def plain_batch() -> Iterator[None]:
    """The ``$batch`` parser with its fast paths replaced by the plain versions: :func:`read_headers`, :func:`lf`,
    and the product's fallbacks for cutting parts (``split_scan``) and splitting URLs (``split_url_plain``)."""
    with mock.patch.multiple(fastpath, headers_of=read_headers, lf=lf, split_plain=lambda *_: None,
                             split_url=lambda _: None):
        yield
