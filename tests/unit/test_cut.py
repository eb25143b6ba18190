"""A range of a secondary cluster: the source's feed applied exactly once, and reads at any cut ``T`` that give
exactly the source's state at ``T`` (``partition_server/store/cut.py``, ``RangeStore.apply_source``)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partition_server.store import cut
from partition_server.store.range_store import RangeStore
from rangetable.errors import TableError
from rangetable.keys import encode_key
from tests.unit.range_store_helpers import P
from tests.unit.source_helpers import history, position_of, read_state, records_of, source_store

# --- the merge of entities and undo records, on its own ---------------------------------------------


def _undo(key: bytes, ts: int, before: bytes | None) -> tuple[bytes, bytes]:
    return cut.undo_key(key, ts), cut.ABSENT if before is None else before


def test_undo_keys_sort_by_entity_key_then_timestamp_in_the_entities_order() -> None:
    keys = sorted([encode_key(pk, rk) for pk in ("p", "pa", "p\u00e9") for rk in ("", "a", "ab", "b")])
    undo = sorted(cut.undo_key(k, ts) for k in keys for ts in (5, 300, 2**40))
    assert [cut.parse_undo_key(u)[0] for u in undo] == [k for k in keys for _ in range(3)]
    assert [cut.parse_undo_key(u)[1] for u in undo] == [5, 300, 2**40] * len(keys)
    assert cut.span(b"p", b"pa") == (cut.UNDO_PREFIX + b"p", cut.UNDO_PREFIX + b"pa")
    assert cut.span(b"", None)[1] == cut.UNDO_END


def test_the_version_at_a_cut_is_the_undo_record_of_the_first_change_after_it() -> None:
    a, b, c, d = (encode_key("p", x) for x in "abcd")
    entities = [(a, b"A3"), (c, b"C2")]  # now: a changed at 1 and 3, b inserted at 2 then deleted at 4, c at 2
    undo = sorted([_undo(a, 1, None), _undo(a, 3, b"A1"), _undo(b, 2, None), _undo(b, 4, b"B2"),
                   _undo(c, 2, b"C0"), _undo(d, 1, b"D0")])  # d deleted at 1

    def at(t: int) -> list[tuple[bytes, bytes]]:
        return list(cut.versions_at(iter(entities), iter(undo), t))

    assert at(0) == [(c, b"C0"), (d, b"D0")]
    assert at(1) == [(a, b"A1"), (c, b"C0")]
    assert at(2) == [(a, b"A1"), (b, b"B2"), (c, b"C2")]
    assert at(3) == [(a, b"A3"), (b, b"B2"), (c, b"C2")]
    assert at(4) == at(99) == entities
    assert list(cut.versions_at(iter([]), iter([]), 3)) == []


# --- a secondary range fed from a real source range's feed --------------------------------------------


def test_every_cut_reads_exactly_the_source_state_at_it(tmp_path: Path) -> None:
    src, dst = source_store(tmp_path), source_store(tmp_path, "dst")  # the secondary's feed on, as its table's is
    states = history(src, random.Random(1), 150)
    records = records_of(src)
    assert dst.apply_source(records, 1, position_of(records[-1])) == len(records)
    assert read_state(dst) == read_state(src)
    for ts, state in states:
        assert read_state(dst, at=ts) == state, ts
        for pk in "pq":
            for rk in "abcdefgh":
                e = dst.get_at(pk, rk, ts)
                assert (None if e is None else (e.ts, e.props)) == state.get((pk, rk))
        points = [encode_key("p", rk) for rk in "aceg"]  # an `or` of point keys: one multi-get, then the cut
        found, _ = dst.scan(b"", None, points=points, at=ts)
        assert {(e.pk, e.rk): (e.ts, e.props) for e in found} == {k: v for k, v in state.items()
                                                                   if k[0] == "p" and k[1] in "aceg"}
        wire, _ = dst.scan(b"", None, wire=True, at=ts)  # the wire form splices the version at the cut
        assert [msgpack.unpackb(w)[:3] for w in wire] == [[pk, rk, t] for (pk, rk), (t, _) in sorted(state.items())]
    assert dst.last_ts == src.last_ts  # a promoted secondary stamps above all it applied
    assert [r[:4] for r in dst.read_changes(None, b"", None, 100_000).records] == [r[:4] for r in records]
    src.close()
    dst.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 60), min_size=1, max_size=6))
def test_an_applier_that_resumes_from_older_cursors_and_regroups_applies_each_change_once(
        tmp_path_factory: pytest.TempPathFactory, seed: int, cuts: list[int]) -> None:
    """Records re-sent (a crash before the cursor was saved, a second applier racing the first) are skipped by
    position, one by one, however the batches are cut: the state and every cut read stay the source's."""
    tmp = tmp_path_factory.mktemp("resume")
    src, dst = source_store(tmp), RangeStore.open(tmp / "dst")
    rng = random.Random(seed)
    states = history(src, rng, 60)
    records = records_of(src)
    done = 0
    for c in cuts:  # each batch starts before the last one ended (up to 10 records again), ends at c records
        start = max(0, min(done, c) - rng.randint(0, 10))
        end = min(len(records), max(c, start + 1))
        batch = records[start:end]
        if batch:
            dst.apply_source(batch, 1, position_of(batch[-1]))
            done = max(done, end)
    dst.apply_source(records, 1, position_of(records[-1]))  # the rest, with all of it again
    assert read_state(dst) == read_state(src)
    for ts, state in states:
        assert read_state(dst, at=ts) == state
    src.close()
    dst.close()


