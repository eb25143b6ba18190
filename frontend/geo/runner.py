"""A secondary cluster's frontend runs the appliers of its tables (issue 35, ``docs/geo.md``).

Each HTTP frontend of a secondary cluster (``rangetable up --secondary-of``) runs :class:`Followers`: every
:data:`RECONCILE_S` it lists the source cluster's tables, creates on its own cluster those it lacks and deletes
those the source no longer has (every frontend may: a table created or deleted twice answers TableAlreadyExists
or TableNotFound, which is the same outcome), and runs one :class:`Follower` per table. A follower takes the
table's claim from its coordinator (``source_claim``: one holder at a time, numbered, renewed every
:data:`RENEW_S`) and runs the table's :class:`~frontend.geo.applier.TableApplier` while it holds it: pages of the
source's feed read with the source's client key (:class:`NativeSource`), written into every range
(``source_write``) and their frontiers published as the table's cut (``source_publish``), at once while pages
are full and every :data:`LIVE_PAUSE_S` to :data:`IDLE_PAUSE_S` at the live edge.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from frontend.geo.applier import Grant, SourcePage, TableApplier
from frontend.indexes.applier import Frontend, LostClaim
from rangetable import curve, feed_cursor, feed_page, protocol
from rangetable.client.aio.transport import AsyncTransport
from rangetable.edm import STRING
from rangetable.errors import TableError
from rangetable.filter_syntax import format_literal
from rangetable.index_def import is_index_table
from rangetable.keys import decode_key, encode_key

log = logging.getLogger("rangetable.geo")

CLAIM_TTL_S = 10.0  # a follower's lease on its table
RENEW_S = 1.0
SCAN_TOP = 1000  # entities per page of a first copy
ROLE_POLL_S = 0.2  # how often the geo role the coordinator sent is looked at
RECONCILE_S = 1.0  # how often the source's tables are listed and the followers matched to them
SETTINGS_EVERY = 10  # reconciles between two looks at the source's table settings
LIVE_PAUSE_S = 0.05  # between pages at the live edge after one that had changes …
IDLE_PAUSE_S = 0.2  # … doubling after each without, up to this


def followed_settings(table: dict[str, Any]) -> dict[str, Any]:
    """The settings of a ``get_table`` answer that a secondary table keeps as its source's: the TTL (its reads at
    a cut hide what the source's hid then; its own reclaimer deletes nothing while it follows, the source's
    expire records do) and the change feed's (its own feed, read at the cut, carries the source's records).
    Reserved throughput is each cluster's own."""
    return {"ttl_s": int(table.get("ttl_s") or 0), "feed_off": int(table.get("feed") == "off"),
            "feed_before": int(bool(table.get("feed_before_images"))),
            "feed_retention_s": table.get("feed_retention") or "1d"}


