"""A table's change feed as a frontend reads it: one walk over the table's ranges in key order per page.

Each step reads one range's feed for the span ``[pos, range end)`` (``partition_server/store/feed.py``):
its records after the reader's position, up to the lowest *frontier* seen so far in this walk (``upto``),
and the range's own frontier — its resolved Timestamp, or the last Timestamp of a full page. Once every
span is read, every record at or below the lowest frontier ``F`` is known, in every range, so the page is
those records in position order and the cursor is ``(F, after every key)``. When no range had more, ``F``
is the table's resolved Timestamp: no change at or below it will ever appear. Each range may answer
``limit`` records, so a page keeps the first ``limit`` of them and then ends at the last one's position.

Nothing of this depends on which ranges hold the table: the walk goes by key, so a split, merge, move or
failover between two steps (or between two pages) changes only which server answers a span, and a retried
step reads its span again. A position is ``(Timestamp, entity key)`` (:mod:`rangetable.feed_cursor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frontend.routing import MapCache, Route
from rangetable import feed_cursor
from rangetable.feed_cursor import Position
from rangetable.keys import range_bounds


@dataclass
class ChangesWalk:
    """One page of a table's feed being gathered, range by range (see the module docstring)."""

    after: Position | None  # the reader's position; None: from the oldest change every range keeps
    limit: int  # records asked of each range (0: only the resolved Timestamp, for a start "now")
    pos: bytes = b""  # where the walk is (it starts at the span's start)
    end: bytes | None = None  # where the span read ends (None: the table's end)
    done: bool = False
    need: int | None = None  # the reader's hint: ranges below it close first (the previous page's ``high``)
    upto: int | None = None  # the lowest frontier so far
    high: int | None = None  # the highest frontier so far
    floor: int = 0  # the highest floor seen (where a read from the beginning starts)
    more: bool = False  # some range had more records than it answered
    records: list = field(default_factory=list)

    def next_segment(self, cache: MapCache, table: str) -> tuple[Route, bytes, bytes | None] | None:
        """The next range and the span ``[lo, hi)`` of it to read, or None once every span is read."""
        if self.done:
            return None
        route = cache.route_key(table, self.pos)
        _, hi = range_bounds(route.range["low"], route.range["high"])
        if self.end is not None and (hi is None or hi > self.end):
            hi = self.end
        return route, self.pos, hi

    def body(self, route: Route, lo: bytes, hi: bytes | None) -> dict[str, Any]:
        """The partition server request of a step."""
        return {"op": "changes", "range": route.range["id"], "epoch": route.range["epoch"], "lo": lo, "hi": hi,
                "after": None if self.after is None else feed_cursor.to_wire(self.after), "upto": self.upto,
                "limit": self.limit, "close": True, "need": _max(self.need, self.high)}

    def advance(self, answer: dict, hi: bytes | None) -> None:
        """Take a step's answer (a :class:`rangetable.messages.ChangesAnswer`) for the span ending at ``hi``."""
        self.records.extend(answer["records"])
        frontier = int(answer["frontier"])
        self.upto = frontier if self.upto is None else min(self.upto, frontier)
        self.high = _max(self.high, frontier)
        self.floor = max(self.floor, int(answer.get("floor", 0)))
        self.more = self.more or bool(answer["more"])
        if hi is None or hi == self.end:
            self.done = True
        else:
            self.pos = hi

    def page(self) -> dict[str, Any]:
        """``{"records", "cursor", "resolved", "high"}`` once :attr:`done`: the first :attr:`limit` records at
        or below the lowest frontier in position order (and the rest of the last one's Timestamp: a transaction
        is never split between pages), the position after them, the table's resolved Timestamp (None when some
        range had more, or the page left some out) and the highest frontier (what the reader's next page passes
        as ``need``)."""
        assert self.done and self.upto is not None
        lower: Position = self.after if self.after is not None else (self.floor, None)
        top = self.upto
        out = [r for r in self.records if r[0] <= top and feed_cursor.after((r[0], r[1]), lower)]
        out.sort(key=_position)
        cursor: Position = (top, None) if top >= lower[0] else lower
        resolved = None if self.more else top
        if len(out) > self.limit:  # each range answered up to limit: the page is the first limit of them
            last = out[self.limit - 1][0]
            out = [r for r in out if r[0] <= last]  # with the rest of the last one's Timestamp
            cursor, resolved = (last, None), None
        return {"records": out, "cursor": feed_cursor.to_wire(cursor), "resolved": resolved, "high": self.high}


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _position(record: list) -> tuple[int, bytes]:
    return record[0], record[1]
