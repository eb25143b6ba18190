"""A secondary table's applier (``frontend/geo``): the frontend's write of a page of the source's changes into every
range of the table, and the applier that reads the source's feed page by page and publishes the table's cut.
Real stores behind fake sockets; no processes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from partition_server.store import cut
from partition_server.store.range_store import RangeStore
from rangetable.errors import TableError
from tests.unit.source_helpers import history, read_state, records_of, source_store

# --- the frontend's write of a page into every range of a secondary table --------------------------------


def _map(lows: list[str], version: int):  # type: ignore[no-untyped-def]
    from tests.unit.map_helpers import one_table_map

    return one_table_map("t", lows, version)


def test_a_page_reaches_every_range_and_a_failed_part_is_cut_again_by_the_new_map(tmp_path: Path) -> None:
    """The frontend's source_write: each range gets its share of a page and the page's position (a range the
    page did not touch too), a part that failed is cut again by the map of then (here: its range split), and
    the table then reads at the page's frontier exactly as the source stood there."""
    from frontend.geo.write import SourceWrite
    from partition_server import data_requests as dr
    from rangetable.keys import range_bounds

    src = source_store(tmp_path)
    states = history(src, random.Random(11), 80)
    page = src.read_changes(None, b"", None, 100_000)
    frontier = page.frontier
    w = SourceWrite.from_request({"table": "t", "claim": 1, "records": page.records, "pos": [frontier, b"\xff"]})
    stores: dict[str, RangeStore] = {}

    def serve(route, body: dict) -> dict:  # type: ignore[no-untyped-def]  # a partition server's answer
        rid = route.range["id"]
        store = stores.setdefault(rid, RangeStore.open(tmp_path / rid))
        lo, hi = range_bounds(route.range["low"], route.range["high"])
        from partition_server.served import Served

        return dr.source_apply(Served(dict(route.range), store, lo=lo, hi=hi), body, 1.0)  # type: ignore[arg-type]

    first = [(route, *w.ask(route, lo, hi)) for route, lo, hi in w.segments(_map(["", "pz", "q"], 1))]
    assert [b["records"] == [] for _, _, b in first] == [False, True, False]  # "pz" holds none: a mark alone
    assert all(b["pos"] == [frontier, b"\xff"] and b["op"] == "source_apply" for _, _, b in first)
    (r0, a, body_a), (r1, b, body_b), (r2, c, body_c) = first
    w.take(a, serve(r0, body_a))
    w.take(b, serve(r1, body_b))
    w.failed(c)  # "q.." split meanwhile: asked again by the new map
    assert not w.done and not w.asked
    again = [(route, *w.ask(route, lo, hi)) for route, lo, hi in w.segments(_map(["", "pz", "q", "q5"], 2))]
    assert [(b["range"], len(b["records"]) > 0) for _, _, b in again] == [("r2-2", True), ("r2-3", False)]
    for route, part, body in again:
        w.take(part, serve(route, body))
    w.take(c, {"applied": 99})  # a late answer to the part given up on: not counted
    assert w.done and w.result() == {"applied": len(page.records)}
    spans = {"r1-0": (b"", b"pz"), "r1-1": (b"pz", b"q"), "r2-2": (b"q", b"q5"), "r2-3": (b"q5", None)}
    for ts, state in states:  # every range holds every change at or below the frontier: reads at any cut there
        got: dict = {}
        for rid, (lo, hi) in spans.items():
            got.update(read_state(stores[rid], ts, lo, hi))
        assert got == state
    assert {s.source_state()[1] for s in stores.values()} == {(frontier, b"\xff")}
    for s in stores.values():
        s.close()
    src.close()


def test_a_source_write_that_is_not_one_is_refused() -> None:
    from frontend.geo.write import SourceWrite

    for req in ({"table": "t", "claim": "1", "records": [], "pos": [1, b"\xff"]},
                {"table": "t", "claim": 1, "records": [], "pos": [1, "x"]},
                {"table": "t", "claim": 1, "records": [[1, "k", "insert", None, None]], "pos": [1, b"\xff"]},
                {"claim": 1, "records": [], "pos": [1, b"\xff"]},
                {"table": "t", "claim": 1, "records": [], "pos": [1, b"\xff"], "trim": "5"}):
        with pytest.raises(TableError) as exc:
            SourceWrite.from_request(req)
        assert exc.value.error_code == "InvalidInput"


# --- the applier: pages of the source's feed into a secondary table, its cut published ---------------------


SCAN_PAGE = 3  # entities per page of a first copy's scan: many pages


