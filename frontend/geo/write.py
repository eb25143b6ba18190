"""One page of a source cluster's changes written into every range of a secondary cluster's table (issue 35,
``docs/geo.md``).

The applier hands its frontend a page of the source table's change feed (records ``[Timestamp, key, kind,
value, before]`` in position order), the position through which the page holds every change (the page's
frontier, ``[F, b"\\xff"]``) and its claim. The write asks *every* range of the table for its part at once
(:class:`~frontend.spans.SpanCover`): its share of the records — none for a range the page did not touch, which
still takes the position, so the whole table then holds every change at or below ``F`` and its cut can move
there (``source_apply``: :meth:`RangeStore.apply_source <partition_server.store.range_store.RangeStore.apply_source>`).
A part whose answer failed (the range moved, split, merged or lost its primary) is cut anew by the map of then
and asked again with the same records, claim and position; a range skips what it applied already, record by
record. The write is done when every part of the table's span has answered. Pure: no sockets.

A *copy* (``copy`` true) is the table's first copy instead: ``records`` are ``[key, stored value]`` of entities
the source's scan read (a value nil deletes: a rejoining secondary's key its source lacks), each range puts its
share as it is (``source_copy``), and there is no position; ``floor`` (the Timestamp the copy's feed replay
starts after) becomes each range's feed floor. A *seal* (``seal`` a Timestamp) asks every range to hold nothing
after it (``source_seal``: a rejoining secondary's own changes after its new source's promotion cut did not
happen in the new history).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frontend.routing import MapCache, Route
from frontend.spans import Span, SpanCover
from rangetable.errors import TableError


@dataclass
class SourceWrite:
    """A page of the source's changes being written into a secondary table (see the module docstring)."""

    table: str
    claim: int
    records: list[list]  # [ts, key, kind, value, before], in position order
    pos: list  # [Timestamp, key]: every change at or below it is in this page or an earlier one
    trim: int | None = None  # undo records at or below it go (no reader asks for a cut below it)
    copy: bool = False  # records are [key, stored value] of the first copy (no position)
    floor: int = 0  # a copy: the ranges' feed floor from now on
    seal: int | None = None  # a seal: the cut every range holds nothing after
    cover: SpanCover = field(default_factory=SpanCover)
    applied: int = 0  # records the ranges applied (those applied already are skipped, not counted)

    @classmethod
    def from_request(cls, req: dict) -> SourceWrite:
        """The write a ``source_write`` request asks for; InvalidInput when malformed (each record is checked by
        the range that applies it)."""
        records, claim, pos, table = req.get("records"), req.get("claim"), req.get("pos"), req.get("table")
        if not isinstance(table, str) or not isinstance(records, list) or type(claim) is not int:
            raise TableError("InvalidInput", "source_write needs a table, records and a claim")
        if req.get("seal") is not None:
            seal = req["seal"]
            if type(seal) is not int or seal < 0 or records:
                raise TableError("InvalidInput", "a seal is a Timestamp, without records")
            return cls(table, claim, [], [], seal=seal)
        if req.get("copy") is True:
            floor = req.get("floor", 0)
            if not all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], bytes) for r in records):
                raise TableError("InvalidInput", "a copied entity is [key, stored value or nil]")
            if type(floor) is not int:
                raise TableError("InvalidInput", "floor must be a Timestamp")
            return cls(table, claim, records, [], copy=True, floor=floor)
        if not (isinstance(pos, list) and len(pos) == 2 and type(pos[0]) is int and isinstance(pos[1], bytes)):
            raise TableError("InvalidInput", "source_write needs the position [Timestamp, key] its page reaches")
        if not all(isinstance(r, list) and len(r) == 5 and isinstance(r[1], bytes) for r in records):
            raise TableError("InvalidInput", "a source record is [Timestamp, key, kind, value or nil, before or nil]")
        trim = req.get("trim")
        if trim is not None and type(trim) is not int:
            raise TableError("InvalidInput", "trim must be a Timestamp")
        return cls(table, claim, records, pos, trim)

    @property
    def done(self) -> bool:
        """True once every range of the table's span has answered."""
        return self.cover.done

    @property
    def asked(self) -> dict[int, Span]:
        """The parts awaited: part id -> span."""
        return self.cover.asked

    def segments(self, cache: MapCache) -> list[tuple[Route, bytes, bytes | None]]:
        """The parts to ask now, cut by the ranges of ``cache``."""
        return self.cover.segments(cache, self.table)

    def ask(self, route: Route, lo: bytes, hi: bytes | None) -> tuple[int, dict[str, Any]]:
        """Note part ``[lo, hi)`` as asked of ``route``'s range: its id and the partition server request, with the
        page's records of that span (in position order)."""
        k = 0 if self.copy else 1  # where a record's entity key is
        share = [r for r in self.records if r[k] >= lo and (hi is None or r[k] < hi)]
        body: dict[str, Any] = {"range": route.range["id"], "epoch": route.range["epoch"], "claim": self.claim}
        if self.seal is not None:
            body.update(op="source_seal", cut=self.seal)
        elif self.copy:
            body.update(op="source_copy", values=share, floor=self.floor)
        else:
            body.update(op="source_apply", records=share, pos=self.pos)
            if self.trim is not None:
                body["trim"] = self.trim
        return self.cover.ask(lo, hi), body

    def failed(self, part: int) -> None:
        """Part ``part`` got no usable answer: its span is asked again."""
        self.cover.failed(part)

    def take(self, part: int, answer: dict[str, Any]) -> None:
        """Part ``part``'s answer: ``{"applied": n}`` (a seal's: ``{"restored": n}``)."""
        if self.cover.take(part) is not None:
            self.applied += int(answer.get("applied", answer.get("restored", 0)))

    def result(self) -> dict[str, int]:
        """The answer once :attr:`done`: how many records the ranges applied."""
        return {"applied": self.applied}
