"""A table's key span covered part by part: which parts the ranges answered, which are awaited, which are gaps.

A frontend request that must hear from every range of a span (a page of the change feed, :mod:`frontend.changes`;
a secondary cluster's write of its source's changes, :mod:`frontend.geo.write`) asks each range for its part at
once, by the map it has. A part whose answer failed (or never came: the range moved, split, merged or lost its
primary) becomes a gap again and is cut anew by the map of then, so the request never depends on which ranges
held the span when it began. Pure: no sockets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from frontend.routing import MapCache, Route
from rangetable.keys import range_bounds

Span = tuple[bytes, bytes | None]  # [lo, hi) of entity keys; hi None: to the table's end


@dataclass
class SpanCover:
    """The parts of ``[start, end)`` answered and awaited."""

    start: bytes = b""
    end: bytes | None = None
    answered: list[Span] = field(default_factory=list)
    asked: dict[int, Span] = field(default_factory=dict)  # part id -> its span, while its answer is awaited
    _ids: int = 0

    def gaps(self) -> list[Span]:
        """The parts of the span neither answered nor asked."""
        out: list[Span] = []
        pos: bytes | None = self.start
        for lo, hi in sorted([*self.answered, *self.asked.values()], key=lambda s: s[0]):
            if pos is None:
                break
            if lo > pos:
                out.append((pos, lo))
            pos = None if hi is None else max(pos, hi)
        if pos is not None and (self.end is None or pos < self.end):
            out.append((pos, self.end))
        return out

    @property
    def done(self) -> bool:
        """True once every part of the span has answered."""
        return not self.asked and not self.gaps()

    def segments(self, cache: MapCache, table: str) -> list[tuple[Route, bytes, bytes | None]]:
        """The parts to ask now: each gap cut at the boundaries of the ranges that hold it, by ``cache``."""
        out = []
        for lo, hi in self.gaps():
            pos = lo
            while True:
                route = cache.route_key(table, pos)
                _, rhi = range_bounds(route.range["low"], route.range["high"])
                part_hi = rhi if hi is None else (hi if rhi is None else min(rhi, hi))
                out.append((route, pos, part_hi))
                if part_hi is None or part_hi == hi:
                    break
                pos = part_hi
        return out

    def ask(self, lo: bytes, hi: bytes | None) -> int:
        """Note part ``[lo, hi)`` as asked; its id."""
        self._ids += 1
        self.asked[self._ids] = (lo, hi)
        return self._ids

    def failed(self, part: int) -> None:
        """Part ``part`` got no usable answer: it is a gap again."""
        self.asked.pop(part, None)

    def take(self, part: int) -> Span | None:
        """Part ``part`` answered: its span, now covered (None: a part given up on meanwhile, whose answer is
        not taken)."""
        span = self.asked.pop(part, None)
        if span is not None:
            self.answered.append(span)
        return span