class NativeSource:
    """The source cluster through its native endpoints, with the client key of its connection file
    (:class:`~frontend.geo.applier.Source`). It asks one frontend of the source; one that does not answer in time
    (its host down, the link to it cut) is left for the next one its connection file lists, round the list."""

    def __init__(self, doc: dict[str, Any], connect: Callable[[str], Any] = AsyncTransport) -> None:
        curve.remember_cluster(doc)
        endpoints = [e for e in [doc.get("native"), *(doc.get("frontends") or [])] if isinstance(e, str) and e]
        if not endpoints:
            raise ValueError("the source's connection file names no native endpoint")
        self.endpoints = list(dict.fromkeys(endpoints))
        self.connect = connect
        self.at = 0  # the endpoint asked now
        self.transport = connect(self.endpoints[0])

    async def _ask(self, body: Any) -> Any:
        try:
            return await self.transport.request(body)
        except TableError as e:
            if e.error_code == "OperationTimedOut" and len(self.endpoints) > 1:  # the next frontend, next time
                old, self.at = self.transport, (self.at + 1) % len(self.endpoints)
                self.transport = self.connect(self.endpoints[self.at])
                await old.close()
                log.warning("source frontend %s did not answer: asking %s", self.endpoints[self.at - 1],
                            self.endpoints[self.at])
            raise

    async def page(self, table: str, cursor: str | None, top: int) -> SourcePage:
        """The page of ``table``'s feed after ``cursor`` (None: from the oldest change kept)."""
        start = feed_page.BEGINNING if cursor is None else feed_cursor.decode(cursor)
        answer = await self._ask(feed_page.request(table, top, start))
        return SourcePage(answer["records"], feed_cursor.encode(feed_cursor.from_wire(answer["cursor"])),
                          answer.get("resolved"))

    async def now(self, table: str) -> str:
        """The cursor of the present of ``table``'s feed."""
        answer = await self._ask(feed_page.request(table, 1, feed_page.NOW))
        return feed_cursor.encode(feed_cursor.from_wire(answer["cursor"]))

    async def scan(self, table: str, token: Any) -> tuple[list[list], Any]:
        """A page of ``table``'s entities from continuation ``token``, and the next token."""
        answer = await self._ask({"op": "query", "table": table, "top": SCAN_TOP, "next": token})
        return answer["entities"], answer.get("next")

    async def values(self, table: str, keys: list[bytes]) -> list[list]:
        """``[key, stored value or None]`` of each entity key of ``table`` now (None: it holds none), read by one
        query for them all: an ``or`` of their point keys, which the source's frontend asks each range for in one
        multi-get (up to 256 keys a request)."""
        if not keys:
            return []
        filt = " or ".join(f"(PartitionKey eq {format_literal(STRING, pk)} and RowKey eq {format_literal(STRING, rk)})"
                           for pk, rk in map(decode_key, keys))
        got: dict[bytes, bytes] = {}
        token = None
        while True:  # one page unless the source's page budget cut it short
            answer = await self._ask({"op": "query", "table": table, "filter": filt, "top": len(keys), "next": token})
            for pk, rk, ts, props in answer["entities"]:
                got[encode_key(pk, rk)] = protocol.pack([ts, props])
            token = answer.get("next")
            if token is None:
                return [[k, got.get(k)] for k in keys]

    async def settings(self, table: str) -> dict[str, Any]:
        """The settings of the source's table that a secondary keeps too (:func:`followed_settings`)."""
        return followed_settings(await self._ask({"op": "get_table", "table": table}))

    async def tables(self) -> list[str]:
        """The source's tables."""
        return list((await self._ask({"op": "list_tables"}))["tables"])

    async def close(self) -> None:
        """Close the connection."""
        await self.transport.close()


async def ask(fe: Frontend, req: dict[str, Any], *fine: str) -> None:
    """Run an internal request of the secondary's own (a table created or deleted); the error codes ``fine`` say
    it was done already."""
    try:
        await fe.request({**req, "internal": True})
        log.info("%s %s", req["op"], req["table"])
    except TableError as e:
        if e.error_code not in fine:
            raise


