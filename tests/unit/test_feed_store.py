"""The change feed of one range store (partition_server/store/feed.py): records of every kind of change, in
position order, transactions as one Timestamp, before-images, closes, the floor (off and on again,
retention), splits, merges, TTL expiries and a follower's copy."""

from __future__ import annotations

import msgpack
import pytest
import rocksdict

from partition_server.replication.protocol import Following
from partition_server.store import feed
from partition_server.store.feed import (
    DELETE,
    EXPIRE,
    FEED_PREFIX,
    FRESH_TICKS,
    IDLE_TICKS,
    INSERT,
    MERGE,
    REPLACE,
    count,
    record_kind,
    should_close,
)
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import ReplicaLog, decode_ops, encode_ops
from rangetable.edm import ticks_to_iso
from rangetable.errors import TableError
from rangetable.kernel.storage import column_family, open_range_db
from rangetable.keys import decode_key, encode_key
from tests.unit.range_store_helpers import P, ins, store_fixture  # noqa: F401  (a fixture)


def changes(store: RangeStore, after=None, lo=b"", hi=None, limit=10_000):
    """(pk, rk, kind, props after or None, props before or None, ts) of each record after ``after``."""
    page = store.read_changes(after, lo, hi, limit)
    out = []
    for ts, key, kind, value, before in page.records:
        pk, rk = decode_key(key)
        out.append((pk, rk, kind, value and msgpack.unpackb(value)[1], before and msgpack.unpackb(before)[1], ts))
    return out


def test_a_range_closes_when_a_reader_needs_it_or_it_idled() -> None:
    now = 10**12
    assert should_close(now - FRESH_TICKS - 1, now, None) and not should_close(now - FRESH_TICKS, now, None)
    assert should_close(now - 5, now, now - 4)  # below what the reader saw elsewhere
    assert not should_close(now - 5, now, now - 6)  # a busy range above it: its writes move its frontier
    assert should_close(now - IDLE_TICKS - 1, now, 0) and not should_close(now - IDLE_TICKS, now, 0)


def test_record_kind_names_what_happened() -> None:
    assert record_kind("insert", False, False) == INSERT
    assert record_kind("insert_or_replace", False, False) == INSERT
    assert record_kind("insert_or_merge", False, False) == INSERT
    assert record_kind("insert_or_replace", True, False) == REPLACE
    assert record_kind("replace", True, False) == REPLACE
    assert record_kind("insert_or_merge", True, False) == MERGE
    assert record_kind("merge", True, False) == MERGE
    assert record_kind("delete", True, True) == DELETE


def test_every_kind_in_order_with_its_entity(store: RangeStore) -> None:
    store.set_feed(True)
    store.write(ins("p", "a", v=1))
    store.write({"op": "insert_or_replace", "pk": "p", "rk": "a", "props": P(v=2)})
    store.write({"op": "insert_or_merge", "pk": "p", "rk": "a", "props": P(w=3)})
    store.write({"op": "insert_or_merge", "pk": "p", "rk": "b", "props": P(w=4)})
    store.write({"op": "delete", "pk": "p", "rk": "a"})
    got = changes(store)
    assert [(pk, rk, kind, after) for pk, rk, kind, after, _, _ in got] == [
        ("p", "a", INSERT, P(v=1)), ("p", "a", REPLACE, P(v=2)), ("p", "a", MERGE, P(v=2, w=3)),
        ("p", "b", INSERT, P(w=4)), ("p", "a", DELETE, None)]
    stamps = [ts for *_, ts in got]
    assert stamps == sorted(stamps) and len(set(stamps)) == 5
    assert (store.stats()["feed_records"], store.stats()["feed_bytes"]) == count(store.feed.db) == (5, count(store.feed.db)[1])
    assert all(before is None for *_, before, _ in got)  # no before-images unless asked


