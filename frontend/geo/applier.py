"""The applier of a secondary table: it keeps the table in step with its source table's change feed
(``docs/geo.md``, issue 35).

One applier per secondary table runs at a time, in a frontend of the secondary cluster: the one holding the
table's claim, which the secondary's coordinator grants and numbers above every earlier grant (as it does an
index's: :mod:`frontend.indexes.applier`); the number goes with every write as a fencing token, so an applier
that lost its claim and still runs writes nothing (``SourceFenced``). Each turn:

1. reads the page of the source table's feed after the cursor (the source cluster's native client, with the
   source's client key): records in position order and a cursor ``(F, after every key)`` — every change at or
   below the page's frontier ``F`` is in this page or an earlier one;
2. writes the page into every range of the secondary table (``source_write``: :mod:`frontend.geo.write`),
   each range its share and the position ``(F, b"\\xff")``;
3. publishes ``F`` as the table's cut ``T`` to the secondary's coordinator, with the lag behind the source's
   clock: every read of the table is then answered at ``T``.

It resumes from the cut last published: at or below every range's own position, so the records a range holds
already are skipped, one by one (``RangeStore.apply_source``). A table without a cut is copied first
(:meth:`TableApplier.copy`): the position of the present noted, the source table read page by page (an ordinary
query) and each page's entities put as they are (``source_copy``), then the feed replayed from the noted
position: what changed during the scan is applied again, in order. The scan may have read an entity's later
version than the record replayed over it (so that record's undo record holds the later one), so no cut is
published before the replay has passed the present noted after the scan: from there on every range holds the
source's state and every undo record is right. Leftovers of an earlier copy (it stopped halfway, or the source's feed
lost changes the secondary needed: ``FeedTrimmed``) are cleared first, the table created anew — unless the
copy noted how far it got (after each page, with its coordinator): then its successor goes on from there. Nothing here touches a socket: the source and the
secondary are what :class:`Source` and :class:`Secondary` say; the frontend gives the real ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from rangetable import feed_cursor, protocol
from rangetable.edm import TICKS_PER_SECOND, now_ticks
from rangetable.keys import encode_key

TOP = 1000  # records asked per page of the source's feed
REJOIN_BATCH = 256  # keys read at the source and put per write of a rejoin
TRIM_BEHIND_S = 60.0  # undo records this far below the cut are deleted: a reader's cut is older than that never
MARK = b"\xff"  # a position's key after every entity key: all changes of its Timestamp


class SourcePage(NamedTuple):
    """A page of the source table's feed: records ``[ts, key, kind, value, before]`` in position order, the
    cursor after them, and the source table's resolved Timestamp when the page reached the live edge."""

    records: list[list]
    cursor: str
    resolved: int | None


class Grant(NamedTuple):
    """A claim taken: its number, the table's cut (None before the first) and its first copy's progress so far."""

    claim: int
    cut: int | None
    copy: dict[str, Any] | None = None


class Source(Protocol):
    """The source cluster, as an applier reads it."""

    async def page(self, table: str, cursor: str | None, top: int) -> SourcePage:
        """The page of ``table``'s feed after ``cursor`` (None: from the oldest change kept); FeedTrimmed when
        the source no longer holds the changes after it."""

    async def now(self, table: str) -> str:
        """The cursor of the present of ``table``'s feed: the changes after it are those not committed yet."""

    async def scan(self, table: str, token: Any) -> tuple[list[list], Any]:
        """A page of ``table``'s entities ``[pk, rk, ts, props]`` from continuation ``token`` (None: the first),
        and the next token (None after the last page)."""

    async def values(self, table: str, keys: list[bytes]) -> list[list]:
        """``[key, stored value or None]`` of each entity key of ``table`` now (None: it holds none)."""


class Secondary(Protocol):
    """The secondary cluster, as an applier writes it."""

    async def claim(self, table: str) -> Grant:
        """Take or renew the table's claim: its number, the cut published so far and, while there is none, how far
        the first copy got; LostClaim when another holder has it."""

    async def write(self, table: str, claim: int, records: list[list], pos: list, trim: int | None) -> int:
        """Write a page into every range of the table (``source_write``), deleting the undo records at or below
        ``trim``; how many records the ranges applied."""

    async def publish(self, table: str, claim: int, cut: int, lag_s: float) -> None:
        """Make ``cut`` the table's cut (never lower than the one before) and report the lag."""

    async def copy(self, table: str, claim: int, values: list[list], floor: int) -> int:
        """Put entities ``[key, stored value]`` into the table's ranges (the first copy), whose feeds then start
        after ``floor``; how many."""

    async def empty(self, table: str) -> bool:
        """Whether the table holds no entity."""

    async def reset(self, table: str) -> None:
        """Delete the table and create it again, empty and without a cut."""

    async def copied(self, table: str, claim: int, progress: dict[str, Any]) -> None:
        """Note how far the first copy got (``{"start", "next", "copied"}``): a successor goes on from there."""

    async def changed_since(self, table: str, start: str) -> set[bytes]:
        """The entity keys of the table's own change feed after cursor ``start`` (a rejoining secondary's own
        changes since the promotion cut)."""

    async def seal(self, table: str, claim: int, at: int) -> None:
        """Every range of the table holds nothing after Timestamp ``at`` (``source_seal``)."""


