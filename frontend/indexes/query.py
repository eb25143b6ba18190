"""A query answered through an index: read-your-writes check, entries, then the base rows re-checked.

When a ``$filter`` constrains no key but constrains a ready index (:func:`rangetable.index_plan.choose`), a
page is gathered in three steps, each asking every range it needs at once:

1. **fresh enough** — unless the caller accepts an older answer (``staleness`` seconds): the index's progress
   row gives the feed cursor ``C`` its applier has applied through; each base range is asked for one record
   after ``C``. A range answers only with committed records, and every write acknowledged before the query
   began is committed, so when no range has one, the index holds every such write. Otherwise the progress row
   is read again after a back-off — for at most :data:`FRESH_WAIT_S`, then the page falls back to scanning the
   base table (slower, never wrong). The wait is reported with the page.
2. **entries** — the index plan's scans of the index's table, in entry order, up to the page size.
3. **rows** — the base rows the entries name, read by point spans per base range with the query's own
   ``$filter`` and ``$select``: every hit is checked against the row as it is now, so an entry the applier has
   not removed yet is dropped, never returned.

**The optimistic path** (:meth:`IndexQuery.try_known`): when an earlier query of this frontend read a cursor
``C`` from the progress row, the index had applied through ``C`` then, so entries read now hold every change up
to ``C``. The page reads its entries first, then asks each base range, in one request, for its rows and for
one record after ``C`` (a scan carrying a feed request: ``partition_server/data_requests.py``): two rounds, one
request per range. When no range holds such a record, every write acknowledged before the query began is at or
before ``C`` and the page stands; when one does, what was read is dropped and the page takes the plain path.

Rows come in entry order (by the indexed values, then PartitionKey and RowKey), as Cosmos DB's Table API
answers without key order. The continuation token is the entries' position, marked so it is never taken for
a base key (:func:`token`).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any

from frontend.changes import ChangesWalk
from frontend.indexes.progress import PROGRESS_PK, PROGRESS_RK, Progress
from frontend.routing import MapCache, QueryCursor, Route
from rangetable import feed_cursor
from rangetable.errors import TableError
from rangetable.index_keys import base_key
from rangetable.index_plan import IndexPlan
from rangetable.keys import encode_key, range_bounds
from rangetable.planner import Plan

FRESH_WAIT_S = 2.0  # how long a page waits for its index to catch up before scanning the base table
TOKEN_MARK = "\x02"  # an index query's continuation token starts so (no PartitionKey has a control character)
MAX_POINTS = 256  # base keys asked of one range in one request


def token(index: str, pos: bytes) -> list[str]:
    """The continuation token of an index query stopped at entry key ``pos`` (any bytes: a scan may end at a
    prefix's successor)."""
    return [f"{TOKEN_MARK}{index}{TOKEN_MARK}", base64.urlsafe_b64encode(pos).decode("ascii")]


def is_index_token(tok: Any) -> bool:
    """True for a token made by :func:`token`."""
    return isinstance(tok, list | tuple) and len(tok) == 2 and isinstance(tok[0], str) and tok[0][:1] == TOKEN_MARK


def token_position(tok: list[str], index: str) -> bytes:
    """The entry key an index token resumes at; InvalidInput when it belongs to another index."""
    name = tok[0][1:].partition(TOKEN_MARK)[0]
    if name.lower() != index.lower():
        raise TableError("InvalidInput", f"The continuation token is for index {name!r}, which no longer answers this query.")
    try:
        return base64.urlsafe_b64decode(tok[1].encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise TableError("InvalidInput", "The continuation token is not valid.") from None


@dataclass
class IndexQuery:
    """One page of a query through an index (see the module docstring)."""

    plan: IndexPlan
    table: str
    filter: str | None
    select: list | None
    top: int
    staleness_s: float | None
    cursor: QueryCursor
    phase: str = "progress"  # progress → check → entries → rows → done
    born: float = field(default_factory=time.monotonic)
    fresh_ms: float = 0.0  # how long the page waited for the index
    applied_through: int | None = None  # the Timestamp of the index's cursor
    walk: ChangesWalk | None = None
    need: int | None = None  # the highest last Timestamp the base ranges had when first asked
    first_last: int = 0
    keys: list[bytes] = field(default_factory=list)  # base keys of this page's entries, in entry order
    rows: dict[bytes, Any] = field(default_factory=dict)  # base key -> row (matching the filter)
    pending: set[bytes] = field(default_factory=set)  # base keys not yet answered for
    asked: dict[int, list[bytes]] = field(default_factory=dict)  # rows part -> its base keys, while awaited
    checks: dict[int, int] = field(default_factory=dict)  # rows part -> the freshness check's part it carries
    fallback: str | None = None  # why the page scans the base table instead
    fresh: bool = False  # the check passed (or was not asked for)
    optimistic: bool = False  # checking a cursor read by an earlier query with the rows (see the docstring)
    entries_ready: bool = False  # the page's entries are read
    keys_known: bool = False  # ... and their base keys are in keys
    entries_flying: bool = False  # a segment of entries is asked
    progress_flying: bool = False  # the progress row is asked
    start_pos: bytes = b""
    _ids: int = 0

    @classmethod
    def start(cls, plan: IndexPlan, table: str, req: dict, top: int) -> IndexQuery:
        """The first (or a continued) page of ``req`` through ``plan``."""
        stale = req.get("staleness")
        if stale is not None and (isinstance(stale, bool) or not isinstance(stale, int | float) or stale < 0):
            raise TableError("InvalidInput", "staleness must be a number of seconds")
        cur = QueryCursor(Plan("partition_range", plan.scans), top)
        if req.get("next") is not None:
            cur.pos = token_position(req["next"], plan.index.name)
        return cls(plan, table, req.get("filter"), req.get("select"), top, stale, cur, start_pos=cur.pos)

    def try_known(self, cursor: list | None) -> None:
        """Take the optimistic path (see the module docstring) with ``cursor``, what an earlier query read of the
        index's progress (the index had applied through it then, so it still has): the entries are read at once,
        and the check against ``cursor`` rides with the rows. When it passes, the progress row was not needed and
        what was read stands; when it fails, it is dropped and the page takes the plain path."""
        if cursor is None or self.staleness_s is not None:
            return
        pos = feed_cursor.from_wire(cursor)
        self.applied_through = pos[0]
        self.walk = ChangesWalk(pos, 1)
        self.phase = "entries"
        self.optimistic = True

    @property
    def checking(self) -> bool:
        """True while the optimistic path's check is open (it rides with the rows)."""
        return self.optimistic and not self.fresh

    @property
    def entries_table(self) -> str:
        """The index's table."""
        return self.plan.index.entries_table

    # --- 1. fresh enough ------------------------------------------------------------------------

    def progress_request(self) -> tuple[str, str, str]:
        """(table, PartitionKey, RowKey) of the progress row to read."""
        return self.entries_table, PROGRESS_PK, PROGRESS_RK

    def take_progress(self, props: dict | None) -> list | None:
        """The progress row (None: the index has none: scan the base table instead); returns the cursor the
        index is applied through (None when it has none), for later queries to try first."""
        if props is None:
            self._give_up("the index has no progress row")
            return None
        prog = Progress.from_props(props)
        if prog.phase != "feed" or prog.cursor is None:
            self._give_up("the index is being built")
            return None
        pos = feed_cursor.from_wire(prog.cursor)
        self.applied_through = pos[0]
        if self.staleness_s is not None and prog.resolved is not None and time.time() - prog.saved <= self.staleness_s:
            self.fresh = True
            self.phase = "entries"
            return prog.cursor
        self.walk = ChangesWalk(pos, 1)
        self.phase = "check"
        return prog.cursor

    def check_parts(self, cache: MapCache) -> list[tuple[Route, int, dict[str, Any]]]:
        """The freshness checks to send: one record after the index's cursor (up to :attr:`need`), of each base
        range not answered."""
        assert self.walk is not None
        return [(route, *self._ask_check(route, lo, hi)) for route, lo, hi in self.walk.segments(cache, self.table)]

    def _ask_check(self, route: Route, lo: bytes, hi: bytes | None) -> tuple[int, dict[str, Any]]:
        assert self.walk is not None
        part, body = self.walk.ask(route, lo, hi)
        body["close"] = False  # only whether a committed record lies beyond: nothing to close
        body["upto"] = self.need  # the first time none: each range says how far it is (``last``)
        return part, body

    def take_check(self, part: int, answer: dict) -> None:
        """A base range's answer to the freshness check; the first round also notes how far each range was
        (its last Timestamp): later rounds look no further, so writes after the query began never hold it."""
        assert self.walk is not None
        self.walk.take(part, answer)
        last = answer.get("last")
        if self.need is None and type(last) is int:
            self.first_last = max(self.first_last, last)

    def checked(self) -> bool | None:
        """Once every base range answered: True when none holds a record beyond the index's cursor (go on),
        False when one does (read the progress row again). None while answers are awaited."""
        walk = self.walk
        if walk is None or not walk.done:
            return None
        if not walk.records:
            self.fresh_ms = (time.monotonic() - self.born) * 1000
            self._fresh()
            return True
        if time.monotonic() - self.born > FRESH_WAIT_S:
            self._give_up(f"the index stayed behind the base table for {FRESH_WAIT_S:g} s")
            return True
        if self.need is None:
            self.need = self.first_last
        if self.optimistic:  # what was read may miss a write the check found: read it again
            self.optimistic = self.entries_ready = self.keys_known = False
            self.cursor = QueryCursor(self.cursor.plan, self.top, self.start_pos)
            self.keys, self.rows, self.pending = [], {}, set()
            self.asked.clear()
            self.checks.clear()
        self.walk = None
        self.phase = "progress"
        return False

    def _fresh(self) -> None:
        self.fresh = True
        if self.entries_ready:
            self._entries_read()
        else:
            self.phase = "entries"

    def _give_up(self, why: str) -> None:
        """The index cannot be shown fresh: a first page scans the base table instead (the Handler switches); a
        continued page goes on through the index as it is, and says why (``fallback``)."""
        self.fallback = why
        self._fresh()

    @property
    def first_page(self) -> bool:
        """True for a query's first page (no continuation token)."""
        return self.start_pos == b""

    # --- 2. entries -----------------------------------------------------------------------------

    def wants_entries(self) -> bool:
        """True when a segment of entries is to be asked now: after the check, or first on the optimistic path."""
        return self.phase == "entries" and not (self.entries_ready or self.entries_flying)

    def take_entries(self, cursor: QueryCursor, entities: list, resume: bytes | None, seg_hi: bytes | None,
                     page_over: bool) -> None:
        """A segment of entries (asked with ``cursor``: one dropped meanwhile is ignored): their base keys join
        the page; on to the rows once the page is full and the index known fresh."""
        self.entries_flying = False
        if cursor is not self.cursor:
            return
        cur = self.cursor
        cur.advance(entities, resume, seg_hi)
        if cur.remaining <= 0 or cur.done or page_over:
            self.entries_ready = True
            if self.fresh or self.optimistic:
                self._entries_read()

    def _entries_read(self) -> None:
        """On to the rows (and, on the optimistic path, the check that rides with them)."""
        if not self.keys_known:
            for e in self.cursor.results:
                pk, rk = base_key(e[1])
                self.keys.append(encode_key(pk, rk))
            self.pending = set(self.keys)
            self.keys_known = True
        self.phase = "rows" if self.pending or self.checking else "done"

    # --- 3. rows --------------------------------------------------------------------------------

    def row_parts(self, cache: MapCache, budget_ms: int) -> list[tuple[Route, int, dict[str, Any]]]:
        """Point reads of the base rows not yet answered for, by the ranges of ``cache``, with the query's
        filter (the re-check) and projection; while the optimistic check is open, each part of the table it has
        not had answered gets one request carrying the check and the rows there (up to :data:`MAX_POINTS`)."""
        flying = {k for ks in self.asked.values() for k in ks}
        keys = sorted(k for k in self.pending if k not in flying)
        out = []
        if self.checking:
            assert self.walk is not None
            riding: set[bytes] = set()
            for route, lo, hi in self.walk.segments(cache, self.table):
                share = [k for k in keys if k >= lo and (hi is None or k < hi)][:MAX_POINTS]
                riding.update(share)
                check, feed = self._ask_check(route, lo, hi)
                for name in ("op", "range", "epoch"):
                    del feed[name]
                if share:
                    body = self._rows_body(route, share, budget_ms)
                else:  # an empty span: the check alone
                    self._ids += 1
                    body = {"op": "scan", "range": route.range["id"], "epoch": route.range["epoch"], "lo": lo,
                            "hi": lo, "limit": 0, "budget_ms": budget_ms}
                body["feed"] = feed
                self.asked[self._ids] = share
                self.checks[self._ids] = check
                out.append((route, self._ids, body))
            keys = [k for k in keys if k not in riding]
        i = 0
        while i < len(keys):
            route = cache.route_key(self.table, keys[i])
            _, hi = range_bounds(route.range["low"], route.range["high"])
            j = i + 1
            while j < len(keys) and j - i < MAX_POINTS and (hi is None or keys[j] < hi):
                j += 1
            share = keys[i:j]
            body = self._rows_body(route, share, budget_ms)
            out.append((route, self._ids, body))
            self.asked[self._ids] = share
            i = j
        return out

    def _rows_body(self, route: Route, share: list[bytes], budget_ms: int) -> dict[str, Any]:
        """A scan of the point spans of ``share`` (base keys, ascending, in one range), under a new part id."""
        self._ids += 1
        body: dict[str, Any] = {
            "op": "scan", "range": route.range["id"], "epoch": route.range["epoch"], "lo": share[0],
            "hi": share[0] + b"\x00", "filter": self.filter, "select": self.select, "limit": len(share),
            "budget_ms": budget_ms}
        if len(share) > 1:
            body["spans"] = [[k, k + b"\x00"] for k in share[1:]]
        return body

    def lost(self, step: tuple) -> None:
        """A sub-request (``("ixq", kind, …)``) got no usable answer: what it asked is asked again."""
        kind = step[1]
        if kind == "check" and self.walk is not None:
            self.walk.failed(step[2])
        elif kind == "rows":
            self.failed(step[2])
        elif kind == "entries":
            self.entries_flying = False
        elif kind == "progress":
            self.progress_flying = False

    def failed(self, part: int) -> None:
        """A part got no usable answer: its keys (and the check it carried) are asked again."""
        self.asked.pop(part, None)
        check = self.checks.pop(part, None)
        if check is not None and self.walk is not None:
            self.walk.failed(check)

    def take_rows(self, part: int, entities: list, resume: bytes | None, feed: dict | None = None) -> None:
        """A range's rows: those that match; keys from ``resume`` on are asked again. ``feed``: the answer to
        the check the part carried (then see :meth:`checked`)."""
        share = self.asked.pop(part, None)
        check = self.checks.pop(part, None)
        if share is None:
            return
        if check is not None and self.walk is not None:
            if feed is None:
                self.walk.failed(check)
            else:
                self.take_check(check, feed)
        for e in entities:
            self.rows[encode_key(e[0], e[1])] = e
        for k in share:
            if resume is None or k < resume:
                self.pending.discard(k)
        if not self.pending and not self.checking:
            self.phase = "done"

    def page(self) -> dict[str, Any]:
        """The page once :attr:`phase` is ``done``."""
        cur = self.cursor
        nxt = None if cur.done else token(self.plan.index.name, cur.pos)
        return {"entities": [self.rows[k] for k in self.keys if k in self.rows], "next": nxt,
                "plan": self.describe()}

    def describe(self) -> dict[str, Any]:
        """How the page was answered: the index, its scans, the wait for it, the entries read."""
        return {"index": self.plan.index.name, "plan": self.plan.describe(), "fresh_wait_ms": round(self.fresh_ms, 1),
                "applied_through": self.applied_through, "entries": len(self.keys),
                "stale_ok": self.staleness_s is not None, "fallback": self.fallback}