def test_a_transaction_is_one_timestamp_and_before_images_on_request(store: RangeStore) -> None:
    store.set_feed(True, before_images=True)
    store.write(ins("p", "a", v=1))
    store.batch([{"op": "replace", "pk": "p", "rk": "a", "props": P(v=2)}, ins("p", "b", v=3),
                 {"op": "insert_or_replace", "pk": "p", "rk": "c", "props": P(v=4)}])
    got = changes(store)
    assert [(rk, kind, after, before) for _, rk, kind, after, before, _ in got] == [
        ("a", INSERT, P(v=1), None), ("a", REPLACE, P(v=2), P(v=1)), ("b", INSERT, P(v=3), None),
        ("c", INSERT, P(v=4), None)]
    assert len({ts for *_, ts in got[1:]}) == 1  # the transaction's records share its Timestamp


def test_upsert_batches_of_the_fast_path_are_recorded(store: RangeStore) -> None:
    store.set_feed(True)
    ops = [{"op": "insert_or_replace", "pk": "p", "rk": f"{i:03}", "props": P(v=i)} for i in range(100)]
    store.batch(ops, answer="timestamp")
    store.batch(ops, answer="timestamp")
    got = changes(store)
    assert [kind for _, _, kind, *_ in got] == [INSERT] * 100 + [REPLACE] * 100


def test_reads_resume_after_a_position_and_never_split_a_timestamp(store: RangeStore) -> None:
    store.set_feed(True)
    for i in range(5):
        store.batch([ins(f"p{i}", "a", v=i), ins(f"p{i}", "b", v=i)])
    page = store.read_changes(None, b"", None, 3)
    assert len(page.records) == 4 and page.more  # the second transaction whole, though the limit is 3
    assert page.frontier == page.records[-1][0]
    rest = store.read_changes((page.frontier, None), b"", None, 100)
    assert len(rest.records) == 6 and not rest.more and rest.frontier == store.last_ts
    ts, key = page.records[0][0], page.records[0][1]
    mid = store.read_changes((ts, key), b"", None, 100)  # resume inside a Timestamp: after that key
    assert [r[1] for r in mid.records[:1]] == [page.records[1][1]]


def test_a_close_moves_the_resolved_timestamp_of_an_idle_range(store: RangeStore) -> None:
    store.set_feed(True)
    store.write(ins("p", "a", v=1))
    last = store.last_ts
    assert store.read_changes(None, b"", None, 10).frontier == last
    page = store.read_changes((last, None), b"", None, 10, close=True, need=last + 1)
    assert page.records == [] and page.frontier == store.last_ts > last
    store.write(ins("p", "b", v=2))
    assert changes(store, (page.frontier, None))[0][1] == "b"  # later writes stay above the close


def test_off_then_on_again_raises_the_floor(store: RangeStore) -> None:
    store.set_feed(True)
    store.write(ins("p", "a", v=1))
    seen = store.last_ts
    store.set_feed(False)
    with pytest.raises(TableError) as e:
        store.read_changes(None, b"", None, 10)
    assert e.value.error_code == "FeedDisabled"
    store.write(ins("p", "b", v=2))  # not in the feed
    store.set_feed(True)
    with pytest.raises(TableError) as e:  # before the next write too
        store.read_changes((seen, None), b"", None, 10)
    assert e.value.error_code == "FeedTrimmed"
    store.write(ins("p", "c", v=3))
    with pytest.raises(TableError):
        store.read_changes((seen, None), b"", None, 10)
    assert [rk for _, rk, *_ in changes(store)] == ["c"]  # from the beginning: what the feed holds