def frontier(cursor: str) -> int:
    """The Timestamp at or below which every change is in the pages before ``cursor``."""
    return feed_cursor.frontier(feed_cursor.decode(cursor))


class TableApplier:
    """Keeps one secondary table in step with its source table while this process holds its claim."""

    def __init__(self, table: str, source: Source, secondary: Secondary,
                 clock: Callable[[], int] = now_ticks) -> None:
        self.table = table
        self.source = source
        self.secondary = secondary
        self.clock = clock
        self.claim = 0
        self.cursor: str | None = None
        self.cut: int | None = None
        self.lag_s: float | None = None  # the source's clock less the cut, at the last publish
        self.applied = 0  # records applied since this applier started
        self.copied = 0  # entities put by its first copy
        self.hold = 0  # no cut below it is published (the end of the first copy's scan)
        self.progress: dict[str, Any] | None = None  # how far a first copy got, as the claim's grant said

    async def start(self) -> None:
        """Take the claim (:meth:`take`) and resume (:meth:`resume`)."""
        await self.take()
        await self.resume()

    async def take(self) -> None:
        """Take the table's claim, and learn the cut published so far (or how far the first copy got)."""
        grant = await self.secondary.claim(self.table)
        self.claim, self.cut, self.progress = grant.claim, grant.cut, grant.copy

    async def resume(self) -> None:
        """Go on from the cut last published; copy a table without one first (its holder renews the claim
        meanwhile: a copy may take minutes)."""
        if self.cut is None:
            await self.copy()
        else:
            self.cursor = feed_cursor.encode((self.cut, None))

    async def copy(self) -> None:
        """The table's first copy (see the module docstring), from where an earlier applier's stopped if it noted
        that; the feed is then read from before the scan. A rejoining secondary copies what differs instead
        (:meth:`rejoin`)."""
        if self.progress is not None and type(self.progress.get("rejoin")) is int:
            await self.rejoin(self.progress)
            return
        if self.progress is not None:  # the scan goes on from where it was, the feed from the same present
            start, token, self.copied = self.progress["start"], self.progress["next"], self.progress["copied"]
        else:
            if not await self.secondary.empty(self.table):
                await self.secondary.reset(self.table)  # leftovers of a copy that noted nothing: the table anew
                self.claim = (await self.secondary.claim(self.table)).claim
            start, token = await self.source.now(self.table), None
        while True:
            entities, token = await self.source.scan(self.table, token)
            if entities:
                values = [[encode_key(pk, rk), protocol.pack([ts, props])] for pk, rk, ts, props in entities]
                self.copied += await self.secondary.copy(self.table, self.claim, values, frontier(start))
            if token is None:
                break
            await self.secondary.copied(self.table, self.claim, {"start": start, "next": token, "copied": self.copied})
        self.hold = frontier(await self.source.now(self.table))
        self.cursor = start

    async def rejoin(self, progress: dict[str, Any]) -> None:
        """The copy of a secondary that was its source's primary until a forced failover promoted the source at
        cut ``T`` (``progress["rejoin"]``): it holds the source's state at ``T`` but for its own changes since
        (its loss ledger, in its own feed after ``T``). Those keys are read at the source and put as they are
        now (deleted where the source has none), the table is sealed at ``T`` (its own feed records after ``T``
        dropped: they did not happen in the source's history) and the source's feed is replayed from ``T``; as
        for a first copy, no cut is published before the replay passes the source's present noted after the
        reads. A successor that finds the table sealed (``progress["sealed"]``) replays at once."""
        start, at = progress["start"], int(progress["rejoin"])
        hold = progress.get("sealed")
        if type(hold) is not int:
            keys = sorted(await self.secondary.changed_since(self.table, start))
            for i in range(0, len(keys), REJOIN_BATCH):
                values = await self.source.values(self.table, keys[i:i + REJOIN_BATCH])
                self.copied += await self.secondary.copy(self.table, self.claim, values, 0)
            hold = frontier(await self.source.now(self.table))
            await self.secondary.seal(self.table, self.claim, at)
            await self.secondary.copied(self.table, self.claim, {"start": start, "next": None, "copied": self.copied,
                                                                 "rejoin": at, "sealed": hold})
        self.hold, self.cursor = hold, start

    async def step(self) -> SourcePage:
        """One turn: read a page, write it into every range, publish its frontier as the cut. Returns the page
        (its ``resolved`` says whether it reached the live edge)."""
        page = await self.source.page(self.table, self.cursor, TOP)
        top = frontier(page.cursor)
        if page.records:  # an empty page changes no range: the cut moves on its word alone
            trim = None if self.cut is None else max(0, self.cut - int(TRIM_BEHIND_S * TICKS_PER_SECOND))
            self.applied += await self.secondary.write(self.table, self.claim, page.records, [top, MARK], trim)
        self.lag_s = max(0.0, (self.clock() - top) / TICKS_PER_SECOND)
        if top >= self.hold and (self.cut is None or top > self.cut):
            await self.secondary.publish(self.table, self.claim, top, self.lag_s)
            self.cut = top
        self.cursor = page.cursor
        return page