class _Source:
    """A source table of one range, read as the source cluster's frontend would answer (a page closes the range
    when it reaches the live edge)."""

    def __init__(self, store: RangeStore, during_scan=None) -> None:  # type: ignore[no-untyped-def]
        self.store = store
        self.during_scan = during_scan  # run once, after the first page of a copy's scan: the source goes on
        self.noted: list[int] = []  # the presents it was asked for

    async def page(self, table: str, cursor: str | None, top: int):  # type: ignore[no-untyped-def]
        from frontend.geo.applier import SourcePage
        from rangetable import feed_cursor

        after = None if cursor is None else feed_cursor.decode(cursor)
        page = self.store.read_changes(after, b"", None, top, close=True)
        return SourcePage(page.records, feed_cursor.encode((page.frontier, None)),
                          None if page.more else page.frontier)

    async def now(self, table: str) -> str:
        from rangetable import feed_cursor

        self.noted.append(self.store.last_ts)  # every change at or below it is committed (one thread writes)
        return feed_cursor.encode((self.noted[-1], None))

    async def values(self, table: str, keys: list[bytes]) -> list[list]:
        return [[k, self.store.get_raw(k)] for k in keys]

    async def scan(self, table: str, token):  # type: ignore[no-untyped-def]
        from rangetable.keys import encode_key

        lo = b"" if token is None else token
        entities, nxt = self.store.scan(lo, None, limit=SCAN_PAGE)
        if nxt is None and len(entities) == SCAN_PAGE:
            nxt = encode_key(entities[-1].pk, entities[-1].rk) + b"\x00"
        if self.during_scan is not None:
            self.during_scan()
            self.during_scan = None
        return [[e.pk, e.rk, e.ts, e.props] for e in entities], nxt


class _Secondary:
    """A secondary table of ranges on real stores, split at ``splits``; its claims and cut as its coordinator
    would keep them."""

    def __init__(self, root: Path, splits: list[str]) -> None:
        from partition_server.served import Served
        from rangetable.keys import range_bounds

        lows = ["", *splits]
        self.cache = _map(lows, 1)
        self.served = {}
        for i, (lo, hi) in enumerate(zip(lows, [*splits, None], strict=True)):
            rid = f"r1-{i}"
            b = range_bounds(lo, hi)
            self.served[rid] = Served({"id": rid, "low": lo, "high": hi, "epoch": 1}, RangeStore.open(root / rid),
                                      lo=b[0], hi=b[1])
        self.claims = 0
        self.cut: int | None = None
        self.cuts: list[int] = []
        self.trims: list[int | None] = []
        self.resets = 0
        self.progress: dict | None = None  # how far a first copy got, as its coordinator keeps it

    async def claim(self, table: str):  # type: ignore[no-untyped-def]
        from frontend.geo.applier import Grant

        self.claims += 1
        return Grant(self.claims, self.cut, None if self.cut is not None else self.progress)

    async def copied(self, table: str, claim: int, progress: dict) -> None:
        self.progress = progress

    async def write(self, table: str, claim: int, records: list[list], pos: list, trim: int | None) -> int:
        from frontend.geo.write import SourceWrite
        from partition_server import data_requests as dr

        self.trims.append(trim)
        w = SourceWrite.from_request({"table": table, "claim": claim, "records": records, "pos": pos, "trim": trim})
        for route, lo, hi in w.segments(self.cache):
            part, body = w.ask(route, lo, hi)
            w.take(part, dr.source_apply(self.served[route.range["id"]], body, 1.0))  # type: ignore[arg-type]
        assert w.done
        return w.result()["applied"]

    async def copy(self, table: str, claim: int, values: list[list], floor: int) -> int:
        from frontend.geo.write import SourceWrite
        from partition_server import data_requests as dr

        w = SourceWrite.from_request({"table": table, "claim": claim, "records": values, "copy": True, "floor": floor})
        for route, lo, hi in w.segments(self.cache):
            part, body = w.ask(route, lo, hi)
            w.take(part, dr.source_copy(self.served[route.range["id"]], body, 1.0))  # type: ignore[arg-type]
        assert w.done
        return w.result()["applied"]

    async def empty(self, table: str) -> bool:
        return not any(s.store.scan(s.lo, s.hi, limit=1)[0] for s in self.served.values())

    async def changed_since(self, table: str, start: str) -> set[bytes]:
        from rangetable import feed_cursor

        after = feed_cursor.decode(start)
        return {r[1] for s in self.served.values() for r in s.store.read_changes(after, s.lo, s.hi, 100_000).records}

    async def seal(self, table: str, claim: int, at: int) -> None:
        from frontend.geo.write import SourceWrite
        from partition_server import data_requests as dr

        w = SourceWrite.from_request({"table": table, "claim": claim, "records": [], "seal": at})
        for route, lo, hi in w.segments(self.cache):
            part, body = w.ask(route, lo, hi)
            w.take(part, dr.source_seal(self.served[route.range["id"]], body, 1.0))
        assert w.done

    async def reset(self, table: str) -> None:
        self.resets += 1
        self.cut = self.progress = None
        for s in self.served.values():
            s.store.close()
            path = s.store.path
            s.store = RangeStore.open(f"{path}-{self.resets}")

    async def publish(self, table: str, claim: int, cut: int, lag_s: float) -> None:
        assert self.cut is None or cut > self.cut
        self.cut = cut
        self.cuts.append(cut)

    def read_state(self, at: int) -> dict:
        out: dict = {}
        for s in self.served.values():
            out.update(read_state(s.store, at, s.lo, s.hi))
        return out

    def close(self) -> None:
        for s in self.served.values():
            s.store.close()


