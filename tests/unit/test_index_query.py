"""One page of a query through an index (frontend.indexes.query), without processes: the read-your-writes check
against the progress cursor (bounded after its first round by the ranges' last Timestamps), the optimistic path
(a cursor an earlier query read: entries first, then the check riding with the rows, one request per base range;
kept when the check passes, dropped when it fails), and what a page does when the index cannot be shown fresh."""

from __future__ import annotations

from frontend.indexes.progress import Progress
from frontend.indexes.query import IndexQuery, is_index_token, token, token_position
from frontend.routing import MapCache
from rangetable.filter import parse_cached
from rangetable.index_def import IndexDef
from rangetable.index_keys import entry_key, entry_pk, entry_rk
from rangetable.index_plan import choose
from rangetable.keys import encode_key

IDX = IndexDef("t", "ByQ", ("q",), (), "ready")


def _cache() -> MapCache:
    cache = MapCache()
    cache.apply({"version": 1, "tables": ["t", "t$ByQ"], "servers": {"s": "tcp://x"}, "ranges": [
        {"id": "b1", "table": "t", "low": "", "high": "m", "epoch": 1, "primary": "s", "state": "serving"},
        {"id": "b2", "table": "t", "low": "m", "high": None, "epoch": 1, "primary": "s", "state": "serving"},
        {"id": "i1", "table": "t$ByQ", "low": "", "high": None, "epoch": 1, "primary": "s", "state": "serving"}]})
    return cache


def _query(**req: object) -> IndexQuery:
    through = choose(parse_cached("q eq 3"), [IDX])
    assert through is not None
    return IndexQuery.start(through, "t", {"filter": "q eq 3", **req}, 10)


def _entry(pk: str, rk: str) -> list:
    epk = entry_pk(IDX, {"q": [2, 3]})  # an Int32 3
    assert epk is not None
    return [epk, entry_rk(pk, rk), 1, {}]


def _answer_checks(q: IndexQuery, cache: MapCache, records_in: set[str], last: int = 50) -> None:
    for route, part, body in q.check_parts(cache):
        recs = [[40, encode_key("x", "y"), "insert", None, None]] if route.range["id"] in records_in else []
        assert body["close"] is False and body["upto"] == q.need
        q.take_check(part, {"records": recs, "frontier": 60, "more": False, "floor": 0, "last": last})


def test_the_plain_path_waits_until_no_range_holds_a_record_up_to_its_first_last_timestamp() -> None:
    cache = _cache()
    q = _query()
    assert q.phase == "progress" and not q.wants_entries()
    prog = Progress("feed", [1, None], cursor=[30, None], resolved=30)
    assert q.take_progress(prog.props()) == [30, None] and q.phase == "check"
    _answer_checks(q, cache, {"b2"}, last=45)
    assert q.checked() is False and q.phase == "progress" and q.need == 45  # read the progress row again
    q.take_progress(Progress("feed", [1, None], cursor=[45, None]).props())
    _answer_checks(q, cache, set())
    assert q.checked() is True and q.fresh and q.phase == "entries" and q.wants_entries()
    q.take_entries(q.cursor, [_entry("a", "1"), _entry("n", "2")], None, None, False)
    assert q.phase == "rows" and q.keys == [encode_key("a", "1"), encode_key("n", "2")]


def _answer_rows(q: IndexQuery, cache: MapCache, records_in: set[str], found: set[bytes]) -> list[dict]:
    """Answer every part :meth:`IndexQuery.row_parts` asks (a range's rows, and the check riding with them)."""
    bodies = []
    for route, part, body in q.row_parts(cache, 1000):
        bodies.append(body)
        keys = [body["lo"], *(s[0] for s in body.get("spans", ()))] if body["limit"] else []
        rows = [[*k.split(b"\x00"), 1, {}] for k in keys if k in found]
        feed = None
        if "feed" in body:
            assert body["feed"]["close"] is False and "op" not in body["feed"]
            recs = [[40, encode_key("x", "y"), "insert", None, None]] if route.range["id"] in records_in else []
            feed = {"records": recs, "frontier": 60, "more": False, "floor": 0, "last": 50}
        q.take_rows(part, [[r[0].decode(), r[1].decode(), 1, {}] for r in rows], None, feed)
    return bodies


def test_the_optimistic_path_reads_entries_first_and_checks_with_the_rows() -> None:
    cache = _cache()
    q = _query()
    q.try_known([30, None])
    assert q.phase == "entries" and q.optimistic and q.wants_entries()
    q.entries_flying = True
    q.take_entries(q.cursor, [_entry("a", "1")], None, None, False)
    assert q.entries_ready and q.phase == "rows" and q.checking and q.keys == [encode_key("a", "1")]
    bodies = _answer_rows(q, cache, set(), {encode_key("a", "1")})
    assert [b["range"] for b in bodies] == ["b1", "b2"]  # one request per base range: rows and check together
    assert bodies[0]["limit"] == 1 and bodies[1]["limit"] == 0 and all("feed" in b for b in bodies)
    assert q.checked() is True and q.fresh and not q.checking and q.phase == "done"
    assert q.page()["entities"] == [["a", "1", 1, {}]]


