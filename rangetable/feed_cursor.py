"""A change-feed cursor: the position in a table's feed after which a reader resumes.

A position is ``(Timestamp, entity key)``: a table's changes are totally ordered by it, whatever ranges
serve them (``partition_server/store/feed.py``), so a cursor stays valid across splits, merges, failovers,
moves and coordinator takeovers. ``key`` None means "after every change at that Timestamp". Users see it as
an opaque string (:func:`encode`), like a continuation token; the native protocol carries ``[ts, key]``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgpack

from rangetable.errors import TableError

Position = tuple[int, bytes | None]
VERSION = 1
_PREFIX = "c1."


def encode(pos: Position) -> str:
    """The opaque cursor of ``pos``."""
    raw = msgpack.packb([VERSION, pos[0], pos[1]], use_bin_type=True)
    return _PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: str) -> Position:
    """The position of a cursor from :func:`encode`; InvalidInput for anything else."""
    if not isinstance(token, str) or not token.startswith(_PREFIX):
        raise TableError("InvalidInput", "not a change-feed cursor")
    body = token[len(_PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        version, ts, key = msgpack.unpackb(raw, raw=False)
    except (binascii.Error, ValueError, TypeError, msgpack.UnpackException):
        raise TableError("InvalidInput", "not a change-feed cursor") from None
    return from_wire([ts, key]) if version == VERSION else _bad()


def _bad() -> Position:
    raise TableError("InvalidInput", "a change-feed cursor of an unknown version")


def to_wire(pos: Position) -> list:
    """``[ts, key]`` for the native protocol."""
    return [pos[0], pos[1]]


def from_wire(value: Any) -> Position:
    """A position from ``[ts, key or nil]``; InvalidInput for anything else."""
    if (isinstance(value, list | tuple) and len(value) == 2 and type(value[0]) is int and value[0] >= 0
            and (value[1] is None or isinstance(value[1], bytes))):
        return value[0], value[1]
    raise TableError("InvalidInput", "a feed position is [Timestamp, key or nil]")


def after(a: Position, b: Position) -> bool:
    """True when position ``a`` comes after ``b`` (a key None is after every key of its Timestamp)."""
    if a[0] != b[0]:
        return a[0] > b[0]
    if a[1] is None or b[1] is None:
        return a[1] is None and b[1] is not None
    return a[1] > b[1]


def frontier(pos: Position) -> int:
    """The Timestamp at or below which every change lies before position ``pos`` (a page's cursor: every change at
    or below it is in that page or an earlier one)."""
    ts, key = pos
    return ts if key is None else ts - 1