async def _to_the_edge(applier, src: RangeStore, top: int | None = None) -> None:  # type: ignore[no-untyped-def]
    """Step ``applier`` until it has published the source's last Timestamp (with pages of ``top`` records)."""
    from frontend.geo import applier as ga

    ga.TOP = top or ga.TOP
    try:
        while (await applier.step()).resolved is None or applier.cut != src.last_ts:
            pass
    finally:
        ga.TOP = 1000


def _cuts_read_right(sec: _Secondary, states: list[tuple[int, dict]], floor: int = 0) -> None:
    """Every cut ``sec`` published at or above ``floor`` reads as the source stood at it; one below is refused."""
    by_ts = dict(states)
    for t in sec.cuts:
        if t >= floor:
            assert sec.read_state(t) == by_ts[max(ts for ts in by_ts if ts <= t)], t
        else:  # never answered from the undo records that are left
            with pytest.raises(TableError) as exc:
                sec.read_state(t)
            assert exc.value.error_code == "ServerBusy"


def test_the_applier_copies_then_publishes_cuts_that_read_as_the_source_stood_and_a_successor_fences_it(
        tmp_path: Path) -> None:
    import asyncio

    from frontend.geo import applier as ga

    src = source_store(tmp_path)
    states = history(src, random.Random(5), 120)
    sec = _Secondary(tmp_path, ["pm", "q"])

    src_view = _Source(src, lambda: states.extend(history(src, random.Random(9), 30)))

    async def run() -> None:
        a = ga.TableApplier("t", src_view, sec)  # type: ignore[arg-type]
        await a.start()  # the first copy, the source changing during its scan
        assert a.copied > 0 and sec.resets == 0
        ga.TOP = 7  # small pages: many cuts
        try:
            while sec.cut is None:  # none before the replay passed the end of the copy's scan
                await a.step()
            assert sec.cut >= a.hold
            await a.step()
            states.extend(history(src, random.Random(6), 40))  # the source goes on meanwhile
            b = ga.TableApplier("t", _Source(src), sec)  # a successor (the first one paused): from the cut
            await b.start()
            assert b.claim == 2 and b.cursor is not None
            await _to_the_edge(b, src)
            with pytest.raises(TableError) as exc:  # the paused one wakes up: fenced
                await a.step()
            assert exc.value.error_code == "SourceFenced"
            after = [r for r in records_of(src) if r[0] > src_view.noted[0]]  # the feed from before the copy's scan
            assert b.applied + a.applied == len(after)  # each change applied once, across both
        finally:
            ga.TOP = 1000

    asyncio.run(run())
    assert len(sec.cuts) > 5 and sec.cut == src.last_ts
    _cuts_read_right(sec, states)
    sec.close()
    src.close()


def test_the_applier_trims_undo_records_below_its_cut_and_a_read_below_the_floor_is_refused(tmp_path: Path) -> None:
    import asyncio

    from frontend.geo import applier as ga

    src = source_store(tmp_path)
    states = history(src, random.Random(8), 20)
    sec = _Secondary(tmp_path, ["pm"])

    async def run() -> None:
        a = ga.TableApplier("t", _Source(src), sec)  # type: ignore[arg-type]
        await a.start()  # the first copy; then the feed of what follows
        states.extend(history(src, random.Random(9), 100))
        ga.TOP, ga.TRIM_BEHIND_S = 9, 0.0  # small pages, and every cut but the newest trimmed below
        try:
            await _to_the_edge(a, src)
        finally:
            ga.TOP, ga.TRIM_BEHIND_S = 1000, 60.0

    asyncio.run(run())
    trims = [t for t in sec.trims if t is not None]
    assert trims and trims == sorted(trims) and trims[0] == sec.cuts[0]  # each write trims below the cut before it
    floor = trims[-1]
    left = sum(len(list(cut.items(s.store._db, b"", None))) for s in sec.served.values())
    assert 0 < left < len(records_of(src))  # those at or below the last trim are gone
    _cuts_read_right(sec, states, floor)
    sec.close()
    src.close()


