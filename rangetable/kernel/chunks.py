"""File chunks as the checkpoint stream carries them, for re-replication and for backups: the bytes and
their CRC-32, checked by the receiver before it writes them."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any


def chunk_fields(data: bytes) -> dict[str, Any]:
    """A chunk's wire fields: ``{"data", "crc"}``."""
    return {"data": data, "crc": zlib.crc32(data)}


def intact(msg: Mapping[str, Any], offset: int, size: int) -> bytes | None:
    """The chunk's bytes when it is whole: not empty, its CRC-32 matches, and it ends within the file's ``size``
    when written at ``offset``; None otherwise."""
    data = bytes(msg["data"])
    if not data or offset + len(data) > size or zlib.crc32(data) != int(msg["crc"]):
        return None
    return data
