"""A table's change feed as a frontend reads it: one walk over the table's ranges per page, every range at once.

The walk asks each range for its part of the key span at the same time (``partition_server/store/feed.py``):
its records after the reader's position and its *frontier* — its resolved Timestamp, or the last Timestamp
of a full page. Once every part has answered, every record at or below the lowest frontier ``F`` is known,
in every range, so the page is those records in position order and the cursor is ``(F, after every key)``.
When no range had more, ``F`` is the table's resolved Timestamp: no change at or below it will ever
appear. Each range may answer ``limit`` records, so a page keeps the first ``limit`` of them (and the rest
of the last one's Timestamp) and then ends after that Timestamp.

Nothing of this depends on which ranges hold the table: the walk covers the key span, so a split, merge,
move or failover while a page is gathered changes only which server answers a part, and a part whose
answer failed (or never came) is asked again, by the map of then, as the *gaps* of what has answered.
A position is ``(Timestamp, entity key)`` (:mod:`rangetable.feed_cursor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frontend.routing import MapCache, Route
from frontend.spans import Span, SpanCover
from rangetable import feed_cursor
from rangetable.feed_cursor import Position


@dataclass
class ChangesWalk:
    """One page of a table's feed being gathered from its ranges (see the module docstring)."""

    after: Position | None  # the reader's position; None: from the oldest change every range keeps
    limit: int  # records asked of each range (0: only the resolved Timestamp, for a start "now")
    start: bytes = b""  # the key span read (a consumer group's span; the whole table by default)
    end: bytes | None = None
    need: int | None = None  # the reader's hint: ranges below it close first (the previous page's ``high``)
    upto: int | None = None  # the lowest frontier so far
    cut: int | None = None  # a secondary cluster's table: read at its cut (docs/geo.md), no range closed
    high: int | None = None  # the highest frontier so far
    floor: int = 0  # the highest floor seen (where a read from the beginning starts)
    more: bool = False  # some range had more records than it answered
    records: list = field(default_factory=list)
    cover: SpanCover = field(init=False)  # the parts of the span answered and awaited

    def __post_init__(self) -> None:
        self.cover = SpanCover(self.start, self.end)

    def gaps(self) -> list[Span]:
        """The parts of the span neither answered nor asked."""
        return self.cover.gaps()

    @property
    def done(self) -> bool:
        """True once every part of the span has answered."""
        return self.cover.done

    @property
    def asked(self) -> dict[int, Span]:
        """The parts awaited: part id -> span."""
        return self.cover.asked

    def segments(self, cache: MapCache, table: str) -> list[tuple[Route, bytes, bytes | None]]:
        """The parts to ask now (:meth:`SpanCover.segments <frontend.spans.SpanCover.segments>`)."""
        return self.cover.segments(cache, table)

    def ask(self, route: Route, lo: bytes, hi: bytes | None) -> tuple[int, dict[str, Any]]:
        """Note part ``[lo, hi)`` as asked of ``route``'s range: its id and the partition server request."""
        return self.cover.ask(lo, hi), {
            "op": "changes", "range": route.range["id"], "epoch": route.range["epoch"], "lo": lo, "hi": hi,
            "after": None if self.after is None else feed_cursor.to_wire(self.after), "upto": self.upto,
            "limit": self.limit, "close": self.cut is None, "need": _max(self.need, self.high), "cut": self.cut}

    def failed(self, part: int) -> None:
        """Part ``part`` got no usable answer: it is a gap again."""
        self.cover.failed(part)

    def result(self) -> dict[str, Any]:
        """The page once :attr:`done` (:meth:`page`)."""
        return self.page()

    def take(self, part: int, answer: dict) -> None:
        """Take part ``part``'s answer (a :class:`rangetable.messages.ChangesAnswer`)."""
        if self.cover.take(part) is None:
            return  # a part given up on meanwhile
        self.records.extend(answer["records"])
        frontier = int(answer["frontier"])
        self.upto = frontier if self.upto is None else min(self.upto, frontier)
        self.high = _max(self.high, frontier)
        self.floor = max(self.floor, int(answer.get("floor", 0)))
        self.more = self.more or bool(answer["more"])

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
