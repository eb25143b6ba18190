"""The applier of an index: it keeps the index's table in step with its base table's change feed.

One applier per index runs at a time, in some HTTP frontend: the one holding the index's *claim*, a lease the
coordinator grants and numbers (``index_claim``), renewed every :data:`RENEW_S`. The claim's number goes with
every write as a fencing token, so an applier that lost its claim and still runs writes nothing a newer one
wrote (:mod:`partition_server.store.index_state`).

Its work, restartable at every step from the *progress row* it keeps in the index's own table (PartitionKey
``""``, below every entry):

1. **build** (once, for a new index): the feed position of the present ``P0`` is noted, then the base table
   is read page by page (an ordinary query: continuation tokens survive splits, merges and failovers) and
   every entity's entry written; the row keeps the scan's continuation token after each page.
2. **catch up and follow**: the feed is read from ``P0`` (the changes the scan may have missed or seen half
   of), each record's entries written (delete the old, put the new: :func:`rangetable.index_keys.entry_ops`,
   from the record's before-image) in batches that carry the position of their last record — a range skips a
   batch it applied already, so a resumed or doubled applier never applies a change twice — and the row keeps
   the feed cursor after each page. Once a page reaches the live edge the coordinator is told the index is
   ``ready`` and queries start to use it.

Every write is a state the record left (an entry put, or deleted), so replaying the feed from an older cursor
converges to the same index. The process loop only moves messages: which entries a run of records makes is
:func:`batches`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from typing import Any, Protocol

import msgpack

from frontend.indexes import check
from frontend.indexes.progress import PROGRESS_KEY, PROGRESS_PK, PROGRESS_RK, Progress
from frontend.routing import MapCache
from rangetable.edm import now_ticks, ticks_to_iso
from rangetable.errors import TableError
from rangetable.index_def import IndexDef
from rangetable.index_keys import entry_key, entry_ops
from rangetable.keys import decode_key
from rangetable.table_settings import TICKS_PER_SECOND

log = logging.getLogger("rangetable.index")

CLAIM_TTL_S = 10.0  # an applier's lease on its index
RENEW_S = 1.0  # also how often the holder reports its progress and lag (back-pressure acts on it)
PAGE_TOP = 1000  # feed records asked per page
SCAN_TOP = 1000  # base entities per page of the build
BATCH_BYTES = 4 << 20  # entries of one index write at most (about)
LIVE_PAUSE_S = 0.02  # between pages at the live edge after one that had changes …
IDLE_PAUSE_S = 0.1  # … doubling after each without, up to this (an idle table's feed is read 10 times a second)
RECONCILE_S = 1.0  # how often the appliers running are matched to the map's indexes
GET_FANOUT = 64  # point reads of a check's second look in flight at once

def record_entries(idx: IndexDef, record: list) -> list[tuple[bytes, dict | None]]:
    """The entry writes of one feed record ``[ts, key, kind, value, before]`` (values stored as
    ``msgpack([ts, props])``)."""
    _, key, _, value, before = record
    pk, rk = decode_key(key)
    old = None if before is None else msgpack.unpackb(before, raw=False)[1]
    new = None if value is None else msgpack.unpackb(value, raw=False)[1]
    return [(entry_key(epk, erk), kept) for epk, erk, kept in entry_ops(idx, pk, rk, old, new)]


def batches(idx: IndexDef, records: list, max_bytes: int = BATCH_BYTES) -> Iterator[tuple[dict[bytes, dict | None], list]]:
    """The index writes of a run of feed records, in order: ``(entries, position)`` with each entry key once
    (the last write to it wins, as it would applied one by one) and the position ``[ts, key]`` of the batch's
    last record; cut after about ``max_bytes`` of entries."""
    entries: dict[bytes, dict | None] = {}
    size = 0
    for record in records:
        for k, kept in record_entries(idx, record):
            entries[k] = kept
            size += len(k) + (64 if kept is None else 64 + len(msgpack.packb(kept)))
        if size >= max_bytes:
            yield entries, [record[0], record[1]]
            entries, size = {}, 0
    if entries and records:
        yield entries, [records[-1][0], records[-1][1]]


def scan_entries(idx: IndexDef, entities: list) -> dict[bytes, dict | None]:
    """The entries of base entities ``[pk, rk, ts, props]`` read by the build."""
    out: dict[bytes, dict | None] = {}
    for pk, rk, _, props in entities:
        for epk, erk, kept in entry_ops(idx, pk, rk, None, props):
            out[entry_key(epk, erk)] = kept
    return out


def _ts(prog: Progress) -> int:
    """The Timestamp of the applier's feed cursor."""
    return 0 if prog.cursor is None else int(prog.cursor[0])