class OwnCluster:
    """The secondary cluster through its own frontend's internal requests (:class:`~frontend.geo.applier.Secondary`)."""

    def __init__(self, fe: Frontend, holder: str) -> None:
        self.fe = fe
        self.holder = holder
        self.progress: dict[str, dict[str, Any]] = {}  # table lower -> what its holder reports with each renewal

    async def claim(self, table: str) -> Grant:
        """Take or renew the table's claim; LostClaim when another holder has it."""
        got = await self.fe.request({"op": "source_claim", "internal": True, "table": table, "holder": self.holder,
                                     "ttl_s": CLAIM_TTL_S, "progress": self.progress.get(table.lower(), {})})
        if not got.get("granted"):
            raise LostClaim(f"table {table} is applied by {got.get('holder')}")
        return Grant(int(got["claim"]), got.get("cut"), got.get("copy"))

    async def copied(self, table: str, claim: int, progress: dict[str, Any]) -> None:
        """Note how far the table's first copy got."""
        await self.fe.request({"op": "source_copied", "internal": True, "table": table, "claim": claim,
                               "copy": progress})

    async def write(self, table: str, claim: int, records: list[list], pos: list, trim: int | None) -> int:
        """Write a page into every range of the table, trimming undo records at or below ``trim``; how many
        records the ranges applied."""
        got = await self.fe.request({"op": "source_write", "internal": True, "table": table, "claim": claim,
                                     "records": records, "pos": pos, "trim": trim})
        return int(got["applied"])

    async def publish(self, table: str, claim: int, cut: int, lag_s: float) -> None:
        """Make ``cut`` the table's cut."""
        await self.fe.request({"op": "source_publish", "internal": True, "table": table, "claim": claim,
                               "cut": cut, "lag_s": round(lag_s, 3)})

    async def copy(self, table: str, claim: int, values: list[list], floor: int) -> int:
        """Put a page of the first copy into the table's ranges, their feeds starting after ``floor``."""
        got = await self.fe.request({"op": "source_write", "internal": True, "table": table, "claim": claim,
                                     "records": values, "copy": True, "floor": floor})
        return int(got["applied"])

    async def changed_since(self, table: str, start: str) -> set[bytes]:
        """The entity keys of the table's own change feed after cursor ``start``, read now to its live edge."""
        keys: set[bytes] = set()
        at: Any = feed_cursor.decode(start)
        while True:
            page = await self.fe.request({**feed_page.request(table, 1000, at), "internal": True})
            keys.update(r[1] for r in page["records"])
            at = feed_cursor.from_wire(page["cursor"])
            if page.get("resolved") is not None:
                return keys

    async def seal(self, table: str, claim: int, at: int) -> None:
        """Every range of the table holds nothing after ``at``."""
        await self.fe.request({"op": "source_write", "internal": True, "table": table, "claim": claim,
                               "records": [], "seal": at})

    async def empty(self, table: str) -> bool:
        """Whether the table holds no entity (read now, not at a cut)."""
        page = await self.fe.request({"op": "query", "internal": True, "table": table, "top": 1})
        return not page["entities"]

    async def reset(self, table: str) -> None:
        """Delete the table and create it again (its cut goes with it); returns once the map has it again."""
        log.warning("table %s: clearing it for a new copy from the source", table)
        await ask(self.fe, {"op": "delete_table", "table": table}, "ResourceNotFound", "TableNotFound")
        await ask(self.fe, {"op": "create_table", "table": table}, "TableAlreadyExists")
        for _ in range(100):
            if self.fe.cache.has_table(table):
                return
            await asyncio.sleep(0.1)
        raise TableError("ServerBusy", f"table {table} created again is not in this frontend's map")