def test_retention_trims_and_a_reader_behind_it_is_told(tmp_path) -> None:
    now = [10_000_000_000]
    store = RangeStore.open(tmp_path / "r", clock=lambda: now[0])
    try:
        store.set_feed(True, retention_s=60)
        store.write(ins("p", "a", v=1))
        first = store.last_ts
        now[0] += 30 * 10_000_000
        store.write(ins("p", "b", v=2))
        assert store.trim_feed() < first  # nothing is older than 60 s yet
        now[0] += 45 * 10_000_000  # "a" is 75 s old, "b" 45 s
        floor = store.trim_feed()
        assert first <= floor < store.last_ts
        assert [rk for _, rk, *_ in changes(store)] == ["b"]
        assert store.stats()["feed_records"] == 1 and store.stats()["feed_bytes"] == count(store.feed.db)[1] > 0
        with pytest.raises(TableError) as e:
            store.read_changes((first - 1, None), b"", None, 10)
        assert e.value.error_code == "FeedTrimmed" and ticks_to_iso(first - 1, full=True) in e.value.message
        store.close()
        store = RangeStore.open(tmp_path / "r", clock=lambda: now[0])  # the floor survives a restart
        store.set_feed(True, retention_s=60)
        with pytest.raises(TableError):
            store.read_changes((first - 1, None), b"", None, 10)
    finally:
        store.close()


def test_split_halves_read_their_own_span_and_a_merge_unites_them(tmp_path, store: RangeStore) -> None:
    store.set_feed(True)
    for pk in ("a", "b", "m", "z"):
        store.write(ins(pk, "r", v=1))
    store.split("m", tmp_path / "L", tmp_path / "R")
    left, right = RangeStore.open(tmp_path / "L"), RangeStore.open(tmp_path / "R")
    try:
        for half in (left, right):
            half.set_feed(True)
        assert [pk for pk, *_ in changes(left, hi=b"m")] == ["a", "b"]
        assert [pk for pk, *_ in changes(right, lo=b"m")] == ["m", "z"]
        left.write(ins("c", "r", v=2))
        right.write(ins("n", "r", v=2))
        assert left.last_ts > store.last_ts and right.last_ts > store.last_ts  # halves continue above the parent
    finally:
        left.close()
        right.close()
    RangeStore.merge(tmp_path / "L", tmp_path / "R", tmp_path / "M")
    merged = RangeStore.open(tmp_path / "M")
    try:
        merged.set_feed(True)
        got = changes(merged)
        # both halves held a copy of the parent's records under the same keys: the merge holds each once
        assert [pk for pk, *_ in got] == ["a", "b", "m", "z", "c", "n"]
        assert merged.stats()["feed_records"] == 6 and merged.stats()["feed_bytes"] == count(merged.feed.db)[1]
        merged.write(ins("d", "r", v=3))
        assert merged.last_ts > max(ts for *_, ts in got)
    finally:
        merged.close()


def test_ttl_expiries_are_records(tmp_path) -> None:
    now = [10_000_000_000]
    store = RangeStore.open(tmp_path / "r", clock=lambda: now[0])
    try:
        store.set_feed(True, before_images=True)
        store.set_ttl(10 * 10_000_000)
        store.write(ins("p", "a", v=1))
        now[0] += 20 * 10_000_000
        for _ in range(10):
            store.expire_step()
        got = changes(store)
        assert [(rk, kind, after, before) for _, rk, kind, after, before, _ in got][-1] == ("a", EXPIRE, None, P(v=1))
        assert got[-1][-1] > got[0][-1]
    finally:
        store.close()


class Ship:
    """A primary's replicator as the store sees it: keeps the batches it would ship to followers."""

    def __init__(self) -> None:
        self.batches: list = []

    def stamp(self, wb) -> None:
        pass

    def shipped(self, ops) -> None:
        self.batches.append(ops)