def test_a_failed_optimistic_check_drops_what_was_read_and_takes_the_plain_path() -> None:
    cache = _cache()
    q = _query()
    q.try_known([30, None])
    cur = q.cursor
    q.take_entries(cur, [_entry("a", "1"), _entry("n", "2")], None, None, False)
    _answer_rows(q, cache, {"b1"}, {encode_key("a", "1")})
    assert q.checked() is False and not q.optimistic and q.phase == "progress" and q.cursor is not cur
    assert q.keys == [] and q.rows == {} and not q.asked and q.need == 50
    q.take_entries(cur, [_entry("a", "1")], None, None, False)  # a late answer of the dropped cursor
    assert q.cursor.results == [] and not q.entries_ready


def test_a_lost_part_of_the_optimistic_path_asks_its_rows_and_check_again() -> None:
    cache = _cache()
    q = _query()
    q.try_known([30, None])
    q.take_entries(q.cursor, [_entry("a", "1"), _entry("n", "2")], None, None, False)
    parts = q.row_parts(cache, 1000)
    assert len(parts) == 2
    (_, lost, _), (_, kept, _) = parts
    q.lost(("ixq", "rows", lost))
    q.take_rows(kept, [["n", "2", 1, {}]], None, {"records": [], "frontier": 60, "more": False, "floor": 0})
    assert q.checked() is None  # b1's part of the check is a gap again
    again = q.row_parts(cache, 1000)
    assert [b["range"] for _, _, b in again] == ["b1"] and again[0][2]["lo"] == encode_key("a", "1")
    q.take_rows(again[0][1], [["a", "1", 1, {}]], None, {"records": [], "frontier": 60, "more": False, "floor": 0})
    assert q.checked() is True and q.phase == "done" and len(q.page()["entities"]) == 2


def test_staleness_skips_the_check_and_a_continued_page_goes_on_through_the_index_when_it_must() -> None:
    q = _query(staleness=60.0)
    q.try_known([30, None])  # never optimistic with staleness: the progress row's age decides
    assert q.phase == "progress"
    q.take_progress(Progress("feed", [1, None], cursor=[30, None], resolved=30).props())
    assert q.fresh and q.phase == "entries"
    first = _query()
    first.take_progress(None)
    assert first.fallback == "the index has no progress row" and first.first_page  # the Handler scans the table
    tok = token("ByQ", entry_key(*_entry("a", "1")[:2]))
    assert is_index_token(tok) and token_position(tok, "byq") == entry_key(*_entry("a", "1")[:2])
    later = _query(next=tok)
    later.take_progress(Progress("build", [1, None]).props())
    assert later.fallback == "the index is being built" and not later.first_page and later.phase == "entries"


def test_writes_to_a_table_whose_index_is_behind_wait_naming_the_index_and_reads_do_not() -> None:
    """Back-pressure in the frontend: the map marks a ready index over its bound (``behind_s``, decided by the
    coordinator: rangetable/index_def.py:holding_writes); a write to its table is run again later, until the
    deadline ends it in ServerBusy with this reason; a read goes on."""
    from frontend.native.driver import DriverCore
    from frontend.native.handler import Handler, Pending

    core = DriverCore.__new__(DriverCore)
    core.handler = Handler(core)  # type: ignore[arg-type]
    core.cache = _cache()
    core.cache._set_indexes({"t": [IndexDef("t", "ByQ", ("q",), (), "ready", behind_s=12.5).to_wire()]})
    waits: list[str] = []
    sent: list[dict] = []
    core.retry_later = lambda p, why: waits.append(why)  # type: ignore[method-assign]
    core.send_ps = lambda p, endpoint, body, step: sent.append(body)  # type: ignore[method-assign]
    write = Pending(b"c", b"1", {"op": "write", "table": "t", "write": {"op": "insert", "pk": "a", "rk": "1"}}, 1e18)
    core.handler.run(write)
    assert waits == ["index ByQ of table t is 12.5 s behind its table (bound 10 s): writes wait until it catches up"]
    assert sent == []
    core.handler.run(Pending(b"c", b"2", {"op": "get", "table": "t", "pk": "a", "rk": "1"}, 1e18))
    assert [b["op"] for b in sent] == ["get"]
    core.cache._set_indexes({"t": [IndexDef("t", "ByQ", ("q",), (), "ready").to_wire()]})  # caught up: the map says so
    core.handler.run(write)
    assert [b["op"] for b in sent] == ["get", "write"] and len(waits) == 1
