"""Table TTL: the pure rules (``rangetable.table_settings``) and a range store on a real RocksDB that
hides expired entities from every read and reclaims them through its expiry index
(``partition_server.store.expiry``), on the plain and the fast path alike."""

from __future__ import annotations

import pytest

from partition_server.store.expiry import INDEX_PREFIX, MARK_KEY, index_stats
from partition_server.store.range_store import RangeStore
from rangetable.errors import TableError
from rangetable.keys import encode_key
from rangetable.table_settings import (
    check_settings,
    describe,
    expired,
    format_ttl,
    oldest_live,
    parse_ttl,
    ttl_ticks,
)
from tests.unit.range_store_helpers import P, ins

S = 10_000_000  # ticks per second


class Clock:
    """A settable store clock (ticks)."""

    def __init__(self, t: int = 640_000_000_000_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += int(seconds * S)


@pytest.fixture(name="clocked")
def clocked_fixture(tmp_path):
    clock = Clock()
    s = RangeStore.open(tmp_path / "r", clock=clock)
    yield s, clock
    s.close()


# --- the pure rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45),
                                          ("45", 45), (" 2D ", 172800), ("none", 0), ("off", 0), (0, 0),
                                          (None, 0), (3600, 3600)])
def test_parse_ttl(text, seconds):
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize("bad", ["30x", "-1d", "1.5h", "d", True, 10**12])
def test_parse_ttl_refuses(bad):
    with pytest.raises(TableError) as ei:
        parse_ttl(bad)
    assert ei.value.error_code == "InvalidInput"


def test_format_ttl_round_trips():
    for s in (0, 45, 60, 5400, 3600, 86400 * 30, 86401):
        assert parse_ttl(format_ttl(s)) == s
    assert format_ttl(86400) == "1d" and format_ttl(90) == "90s" and format_ttl(0) == "none"


def test_expired_and_oldest_live_agree():
    ttl = ttl_ticks(10)
    now = 1_000 * S
    for ts in (now - ttl - 1, now - ttl, now - ttl + 1, now):
        assert expired(ts, ttl, now) == (ts < oldest_live(ttl, now))
    assert not expired(0, 0, now) and oldest_live(0, now) == 0


def test_check_settings():
    assert check_settings({"ttl_s": "1h"}) == {"ttl_s": 3600}
    assert check_settings({"writes": 500}, {"ttl_s": 3600}) == {"ttl_s": 3600, "writes": 500}
    assert check_settings({"ttl_s": "none"}, {"ttl_s": 3600, "writes": 5}) == {"writes": 5}
    assert describe({"ttl_s": 86400, "reads": 7}) == {"ttl": "1d", "reads": 7, "writes": 0, "feed": "on",
                                                     "feed_retention": "1d", "feed_before_images": False}
    assert check_settings({"feed_off": "off", "feed_retention_s": "7d", "feed_before": True}) == {
        "feed_retention_s": 7 * 86400, "feed_before": 1}
    assert describe(check_settings({"feed_off": 1, "feed_retention_s": 90})) == {
        "ttl": "none", "reads": 0, "writes": 0, "feed": "off", "feed_retention": "90s", "feed_before_images": False}
    for bad in ({"feed_retention_s": "5s"}, {"feed_off": "maybe"}, {"feed_before": 2}):
        with pytest.raises(TableError):
            check_settings(bad)
    for bad in ({"colour": 1}, {"reads": -1}, {"writes": 1.5}, {"reads": True}, [1]):
        with pytest.raises(TableError):
            check_settings(bad)


# --- a range store with a TTL ---------------------------------------------------------------------------


def test_expired_entities_are_invisible_to_every_read(clocked):
    s, clock = clocked
    s.set_ttl(ttl_ticks(60))
    s.write(ins("p", "old", v=1))
    clock.advance(30)
    s.write(ins("p", "new", v=2))
    clock.advance(31)  # "old" is 61 s old, "new" 31 s
    assert s.get("p", "old") is None and s.get_raw(encode_key("p", "old")) is None
    assert s.get("p", "new") is not None
    rows, _ = s.scan(b"", None)
    assert [e.rk for e in rows] == ["new"]
    wire, _ = s.scan(b"", None, wire=True, needs_ts=False, needs_props=False)  # the spliced page too
    assert len(wire) == 1
    points = [encode_key("p", "new"), encode_key("p", "old")]  # point spans, read with one multi-get
    assert [e.rk for e in s.scan(b"", None, points=points)[0]] == ["new"]
    assert len(s.scan(b"", None, wire=True, needs_ts=False, needs_props=False, points=points)[0]) == 1
    # writes see the expired entity as absent: insert succeeds, merge/replace/delete find nothing
    for op in ({"op": "merge", "pk": "p", "rk": "old", "props": P(v=3)},
               {"op": "replace", "pk": "p", "rk": "old", "props": P(v=3)},
               {"op": "delete", "pk": "p", "rk": "old"}):
        with pytest.raises(TableError) as ei:
            s.write(op)
        assert ei.value.error_code == "ResourceNotFound"
    merged = s.write({"op": "insert_or_merge", "pk": "p", "rk": "old", "props": P(w=4)})
    assert merged.props == P(w=4)  # the expired props are not merged in


