"""A page of a table's change feed as readers outside the cluster ask for it and see it: one definition for
the native client (:mod:`rangetable.client.changes`), the CLI (``rangetable changes``) and the HTTP
frontend's REST extension (``GET /{account}/{Table}/$changes``, :mod:`frontend.http.changes_ops`).

* Where a reading starts (:func:`parse_start`, :func:`first`): after a cursor (:mod:`rangetable.feed_cursor`), at ``"beginning"``
  (the oldest change kept), ``"now"`` (no record: the cursor of the present), or at a time (the changes at or
  after it); and the native request of a page from there (:func:`request`).
* A record as JSON (:func:`record_json`): ``PartitionKey``, ``RowKey``, ``kind``, ``Timestamp``, ``etag``,
  ``entity`` and ``before`` (entities as the REST API renders them, :func:`rangetable.rest_json.typed_to_json`
  with minimal metadata: ``@odata.type`` annotations on Int64, DateTime, Guid and Binary) and ``cursor``;
  the end of a page (:func:`end_json`): ``cursor`` and ``resolved``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from rangetable import feed_cursor
from rangetable.edm import etag_from_ticks, parse_time, ticks_to_iso
from rangetable.errors import TableError
from rangetable.feed_cursor import Position
from rangetable.keys import decode_key
from rangetable.messages import ChangesPageRequest
from rangetable.rest_json import typed_to_json

BEGINNING, NOW = "beginning", "now"
START_WORDS = (BEGINNING, NOW)
MAX_TOP = 10_000  # records of one page at most
DEFAULT_TOP = 1000
Start = Position | str  # a position to read after, or one of START_WORDS


def parse_start(text: str) -> str | int:
    """Where a reading starts, as a user writes it: ``beginning``, ``now``, or a time in ISO 8601 (UTC unless
    it carries an offset; a date alone is its midnight), in ticks. ValueError for anything else."""
    return text if text in START_WORDS else parse_time(text)


def first(start: str | int, cursor: str | None = None) -> Start:
    """Where a reading starts: right after ``cursor`` when given, else at ``start`` — ``"beginning"``,
    ``"now"`` or a time in ticks (the changes at or after it). InvalidInput for anything else."""
    if cursor is not None:
        return feed_cursor.decode(cursor)
    if type(start) is int:
        return max(0, start - 1), None
    if start in START_WORDS:
        return start
    raise TableError("InvalidInput", "start must be 'beginning', 'now' or a time")


def check_top(top: int) -> int:
    """``top`` when it is a page size the cluster serves (1 to :data:`MAX_TOP`); InvalidInput otherwise."""
    if type(top) is not int or not 1 <= top <= MAX_TOP:
        raise TableError("InvalidInput", f"top must be between 1 and {MAX_TOP}")
    return top


def request(table: str, top: int, start: Start) -> ChangesPageRequest:
    """The native request of the page of ``top`` records at most from ``start``."""
    body: ChangesPageRequest = {"op": "changes", "table": table, "top": top}
    if isinstance(start, str):
        body["start"] = start
    else:
        body["after"] = feed_cursor.to_wire(start)
    return body


def entity_json(pk: str, rk: str, value: bytes | None) -> dict[str, Any] | None:
    """A stored value (``msgpack([ts, props])``, None for none) as the REST API renders the entity."""
    if value is None:
        return None
    ts, props = msgpack.unpackb(value, raw=False)
    return typed_to_json(pk, rk, ts, props, "minimal")


def record_json(record: Sequence[Any]) -> dict[str, Any]:
    """A record ``[ts, key, kind, value, before]`` of a page (:class:`rangetable.messages.ChangesPage`) as
    JSON-ready values, ``cursor`` resuming right after it."""
    ts, key, kind, value, before = record
    pk, rk = decode_key(key)
    return {"PartitionKey": pk, "RowKey": rk, "kind": kind, "Timestamp": ticks_to_iso(ts, full=True),
            "etag": etag_from_ticks(ts), "entity": entity_json(pk, rk, value),
            "before": entity_json(pk, rk, before), "cursor": feed_cursor.encode((ts, key))}


def end_json(cursor: str, resolved: int | None) -> dict[str, Any]:
    """The end of a page: the ``cursor`` after it and the table's ``resolved`` time (None unless the page
    reached the live edge: then no change at or before it will ever appear)."""
    return {"cursor": cursor, "resolved": None if resolved is None else ticks_to_iso(resolved, full=True)}