def test_a_transaction_is_all_or_nothing_at_every_cut(tmp_path: Path) -> None:
    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    src.write({"op": "insert", "pk": "p", "rk": "a", "props": P(v=0)})
    ts = src.batch([{"op": "insert_or_replace", "pk": "p", "rk": r, "props": P(v=1)} for r in "abc"],
                   answer="timestamp")
    records = records_of(src)
    dst.apply_source(records, 1, position_of(records[-1]))
    before, after = read_state(dst, at=ts - 1), read_state(dst, at=ts)
    assert sorted(before) == [("p", "a")] and before[("p", "a")][1] == P(v=0)
    assert sorted(after) == [("p", "a"), ("p", "b"), ("p", "c")] and {v[0] for v in after.values()} == {ts}
    src.close()
    dst.close()


def test_a_lower_claim_is_fenced_and_a_position_mark_advances_withoutrecords_of(tmp_path: Path) -> None:
    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    src.write({"op": "insert", "pk": "p", "rk": "a", "props": P(v=0)})
    records = records_of(src)
    assert dst.apply_source(records, 2, position_of(records[-1])) == 1
    with pytest.raises(TableError) as exc:
        dst.apply_source(records, 1, position_of(records[-1]))
    assert exc.value.error_code == "SourceFenced"
    resolved = src.close_timestamp()
    assert dst.apply_source([], 2, (resolved, b"\xff")) == 0
    assert dst.source_state() == (2, (resolved, b"\xff")) and dst.last_ts == resolved
    assert dst.apply_source(records, 3, position_of(records[-1])) == 0  # below the position: skipped
    assert dst.source_state() == (3, (resolved, b"\xff"))
    src.close()
    dst.close()