def test_a_follower_holds_the_same_records(tmp_path) -> None:
    """The records are keys of the replicated batch: a follower that applies it has them, and reads them
    when promoted."""
    primary = RangeStore.open(tmp_path / "p")
    follower = RangeStore.open(tmp_path / "f")
    ship = Ship()
    shipped = ship.batches

    try:
        primary.set_feed(True)
        primary.replicate(ship)
        primary.write(ins("p", "a", v=1))
        primary.batch([ins("p", "b", v=2), ins("p", "c", v=3)])
        f = Following("r", 1, follower, ReplicaLog(0), "a", "ea")
        f.apply(1, [(i + 1, encode_ops(ops)) for i, ops in enumerate(shipped)])
        assert all(decode_ops(encode_ops(ops)) == ops for ops in shipped)
        # the entity's value is sent once although the batch writes it twice (entity and feed record)
        plain = len(msgpack.packb([[k, v] for k, v in shipped[0]], use_bin_type=True))
        assert len(encode_ops(shipped[0])) <= plain - len(next(v for k, v in shipped[0] if k == encode_key("p", "a"))) + 3
        follower.reload_meta()
        follower.set_feed(True)
        assert changes(follower) == changes(primary)
    finally:
        primary.close()
        follower.close()


def test_a_read_over_a_sparse_span_stops_after_looking_at_enough_records(store: RangeStore, monkeypatch) -> None:
    monkeypatch.setattr(feed, "MAX_SCANNED", 3)
    store.set_feed(True)
    for i in range(10):
        store.write(ins("a", f"{i}", v=i))
    store.write(ins("z", "last", v=1))
    after, pages, got = None, 0, []
    while True:
        page = store.read_changes(after, b"z", None, 100)
        pages += 1
        got += page.records
        after = (page.frontier, None)
        if not page.more:
            break
    assert [r[1] for r in got] == [b"z\x00last"] and pages >= 3


def test_knowing_nothing_lies_after_a_position_answers_as_the_read_does(tmp_path) -> None:
    """The fast path of a freshness check (Feed.nothing_after: the newest record's Timestamp, found by one seek
    and then kept by the writes) answers every position as reading the records does: before any record, between
    writes, inside a transaction's Timestamp (there it may not know, and reads), after a close, on a follower that applied batches and then leads."""
    from partition_server.store.feed import read

    primary = RangeStore.open(tmp_path / "p")
    follower = RangeStore.open(tmp_path / "f")
    ship = Ship()
    shipped = ship.batches

    def agree(store: RangeStore) -> None:
        tss = [r[0] for r in store.read_changes(None, b"", None, 10_000).records]
        keys = [r[1] for r in store.read_changes(None, b"", None, 10_000).records]
        positions = [(0, None), (store.last_ts, None), *((t, None) for t in tss), *zip(tss, keys, strict=True),
                     *((t - 1, None) for t in tss)]
        for pos in positions:
            plain = read(store.feed.db, pos, store.feed.floor, store.last_ts, b"", None, 10)
            assert store.read_changes(pos, b"", None, 10) == plain, pos
            if store.feed.nothing_after(pos):  # never says so wrongly (it may not know: a key at the top)
                assert plain.records == [], pos
        assert store.feed.nothing_after((tss[-1], None)) if tss else True  # the common case: known

    try:
        primary.set_feed(True)
        primary.replicate(ship)
        assert primary.feed.nothing_after((0, None)) and primary.feed.top == -1  # no record yet
        primary.write(ins("p", "a", v=1))
        agree(primary)
        primary.batch([ins("p", "b", v=2), ins("p", "c", v=3)])  # two records at one Timestamp
        agree(primary)
        primary.close_timestamp()
        agree(primary)
        f = Following("r", 1, follower, ReplicaLog(0), "a", "ea")
        follower.set_feed(True)
        f.apply(1, [(1, encode_ops(shipped[0]))])
        follower.reload_meta()
        agree(follower)  # the newest record found by a seek
        f.apply(1, [(2, encode_ops(shipped[1]))])  # a follower's batch: the kept Timestamp is forgotten
        assert follower.feed.top is None
        follower.reload_meta()
        agree(follower)
    finally:
        primary.close()
        follower.close()