def test_batches_see_expired_rows_as_absent(clocked):
    s, clock = clocked
    s.set_ttl(ttl_ticks(10))
    s.batch([ins("p", f"r{i}", v=i) for i in range(5)])
    clock.advance(11)
    # an insert of rows that exist but expired succeeds, fast path (one schema) and plain (mixed kinds)
    s.batch([ins("p", f"r{i}", v=10 + i) for i in range(3)])
    out = s.batch([ins("p", "r3", v=1), {"op": "insert_or_merge", "pk": "p", "rk": "r4", "props": P(x="a")}])
    assert out[1].props == P(x="a")
    assert sorted(e.rk for e in s.scan(b"", None)[0]) == ["r0", "r1", "r2", "r3", "r4"]


def test_changing_or_removing_the_ttl_takes_effect_at_once(clocked):
    s, clock = clocked
    s.write(ins("p", "a", v=1))
    clock.advance(100)
    s.set_ttl(ttl_ticks(50))
    assert s.get("p", "a") is None
    s.set_ttl(ttl_ticks(200))
    assert s.get("p", "a") is not None
    s.set_ttl(0)
    assert s.get("p", "a") is not None and s._db.get(MARK_KEY) is None
    assert index_stats(s._db) == 0


def test_reclaim_deletes_only_what_expired(clocked):
    s, clock = clocked
    s.set_ttl(ttl_ticks(10))
    s.batch([ins("p", f"r{i:03d}", v=i) for i in range(100)])
    s.write(ins("q", "a", v=1))
    assert index_stats(s._db) == 2  # one entry per write, not per entity
    clock.advance(5)
    s.write({"op": "insert_or_replace", "pk": "p", "rk": "r000", "props": P(v=-1)})  # rewritten: lives longer
    assert s.expire_step() == (0, 0)  # nothing old enough yet
    clock.advance(6)
    deleted, nbytes = s.expire_step()
    assert deleted == 100 and nbytes > 0  # 99 of the batch + q/a; r000 was rewritten
    assert s._db.get(encode_key("p", "r001")) is None and s._db.get(encode_key("p", "r000")) is not None
    assert index_stats(s._db) == 1  # r000's newer entry remains
    clock.advance(10)
    assert s.expire_step()[0] == 1 and index_stats(s._db) == 0


def test_a_ttl_set_later_backfills_the_index(clocked):
    s, clock = clocked
    for i in range(250):
        s.write(ins("p", f"r{i:03d}", v=i))
        clock.advance(0.01)
    s.set_ttl(ttl_ticks(3600))
    assert s._db.get(MARK_KEY) is not None
    s.expire_step(max_keys=20)  # the backfill runs in bounded steps (100 keys each here)
    while s.expiry.cursor is not None:
        s.expire_step(max_keys=20)
    assert index_stats(s._db) == 3  # 250 entities in entries of 100
    clock.advance(3601)
    assert s.expire_step()[0] == 250


def test_the_index_survives_reopen(tmp_path):
    clock = Clock()
    s = RangeStore.open(tmp_path / "r", clock=clock)
    s.set_ttl(ttl_ticks(10))
    s.write(ins("p", "a", v=1))
    s.close()
    s = RangeStore.open(tmp_path / "r", clock=clock)
    try:
        assert s.expiry.indexing and s.expiry.cursor is None
        s.set_ttl(ttl_ticks(10))
        clock.advance(11)
        assert s.expire_step()[0] == 1
        assert not any(True for _ in s._db.keys(from_key=INDEX_PREFIX) if _.startswith(INDEX_PREFIX))
    finally:
        s.close()


def test_a_merge_while_one_half_still_backfills_indexes_the_union(tmp_path):
    clock = Clock()
    left, right = RangeStore.open(tmp_path / "l", clock=clock), RangeStore.open(tmp_path / "r", clock=clock)
    for i in range(150):
        left.write(ins("a", f"r{i:03d}", v=i))
        right.write(ins("b", f"r{i:03d}", v=i))
    left.set_ttl(ttl_ticks(60))  # left's backfill has not started when the merge comes
    right.set_ttl(ttl_ticks(60))
    while right.expiry.cursor is not None:
        right.expire_step()
    assert right.expiry.cursor is None and left.expiry.cursor == b""
    left.close()
    right.close()
    RangeStore.merge(tmp_path / "l", tmp_path / "r", tmp_path / "m")
    merged = RangeStore.open(tmp_path / "m", clock=clock)
    try:
        merged.set_ttl(ttl_ticks(60))
        assert merged.expiry.indexing and merged.expiry.cursor == b""  # backfills the union again
        clock.advance(61)
        reclaimed = 0
        for _ in range(20):
            reclaimed += merged.expire_step()[0]
        assert reclaimed == 300  # both halves: before the fix only the right half (150) was ever reclaimed
    finally:
        merged.close()