def test_trimmed_undo_records_leave_every_later_cut_right(tmp_path: Path) -> None:
    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    states = history(src, random.Random(7), 80)
    records = records_of(src)
    dst.apply_source(records, 1, position_of(records[-1]))
    mid = states[len(states) // 2][0]
    held = len(list(cut.items(dst._db, b"", None)))
    assert held == len(records)
    gone = dst.trim_undo(mid, limit=5)
    assert gone == 5
    gone += dst.trim_undo(mid)
    assert gone == sum(1 for r in records if r[0] <= mid)
    assert len(list(cut.items(dst._db, b"", None))) == held - gone
    assert len(cut.expired(dst._db, 2**63, 10**6)) == 2 * (held - gone)  # each left has its time key, and only those
    for ts, state in states:
        if ts >= mid:
            assert read_state(dst, at=ts) == state
            assert all(dst.get_at(pk, rk, ts) is not None for pk, rk in state)
        else:  # below the floor: refused, by scans and point reads
            with pytest.raises(TableError) as exc:
                read_state(dst, at=ts)
            assert exc.value.error_code == "ServerBusy"
            with pytest.raises(TableError):
                dst.get_at("p", "a", ts)
    assert dst.trim_undo(mid - 1) == 0 and cut.floor(dst._db) == mid  # the floor never moves back
    src.close()
    dst.close()


def test_split_halves_read_their_own_span_at_a_cut_and_a_merge_keeps_the_lower_position(tmp_path: Path) -> None:
    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    states = history(src, random.Random(3), 100)
    records = records_of(src)
    half = len(records) // 2
    dst.apply_source(records[:half], 1, position_of(records[half - 1]))
    dst.split("q", tmp_path / "l", tmp_path / "r")
    left, right = RangeStore.open(tmp_path / "l"), RangeStore.open(tmp_path / "r")
    for h, lo, hi in ((left, b"", b"q"), (right, b"q", None)):
        mine = [r for r in records[half:] if r[1] >= lo and (hi is None or r[1] < hi)]
        h.apply_source(records[half - 3:half] + mine, 1, position_of(records[-1]))  # a few again
    right.apply_source([], 1, (records[-1][0] + 5, b"\xff"))  # right is further along
    for ts, state in states:  # each half keeps every undo record, and reads only its own span (as the feed's)
        assert read_state(left, ts, b"", b"q") == {k: v for k, v in state.items() if k[0] < "q"}
        assert read_state(right, ts, b"q") == {k: v for k, v in state.items() if k[0] >= "q"}
    left.close()
    right.close()
    RangeStore.merge(tmp_path / "l", tmp_path / "r", tmp_path / "m")
    merged = RangeStore.open(tmp_path / "m")
    assert merged.source_state() == (1, position_of(records[-1]))  # the lower of the two
    for ts, state in states:
        assert read_state(merged, at=ts) == state
    merged.close()
    for h, floor in ((left, states[10][0]), (right, states[5][0])):  # each half trimmed to its own floor
        h = RangeStore.open(h.path)
        h.trim_undo(floor)
        h.close()
    RangeStore.merge(tmp_path / "l", tmp_path / "r", tmp_path / "m2")
    merged = RangeStore.open(tmp_path / "m2")
    assert cut.floor(merged._db) == states[10][0]  # the higher: below it the left half's records are gone
    for ts, state in states[10:]:
        assert read_state(merged, at=ts) == state
    merged.close()
    src.close()
    dst.close()


def test_a_ttl_is_judged_at_the_cut_as_the_source_judged_it_then(tmp_path: Path) -> None:
    """Under a table's TTL an entity is live at a cut within the TTL of its Timestamp, as the source answered
    then, however late the read; expired at a cut past it (before the source's expire record arrives)."""
    now = [10**17]
    src = RangeStore.open(tmp_path / "src", clock=lambda: now[0])
    src.set_feed(True)
    dst = RangeStore.open(tmp_path / "dst", clock=lambda: now[0])
    src.write({"op": "insert", "pk": "p", "rk": "a", "props": P(v=0)})
    records = records_of(src)
    dst.apply_source(records, 1, position_of(records[-1]))
    dst.set_ttl(10_000_000)  # one second
    ts = records[-1][0]
    now[0] += 20_000_000  # read much later
    assert dst.get_at("p", "a", ts) is not None and read_state(dst, at=ts) != {}
    late = ts + 15_000_000  # a cut past the TTL
    assert dst.get_at("p", "a", late) is None and read_state(dst, at=late) == {}
    src.close()
    dst.close()


def test_stored_values_are_the_sources_bytes(tmp_path: Path) -> None:
    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    src.write({"op": "insert", "pk": "p", "rk": "a", "props": P(v=0, s="x")})
    records = records_of(src)
    dst.apply_source(records, 1, position_of(records[-1]))
    key = encode_key("p", "a")
    assert dst.get_raw(key) == src.get_raw(key) and msgpack.unpackb(dst.get_raw(key))[1] == P(v=0, s="x")
    src.close()
    dst.close()


# --- the partition server's requests: source_apply, and get and scan at a cut ---------------------------


def _served(store: RangeStore, low: str = "", high: str | None = None):  # type: ignore[no-untyped-def]
    from partition_server.served import Served
    from rangetable.keys import range_bounds

    lo, hi = range_bounds(low, high)
    return Served({"id": "r1", "low": low, "high": high, "epoch": 1}, store, lo=lo, hi=hi)


def test_source_apply_and_reads_at_a_cut_through_the_servers_requests(tmp_path: Path) -> None:
    from partition_server import data_requests as dr
    from rangetable import protocol

    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    src.write({"op": "insert", "pk": "p", "rk": "a", "props": P(v=1)})
    t1 = src.last_ts
    src.write({"op": "insert_or_replace", "pk": "p", "rk": "a", "props": P(v=2, w=3)})
    records = records_of(src)
    served = _served(dst)
    req = {"op": "source_apply", "range": "r1", "epoch": 1, "records": records, "claim": 1,
           "pos": [records[-1][0], records[-1][1]]}
    assert dr.source_apply(served, req, 1.0) == {"applied": 2}  # type: ignore[arg-type]
    assert dr.source_apply(served, req, 1.0) == {"applied": 0}  # type: ignore[arg-type]  # applied already
    got = dr.get(served, {"op": "get", "range": "r1", "epoch": 1, "pk": "p", "rk": "a", "select": None, "at": t1}, 1.0)
    assert protocol.unpack(protocol.pack(got))[3] == P(v=1)
    got = dr.get(served, {"op": "get", "range": "r1", "epoch": 1, "pk": "p", "rk": "a", "select": ["w"]}, 1.0)
    assert protocol.unpack(protocol.pack(got))[3] == P(w=3)
    with pytest.raises(TableError) as exc:
        dr.get(served, {"op": "get", "range": "r1", "epoch": 1, "pk": "p", "rk": "a", "select": None, "at": t1 - 1},
               1.0)
    assert exc.value.error_code == "ResourceNotFound"  # not there yet at that cut
    page = dr.scan(served, {"op": "scan", "range": "r1", "epoch": 1, "lo": b"", "hi": None, "filter": "v eq 1",
                            "select": None, "limit": 10, "budget_ms": 1000.0, "at": t1}, 1.0)
    assert page.entities == 1
    page = dr.scan(served, {"op": "scan", "range": "r1", "epoch": 1, "lo": b"", "hi": None, "filter": "v eq 1",
                            "select": None, "limit": 10, "budget_ms": 1000.0}, 1.0)
    assert page.entities == 0  # now v is 2
    src.close()
    dst.close()


@pytest.mark.parametrize(("change", "code"), [
    (lambda r: r.__setitem__(2, "upsert"), "InvalidInput"),  # not a kind of the feed
    (lambda r: r.__setitem__(3, None), "InvalidInput"),  # an insert without its value
    (lambda r: r.__setitem__(1, b"zz\x00a"), "NotPrimary"),  # outside the range [a, q)
    (lambda r: r.__setitem__(1, b"\xffmeta"), "NotPrimary"),  # not an entity key
    (lambda r: r.__setitem__(0, "7"), "InvalidInput"),
])
def test_source_apply_refuses_what_is_not_a_record_of_its_range(tmp_path: Path, change, code: str) -> None:  # type: ignore[no-untyped-def]
    from partition_server import data_requests as dr

    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    src.write({"op": "insert", "pk": "p", "rk": "a", "props": P(v=1)})
    records = records_of(src)
    change(records[0])
    with pytest.raises(TableError) as exc:
        dr.source_apply(_served(dst, "a", "q"), {"op": "source_apply", "range": "r1", "epoch": 1,  # type: ignore[arg-type]
                                                 "records": records, "claim": 1, "pos": [2**62, b"\xff"]}, 1.0)
    assert exc.value.error_code == code
    assert dst.source_state() == (0, None)  # nothing written
    src.close()
    dst.close()


def test_source_apply_refuses_records_out_of_order_or_past_the_position(tmp_path: Path) -> None:
    from partition_server import data_requests as dr

    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    src.write({"op": "insert", "pk": "p", "rk": "a", "props": P(v=1)})
    src.write({"op": "insert", "pk": "p", "rk": "b", "props": P(v=1)})
    records = records_of(src)
    for recs, pos in ((records[::-1], [2**62, b"\xff"]), (records, [records[0][0], records[0][1]]),
                      (records, None), ("x", [1, b"a"])):
        with pytest.raises(TableError) as exc:
            bad: Any = {"op": "source_apply", "range": "r1", "epoch": 1, "records": recs, "claim": 1, "pos": pos}
            dr.source_apply(_served(dst), bad, 1.0)
        assert exc.value.error_code == "InvalidInput"
    for trim in (-1, "5", 1.5):
        with pytest.raises(TableError) as exc:
            bad = {"op": "source_apply", "range": "r1", "epoch": 1, "records": records, "claim": 1,
                   "pos": [2**62, b"\xff"], "trim": trim}
            dr.source_apply(_served(dst), bad, 1.0)
        assert exc.value.error_code == "InvalidInput"
    assert dst.source_state() == (0, None)  # nothing applied by a refused request
    with pytest.raises(TableError) as exc:
        dr.get(_served(dst), {"op": "get", "range": "r1", "epoch": 1, "pk": "p", "rk": "a", "select": None,
                              "at": -1}, 1.0)
    assert exc.value.error_code == "InvalidInput"
    src.close()
    dst.close()


def test_a_first_copy_puts_the_sources_bytes_counted_without_undo_records_and_is_fenced(tmp_path: Path) -> None:
    from partition_server import data_requests as dr
    from rangetable import protocol

    dst = RangeStore.open(tmp_path / "dst")
    dst.set_feed(True)
    values = [(encode_key("p", r), protocol.pack([100 + i, {"v": [1, i]}])) for i, r in enumerate("abc")]
    assert dst.copy_source(values, 2, floor=500) == 3
    with pytest.raises(TableError) as exc:  # the copy's history is not in this feed: no silent gap
        dst.read_changes((400, None), b"", None, 10, cut=600)
    assert exc.value.error_code == "FeedTrimmed"
    assert dst.read_changes(None, b"", None, 10, cut=600).records == []  # from the beginning: after the floor
    assert dst.counts().entities == 3 and list(cut.items(dst._db, b"", None)) == []
    got = dst.get("p", "b")
    assert got is not None and got.ts == 101 and dst.source_state() == (2, None)
    assert dst.copy_source([], 2) == 0
    with pytest.raises(TableError) as exc:
        dst.copy_source(values, 1)
    assert exc.value.error_code == "SourceFenced"
    served = _served(dst, "a", "q")
    for bad, floor in (([[b"p\x00a"]], 0), ([[b"p\x00a", b""]], 0), ([["p", b"x"]], 0), ([], -1), ([], "1")):
        req: Any = {"op": "source_copy", "range": "r1", "epoch": 1, "values": bad, "claim": 2, "floor": floor}
        with pytest.raises(TableError) as exc:
            dr.source_copy(served, req, 1.0)
        assert exc.value.error_code == "InvalidInput"
    with pytest.raises(TableError) as exc:  # outside the range
        dr.source_copy(served, {"op": "source_copy", "range": "r1", "epoch": 1,  # type: ignore[arg-type]
                                "values": [[encode_key("z", "a"), values[0][1]]], "claim": 2}, 1.0)
    assert exc.value.error_code == "NotPrimary"
    dst.close()


def test_a_secondary_ranges_feed_is_read_up_to_the_cut_never_closed(tmp_path: Path) -> None:
    src, dst = source_store(tmp_path), RangeStore.open(tmp_path / "dst")
    dst.set_feed(True)
    history(src, random.Random(13), 40)
    records = records_of(src)
    mid = records[len(records) // 2][0]
    dst.apply_source(records, 1, position_of(records[-1]))
    last = dst.last_ts
    page = dst.read_changes(None, b"", None, 1000, close=True, cut=mid)
    assert page.frontier == mid and [r[:3] for r in page.records] == [r[:3] for r in records if r[0] <= mid]
    ahead = records[-1][0] + 10**7  # a cut past the range's own last change (a range the last pages left alone)
    page = dst.read_changes((mid, None), b"", None, 1000, close=True, cut=ahead)
    assert page.frontier == ahead and [r[:3] for r in page.records] == [r[:3] for r in records if r[0] > mid]
    assert dst.last_ts == last  # nothing closed: only the source stamps Timestamps here
    src.close()
    dst.close()


@pytest.mark.parametrize("recording", [False, True])  # True: batches recorded, as a replicated primary's are
def test_a_range_sealed_at_a_cut_holds_the_sources_state_then_and_nothing_after(tmp_path: Path,
                                                                                 recording: bool) -> None:
    """A forced failover promotes a secondary at its cut: each range goes back to it (its undo records), and its
    undo and feed records past it go, only those of its own span (a split's halves share them)."""
    src, dst = source_store(tmp_path), source_store(tmp_path, "dst")
    if recording:
        dst._tee.begin()
    states = history(src, random.Random(11), 120)
    records = records_of(src)
    dst.apply_source(records, 1, position_of(records[-1]))
    mid = states[len(states) // 2][0]
    counts = dst.counts()
    other = dst.read_changes(None, encode_key("q", ""), None, 100_000).records  # another span's records stay
    restored = dst.seal_at(mid, b"", encode_key("q", ""))
    want = {k: v for k, v in dict(states)[mid].items() if k[0] == "p"}
    assert read_state(dst, hi=encode_key("q", "")) == want == read_state(dst, at=mid, hi=encode_key("q", ""))
    assert restored == len({r[1] for r in records if r[0] > mid and r[1] < encode_key("q", "")})
    assert all(cut.parse_undo_key(k)[1] <= mid or k >= cut.UNDO_PREFIX + encode_key("q", "")
               for k, _ in cut.items(dst._db, b"", None))
    mine = dst.read_changes(None, b"", encode_key("q", ""), 100_000).records
    assert [r[:4] for r in mine] == [r[:4] for r in records if r[0] <= mid and r[1] < encode_key("q", "")]
    assert dst.read_changes(None, encode_key("q", ""), None, 100_000).records == other
    assert dst.counts() != counts or restored == 0
    assert dst.counts().entities == len(read_state(dst))  # the counts follow what went back
    assert dst.source_state()[1] == (mid, b"\xff")
    assert dst.last_ts == src.last_ts  # later writes stamp above every Timestamp it ever applied
    if recording:  # what a follower replays: its feed records past the cut go too
        assert any(v is None and k.startswith(b"\xfff/") for ops in dst._tee.take() for k, v in ops)
    src.close()
    dst.close()