class Frontend(Protocol):
    """What an applier uses of its frontend (:class:`frontend.native.asyncio_driver.AioFrontend`)."""

    id: str
    cache: MapCache

    async def request(self, req: dict, timeout: float | None = None) -> Any:
        """Run one native request of this process and return its result; raises TableError."""


class LostClaim(Exception):
    """The applier's claim ran out before it could renew it."""


class Applier:
    """Applies one index while this process holds its claim (see the module docstring)."""

    def __init__(self, fe: Frontend, idx: IndexDef, holder: str) -> None:
        self.fe = fe
        self.idx = idx
        self.holder = holder
        self.claim = 0
        self.until = 0.0  # monotonic end of the claim's lease
        self.progress: Progress | None = None
        self.lag_s: float | None = None  # how far behind the feed's live edge the last page was
        self.need: int | None = None  # the last feed page's highest frontier (the next page's hint)
        self.applied_last = False  # the last feed page had changes
        self.checked: str | None = None  # the id of the last check run and reported

    def _req(self, op: str, **fields: Any) -> dict[str, Any]:
        return {"op": op, "internal": True, **fields}

    async def run(self) -> None:
        """Claim the index and apply it, again after any failure, until cancelled."""
        while True:
            try:
                if await self._take():
                    renew = asyncio.create_task(self._renew())
                    try:
                        await self._apply()
                    finally:
                        renew.cancel()
                else:
                    await asyncio.sleep(RENEW_S)
            except asyncio.CancelledError:
                raise
            except LostClaim:
                log.warning("index %s of %s: claim %d lost", self.idx.name, self.idx.table, self.claim)
            except TableError as e:
                log.warning("index %s of %s: %s", self.idx.name, self.idx.table, e)
                await asyncio.sleep(1.0)
            except Exception:  # never let one index stop the frontend's others
                log.exception("index %s of %s", self.idx.name, self.idx.table)
                await asyncio.sleep(1.0)

    def report(self) -> dict[str, Any]:
        """What the holder tells the coordinator with each renewal (``index list`` shows it; a ready index's
        ``lag_s`` over :data:`rangetable.index_def.LAG_BOUND_S` holds its table's writes)."""
        prog = self.progress
        out: dict[str, Any] = {"claim": self.claim}
        if prog is not None:
            out.update(phase=prog.phase, built=prog.built, applied=prog.applied, blind=prog.blind,
                       applied_through=None if prog.cursor is None else ticks_to_iso(prog.cursor[0]))
        if self.lag_s is not None:
            out["lag_s"] = round(self.lag_s, 3)
        return out

    async def _take(self) -> bool:
        t0 = time.monotonic()
        got = await self.fe.request(self._req("index_claim", table=self.idx.table, name=self.idx.name,
                                              holder=self.holder, ttl_s=CLAIM_TTL_S, progress=self.report()))
        if not got.get("granted"):
            return False
        self.claim, self.until = int(got["claim"]), t0 + float(got.get("ttl_s", CLAIM_TTL_S))
        return True

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                if not await self._take():
                    self.until = 0.0
                    return
            except TableError as e:
                log.warning("index %s of %s: renewing the claim: %s", self.idx.name, self.idx.table, e)

    def _check_claim(self) -> None:
        if time.monotonic() >= self.until:
            raise LostClaim

    async def _write(self, entries: dict[bytes, dict | None], pos: list | None) -> None:
        self._check_claim()
        await self.fe.request(self._req("index_write", table=self.idx.entries_table, claim=self.claim, pos=pos,
                                        ops=[[k, v] for k, v in entries.items()]))

    async def _save(self, prog: Progress) -> None:
        await self._write({PROGRESS_KEY: prog.props()}, None)
        self.progress = prog

    async def read_progress(self) -> Progress | None:
        """The index's progress row, or None before the build began."""
        ent = await self._get(self.idx.entries_table, (PROGRESS_PK, PROGRESS_RK))
        return None if ent is None else Progress.from_props(ent[3])

    async def _apply(self) -> None:
        prog = await self.read_progress()
        if prog is None:
            now = await self.fe.request(self._req("changes", table=self.idx.table, start="now"))
            prog = Progress("build", now["cursor"], cursor=now["cursor"])
            await self._save(prog)
        while prog.phase == "build":
            page = await self.fe.request(self._req("query", table=self.idx.table, top=SCAN_TOP, next=prog.scan))
            entities = page["entities"]
            if entities:
                await self._write(scan_entries(self.idx, entities), None)
            prog.built += len(entities)
            prog.scan = page.get("next")
            if prog.scan is None:
                prog.phase = "feed"
            await self._save(prog)
        self.need = None
        ready = self.idx.ready
        pause = LIVE_PAUSE_S
        while True:
            try:
                edge = await self._follow(prog)
            except TableError as e:
                if e.error_code != "FeedTrimmed":
                    raise
                log.error("index %s of %s fell behind the feed's retention: building it again",
                          self.idx.name, self.idx.table)
                await self._write({PROGRESS_KEY: None}, None)  # the next claim starts the build again
                return
            if edge:
                if not ready:
                    await self.fe.request(self._req("index_ready", table=self.idx.table, name=self.idx.name))
                    ready = True
                await self._answer_check(prog)
                pause = LIVE_PAUSE_S if self.applied_last else min(pause * 2, IDLE_PAUSE_S)
                await asyncio.sleep(pause)
            self._check_claim()

    async def _follow(self, prog: Progress) -> bool:
        """Apply one page of the feed; True when it reached the live edge (every change at or below the cursor's
        Timestamp is applied)."""
        page = await self.fe.request(self._req("changes", table=self.idx.table, after=prog.cursor, top=PAGE_TOP,
                                               need=self.need))
        records = page["records"]
        for entries, pos in batches(self.idx, records):
            await self._write(entries, pos)
        blind = sum(1 for r in records if r[4] is None and r[2] != "insert")
        if blind:  # the old entry of such a change cannot be found: `index check --repair` removes it
            prog.blind += blind
            log.warning("index %s of %s: %d changes without the entity before them (before-images off?)",
                        self.idx.name, self.idx.table, blind)
        prog.cursor, self.need = page["cursor"], page.get("high")
        prog.applied += len(records)
        self.applied_last = bool(records)
        prog.resolved = page.get("resolved")
        self.lag_s = 0.0 if prog.resolved is not None else max(0.0, (now_ticks() - prog.cursor[0]) / TICKS_PER_SECOND)
        if records or time.time() - prog.saved > 5.0:
            await self._save(prog)
        return prog.resolved is not None

    async def _answer_check(self, prog: Progress) -> None:
        """Run the check the map asks for, if any and not run yet, and report it (``index_checked``)."""
        low = self.idx.name.lower()
        d = next((d for d in self.fe.cache.indexes_of(self.idx.table) if d.name.lower() == low), None)
        if d is None or d.check is None or d.check.get("id") == self.checked:
            return
        t0 = time.monotonic()
        try:
            rep = await self._check(prog, bool(d.check.get("repair")))
        except (TableError, LostClaim) as e:  # reported, then raised: the loop takes it from there
            await self._report(d.check["id"], {"error": str(e), "seconds": round(time.monotonic() - t0, 3)})
            raise
        rep["seconds"] = round(time.monotonic() - t0, 3)
        await self._report(d.check["id"], rep)

    async def _report(self, check_id: str, rep: dict[str, Any]) -> None:
        await self.fe.request({"op": "index_checked", "table": self.idx.table, "name": self.idx.name,
                               "id": check_id, "report": rep})
        self.checked = check_id

    async def _read_all(self, table: str) -> list[list]:
        rows: list[list] = []
        token = None
        while True:
            page = await self.fe.request(self._req("query", table=table, top=SCAN_TOP, next=token))
            rows += page["entities"]
            token = page.get("next")
            if token is None:
                return rows

    async def _get(self, table: str, key: tuple[str, str]) -> list | None:
        """The entity of ``key`` (PartitionKey, RowKey) in ``table``, or None."""
        try:
            return await self.fe.request(self._req("get", table=table, pk=key[0], rk=key[1]))
        except TableError as e:
            if e.error_code in ("ResourceNotFound", "EntityNotFound"):
                return None
            raise

    async def _get_many(self, table: str, keys: list[tuple[str, str]]) -> list[list]:
        found: list[list] = []
        for i in range(0, len(keys), GET_FANOUT):
            got = await asyncio.gather(*(self._get(table, k) for k in keys[i:i + GET_FANOUT]))
            found += [g for g in got if g is not None]
        return found

    async def _relook(self, prog: Progress, diffs: list[check.Diff], lows: list[str]) -> list[check.Diff]:
        """The differences of ``diffs`` still there at the cursor of now (point reads of their keys)."""
        bases = sorted({d.base for d in diffs})
        rows = await self._get_many(self.idx.table, bases)
        keys = {d.key for d in diffs} | set(check.look(self.idx, rows, [], _ts(prog)).expected)
        entries = await self._get_many(self.idx.entries_table, sorted(keys))
        return check.persisting(diffs, check.differences(check.look(self.idx, rows, entries, _ts(prog)), lows)[1])

    async def _check(self, prog: Progress, repair: bool) -> dict[str, Any]:
        """Compare the index with its base table at this cursor (:mod:`frontend.indexes.check`); differences are
        looked at again once the feed is applied past the first look, and with ``repair`` fixed under this
        applier's claim and looked at once more."""
        lows = list(self.fe.cache.by_table.get(self.idx.table.lower(), ([""], []))[0]) or [""]
        cursor_ts = _ts(prog)
        rows = await self._read_all(self.idx.table)
        entries = await self._read_all(self.idx.entries_table)
        first = check.look(self.idx, rows, entries, cursor_ts)
        _, diffs = check.differences(first, lows)
        rep: dict[str, Any] = {"cursor_ts": cursor_ts, "ranges": len(lows), "base_rows": first.base_rows,
                               "entries": len(first.actual), "in_flight": len(first.in_flight)}
        if diffs:  # a second look once every change made during the first is applied
            now = (await self.fe.request(self._req("changes", table=self.idx.table, start="now")))["cursor"]
            while not ((edge := await self._follow(prog)) and _ts(prog) >= now[0]):
                self._check_claim()
                if edge:
                    await asyncio.sleep(LIVE_PAUSE_S)
            diffs = await self._relook(prog, diffs, lows)
        rep.update(check.report(diffs))
        rep["repaired"], rep["remaining"] = 0, len(diffs)
        if repair and diffs:
            fixes = {entry_key(*k): v for k, v in check.fixes(diffs).items()}
            await self._write(fixes, None)
            rep["repaired"] = len(fixes)
            rep["remaining"] = len(await self._relook(prog, diffs, lows))
        return rep


class Appliers:
    """The appliers of every index in the map, started and stopped as indexes come and go."""

    def __init__(self, fe: Frontend) -> None:
        self.fe = fe
        self.holder = f"{fe.id}/{os.getpid()}"
        self.running: dict[tuple[str, str], asyncio.Task] = {}

    async def run(self) -> None:
        """Match the running appliers to the map's indexes every :data:`RECONCILE_S`, until cancelled."""
        try:
            while True:
                self.reconcile()
                await asyncio.sleep(RECONCILE_S)
        finally:
            for t in self.running.values():
                t.cancel()

    def reconcile(self) -> None:
        """Start an applier for each index without one; stop those of dropped indexes."""
        want: dict[tuple[str, str], IndexDef] = {}
        for defs in self.fe.cache.indexes.values():
            for d in defs:
                want[(d.table.lower(), d.name.lower())] = d
        for key in [k for k in self.running if k not in want]:
            self.running.pop(key).cancel()
        for key, d in want.items():
            if key not in self.running or self.running[key].done():
                self.running[key] = asyncio.create_task(Applier(self.fe, d, self.holder).run())