class Follower:
    """Keeps one table in step with its source while this process holds the table's claim."""

    def __init__(self, table: str, source: NativeSource, own: OwnCluster) -> None:
        self.table = table
        self.source = source
        self.own = own

    async def run(self) -> None:
        """Claim the table and apply it, again after any failure, until cancelled."""
        while True:
            try:
                applier = TableApplier(self.table, self.source, self.own)
                await applier.take()
                renew = asyncio.create_task(self._renew(applier))  # from the claim on: during a copy too
                try:
                    await applier.resume()
                    await self._apply(applier, renew)
                finally:
                    renew.cancel()
            except asyncio.CancelledError:
                raise
            except LostClaim:
                await asyncio.sleep(RENEW_S)
            except TableError as e:
                self.own.progress[self.table.lower()] = {"error": f"{e.error_code}: {e}"}  # geo status shows it
                if e.error_code == "FeedTrimmed":  # the source lost changes the table needs: copy it again
                    log.error("following table %s: %s: copying it again", self.table, e)
                    await self.own.reset(self.table)
                else:
                    log.warning("following table %s: %s", self.table, e)
                    await asyncio.sleep(1.0)
            except Exception:  # never let one table stop the frontend's others
                log.exception("following table %s", self.table)
                await asyncio.sleep(1.0)

    async def _renew(self, applier: TableApplier) -> None:
        """Renew the claim every :data:`RENEW_S` with a report of the work; ends (and so stops the applier) with
        LostClaim when another holder has it, or when renewals failed for as long as the claim lasts."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(RENEW_S)
            self.own.progress[self.table.lower()] = {"applied": applier.applied, "copied": applier.copied,
                                                     "lag_s": applier.lag_s}
            try:
                await self.own.claim(self.table)
                renewed = time.monotonic()
            except TableError as e:  # the coordinator away a moment: the claim lasts CLAIM_TTL_S
                if time.monotonic() - renewed >= CLAIM_TTL_S:
                    raise LostClaim(f"table {self.table}: no renewal for {CLAIM_TTL_S:g} s ({e})") from e
                log.warning("table %s: renewing the claim: %s", self.table, e)

    async def _apply(self, applier: TableApplier, renew: asyncio.Task) -> None:
        pause = LIVE_PAUSE_S
        while True:
            if renew.done():
                renew.result()  # raises what ended it (LostClaim, or the error that kept it from renewing)
                raise LostClaim(f"table {self.table}: the claim's renewal stopped")
            page = await applier.step()
            if page.resolved is None:
                pause = LIVE_PAUSE_S
                continue  # more follow at once
            pause = LIVE_PAUSE_S if page.records else min(pause * 2, IDLE_PAUSE_S)
            await asyncio.sleep(pause)


class RoleWatch:
    """Runs :class:`Followers` while the cluster's geo role (as its coordinator sends it: ``MapCache.geo``) is
    ``secondary``, again from the start when the role changes (a new epoch: another source, or the same after a
    failover and back), and none otherwise."""

    def __init__(self, fe: Frontend) -> None:
        self.fe = fe

    async def run(self) -> None:
        """Follow the role until cancelled."""
        running: tuple[int, asyncio.Task] | None = None
        try:
            while True:
                geo = self.fe.cache.geo
                epoch = geo["epoch"] if geo is not None and geo["role"] == "secondary" else None
                if running is not None and running[0] != epoch:
                    running[1].cancel()
                    running = None
                if running is None and epoch is not None and geo is not None:
                    log.info("geo role: secondary of %s (epoch %d)", (geo["source"] or {}).get("native"), epoch)
                    running = epoch, asyncio.create_task(Followers(self.fe, geo["source"]).run())
                await asyncio.sleep(ROLE_POLL_S)
        finally:
            if running is not None:
                running[1].cancel()


class Followers:
    """The followers of every table of the source, started and stopped as tables come and go."""

    def __init__(self, fe: Frontend, doc: dict[str, Any]) -> None:
        self.fe = fe
        self.source = NativeSource(doc)
        self.own = OwnCluster(fe, f"{fe.id}/{os.getpid()}")
        self.running: dict[str, asyncio.Task] = {}
        self.rounds = 0

    async def run(self) -> None:
        """Match the tables and their followers to the source every :data:`RECONCILE_S`, until cancelled."""
        try:
            while True:
                try:
                    await self.reconcile()
                except TableError as e:
                    log.warning("listing the source's tables: %s", e)
                await asyncio.sleep(RECONCILE_S)
        finally:
            for t in self.running.values():
                t.cancel()
            await self.source.close()

    async def reconcile(self) -> None:
        """Create the tables the source has and this cluster lacks, delete those it no longer has, run a follower
        for each, and every :data:`SETTINGS_EVERY` rounds give each its source's settings."""
        theirs = {t.lower(): t for t in await self.source.tables()}
        ours = {k: t for k, t in self.fe.cache.tables.items() if not is_index_table(t)}
        for key, name in theirs.items():
            if key not in ours:
                await ask(self.fe, {"op": "create_table", "table": name}, "TableAlreadyExists")
        for key, name in ours.items():
            if key not in theirs:
                task = self.running.pop(key, None)
                if task is not None:
                    task.cancel()
                await ask(self.fe, {"op": "delete_table", "table": name}, "ResourceNotFound", "TableNotFound")
        for key in [k for k in self.running if k not in theirs]:
            self.running.pop(key).cancel()
        for key, name in theirs.items():
            if key not in self.running or self.running[key].done():
                self.running[key] = asyncio.create_task(Follower(name, self.source, self.own).run())
        self.rounds += 1
        if self.rounds % SETTINGS_EVERY == 1:
            for name in theirs.values():
                await self.match_settings(name)

    async def match_settings(self, table: str) -> None:
        """Give the table its source's settings (:func:`followed_settings`) when they differ."""
        want = await self.source.settings(table)
        ours = followed_settings(await self.fe.request({"op": "get_table", "table": table, "internal": True}))
        if ours != want:
            await ask(self.fe, {"op": "set_table", "table": table, "settings": want},
                      "ResourceNotFound", "TableNotFound")