def test_a_copy_that_stopped_halfway_is_cleared_and_made_again(tmp_path: Path) -> None:
    import asyncio

    from frontend.geo import applier as ga
    from rangetable import protocol
    from rangetable.keys import encode_key

    src = source_store(tmp_path)
    states = history(src, random.Random(11), 40)
    sec = _Secondary(tmp_path, ["pm"])

    async def run() -> None:
        first = ga.TableApplier("t", _Source(src), sec)  # type: ignore[arg-type]
        first.claim = (await sec.claim("t")).claim
        await sec.copy("t", first.claim, [[encode_key("zz", "gone"), protocol.pack([1, {}])]], 0)  # then it died
        second = ga.TableApplier("t", _Source(src), sec)  # type: ignore[arg-type]
        await second.start()
        assert sec.resets == 1
        await _to_the_edge(second, src)

    asyncio.run(run())
    assert sec.read_state(src.last_ts) == states[-1][1]  # the leftover is gone, the copy whole
    sec.close()
    src.close()


def test_a_copy_that_noted_how_far_it_got_is_taken_over_from_there(tmp_path: Path) -> None:
    import asyncio

    from frontend.geo import applier as ga

    src = source_store(tmp_path)
    states = history(src, random.Random(12), 60)
    sec = _Secondary(tmp_path, ["pm"])

    class Dying(_Source):
        pages = 0

        async def scan(self, table: str, token):  # type: ignore[no-untyped-def]
            self.pages += 1
            if self.pages == 3:  # the first applier dies during its copy's third page
                raise TableError("ServerBusy", "gone")
            return await super().scan(table, token)

    async def run() -> None:
        first = ga.TableApplier("t", Dying(src), sec)  # type: ignore[arg-type]
        with pytest.raises(TableError):
            await first.start()
        assert sec.progress is not None and sec.progress["copied"] == 2 * SCAN_PAGE
        states.extend(history(src, random.Random(13), 20))  # the source goes on meanwhile
        second = ga.TableApplier("t", _Source(src), sec)  # type: ignore[arg-type]
        await second.start()
        assert sec.resets == 0 and second.copied > 2 * SCAN_PAGE  # went on from the third page
        await _to_the_edge(second, src, top=7)

    asyncio.run(run())
    assert sec.read_state(src.last_ts) == states[-1][1]
    _cuts_read_right(sec, states)
    sec.close()
    src.close()


def test_a_rejoining_old_primary_copies_only_what_differs_and_drops_its_own_changes_after_the_cut(
        tmp_path: Path) -> None:
    """A forced failover promoted the source at cut T; the old primary holds the source's state at T and its own
    writes since (its loss ledger). Rejoining, it reads those keys at the source, seals itself at T (its own feed
    records after T go) and replays the source's feed from T: every cut it publishes reads as the source stood,
    and it ends equal to the source, without a copy of the rest."""
    import asyncio

    from frontend.geo import applier as ga
    from rangetable import feed_cursor

    src = source_store(tmp_path)
    states = history(src, random.Random(21), 80)
    t = src.last_ts
    old = _Secondary(tmp_path, ["pm"])
    for s in old.served.values():
        s.store.set_feed(True)
    asyncio.run(old.write("t", 1, records_of(src), [t, b"\xff"], None))  # it held the source's state at T …
    for i in range(12):  # … and acknowledged writes of its own after it (its ledger)
        for s in old.served.values():
            key = f"p{'abcdefghijkl'[i]}".encode() + b"\x00x"
            if s.lo <= key and (s.hi is None or key < s.hi):
                s.store.write({"op": "insert_or_replace", "pk": "p" + "abcdefghijkl"[i], "rk": "x", "props": {}})
    assert any(s.store.read_changes((t, None), s.lo, s.hi, 100).records for s in old.served.values())
    states.extend(history(src, random.Random(22), 40))  # the promoted source goes on
    old.progress = {"start": feed_cursor.encode((t, None)), "next": None, "copied": 0, "rejoin": t}

    async def run() -> None:
        applier = ga.TableApplier("t", _Source(src), old)  # type: ignore[arg-type]
        await applier.start()
        assert old.progress is not None and type(old.progress.get("sealed")) is int
        assert applier.copied == 12  # the ledger's keys only
        await _to_the_edge(applier, src, top=5)

    asyncio.run(run())
    assert old.resets == 0 and old.read_state(src.last_ts) == states[-1][1]
    _cuts_read_right(old, [(ts, st) for ts, st in states if ts >= (old.progress or {}).get("sealed", 0)])
    feed = [r for s in old.served.values() for r in s.store.read_changes((t, None), s.lo, s.hi, 100_000).records]
    assert sorted(r[:3] for r in feed) == sorted(r[:3] for r in records_of(src) if r[0] > t)  # none of its own
    old.close()
    src.close()