def _default_family_records(store: RangeStore) -> list[bytes]:
    """Feed keys in the store's default column family (where the entities are): none belong there."""
    return [k for k in store._db.keys(from_key=FEED_PREFIX) if k.startswith(FEED_PREFIX)]


def test_records_live_in_their_own_family_on_a_follower_and_after_a_trim(tmp_path) -> None:
    """The primary's records, a follower's copies of them and a trim's range delete all land in the feed's column
    family (feed.FAMILY): the default family, which holds the entities, never sees a record."""
    now = [10_000_000_000]
    primary = RangeStore.open(tmp_path / "p", clock=lambda: now[0])
    follower = RangeStore.open(tmp_path / "f")
    ship = Ship()
    try:
        primary.set_feed(True, retention_s=60)
        primary.replicate(ship)
        primary.write(ins("p", "a", v=1))
        now[0] += 90 * 10_000_000
        primary.batch([ins("p", "b", v=2), ins("p", "c", v=3)])
        assert primary.trim_feed() > 0
        primary.write(ins("p", "d", v=4))
        f = Following("r", 1, follower, ReplicaLog(0), "a", "ea")
        f.apply(1, [(i + 1, encode_ops(ops)) for i, ops in enumerate(ship.batches)])
        follower.reload_meta()
        follower.set_feed(True, retention_s=60)
        for store in (primary, follower):
            assert _default_family_records(store) == []
            assert [rk for _, rk, *_ in changes(store)] == ["b", "c", "d"]  # "a" trimmed, on both
            assert count(store.feed.db)[0] == 3 == store.stats()["feed_records"]
    finally:
        primary.close()
        follower.close()


def test_a_split_prepared_while_writes_go_on_replays_records_into_each_halfs_family(tmp_path, store: RangeStore) -> None:
    from partition_server.split_job import SplitJob

    store.set_feed(True)
    for pk in ("a", "z"):
        store.write(ins(pk, "r", v=1))
    job = SplitJob(store, "m", str(tmp_path / "L"), str(tmp_path / "R")).start()
    job.done.wait(10)
    store.write(ins("b", "r", v=2))  # recorded by the tee, replayed at the switch-over
    store.write(ins("y", "r", v=2))
    left, right = job.finish()
    try:
        for half in (left, right):
            half.set_feed(True)
            assert _default_family_records(half) == []
        assert [pk for pk, *_ in changes(left, hi=b"m")] == ["a", "b"]
        assert [pk for pk, *_ in changes(right, lo=b"m")] == ["z", "y"]
    finally:
        left.close()
        right.close()


def test_a_store_written_before_the_family_moves_its_records_there_on_open(tmp_path) -> None:
    """A store whose records sit among its entities (as every version before the feed's column family wrote
    them) moves them into the family when it opens, in batches, keeping every record and the feed's state."""
    store = RangeStore.open(tmp_path / "r")
    store.set_feed(True)
    for i in range(300):
        store.write(ins("p", f"{i:04}", pad="x" * 5000))  # ~1.5 MB of records: two batches of the move
    want = changes(store)
    store.feed.db.flush(True)
    old = list(store.feed.db.items())
    store.close()
    db = open_range_db(tmp_path / "r", create=False)
    records, family = column_family(db, feed.FAMILY)
    wb = rocksdict.WriteBatch(raw_mode=True)  # the layout an earlier version left: records in the default family
    for k, v in old:
        wb.put(k, v)
        wb.delete(k, family)
    db.write(wb)
    del records, family
    db.close()
    store = RangeStore.open(tmp_path / "r")
    try:
        store.set_feed(True)
        assert _default_family_records(store) == [] and list(store.feed.db.items()) == old
        assert changes(store) == want and store.stats()["feed_records"] == 300
        assert feed.migrate(store._db, store.feed.db, store.feed.family) == 0  # nothing left to move
    finally:
        store.close()
