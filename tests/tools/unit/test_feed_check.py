"""The change-feed checker on constructed histories and reader chains: a correct chain passes, and each kind of
failure (lost, duplicated, foreign, order, watermark, behind) is found and explained with its key, its records
and the faults in its window; the reader process's journal resumes from its last complete line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli.workload.feed_readers import resolved_bounds, resume
from cli.workload.verify import Op
from cli.workload.verify.feed import FeedRecord, ReaderLog, Resolved, check_feed, feed_lines, feed_summary
from rangetable import feed_cursor
from rangetable.client.changes import ChangePage
from rangetable.edm import ticks_to_datetime
from rangetable.keys import encode_key

K = ("p", "k")
K2 = ("p", "j")
T0 = 638_000_000_000_000_000  # ticks: some day in 2022


def ops(*specs: tuple) -> list[Op]:
    """Ops from (kind, start, end, value[, outcome[, expected[, key]]]) (end None: unknown)."""
    out = []
    for i, (kind, start, end, value, *rest) in enumerate(specs):
        outcome = rest[0] if rest else ("unknown" if end is None else "ok")
        expected = rest[1] if len(rest) > 1 else None
        key = rest[2] if len(rest) > 2 else K
        out.append(Op(i, key, kind, value, expected, start, end, outcome))
    return out


def rec(kind: str, value: Any, n: int, seen: float | None = None, key: tuple[str, str] = K) -> FeedRecord:
    """The record at Timestamp T0 + n."""
    ts = T0 + n
    return FeedRecord(key, kind, value, ts, feed_cursor.encode((ts, encode_key(*key))), float(n) if seen is None else seen)


def chain(*records: FeedRecord, resolved: tuple[tuple[int, int], ...] = (), name: str = "thread-1") -> ReaderLog:
    """A reader's log; ``resolved``: (records before it, Timestamp offset)."""
    return ReaderLog(name, list(records), [Resolved(at, T0 + n, T0 + n, float(n)) for at, n in resolved])


HISTORY = ops(("write", 0.0, 1.0, "a"), ("write", 2.0, 3.0, "b"), ("delete", 4.0, 5.0, None),
              ("insert", 6.0, 7.0, "c"), ("cas", 8.0, 9.0, "d", "ok", "c"), ("read", 9.5, 9.8, "d"),
              ("write", 1.0, 2.0, "x", "ok", None, K2), ("write", 3.0, None, "y", "unknown", None, K2))
GOOD = [rec("insert", "a", 1), rec("insert", "x", 2, key=K2), rec("replace", "b", 3), rec("delete", None, 5),
        rec("insert", "c", 7), rec("replace", "d", 9)]


def _one(result: Any, kind: str) -> str:
    assert [f.kind for f in result.failures] == [kind], [f.text for f in result.failures]
    assert result.counts[kind] == 1 and sum(result.counts.values()) == 1, result.counts
    return result.failures[0].text


def test_a_correct_chain_passes_with_an_unknown_write_left_out() -> None:
    r = check_feed(HISTORY, [chain(*GOOD, resolved=((2, 2), (6, 20)))], until=T0 + 15)
    assert r.ok, [f.text for f in r.failures]
    assert r.records == 6 and r.readers == 1 and not any(r.counts.values())
    v = {**r.to_dict(), "restarts": 3, "kills": 2}
    assert feed_summary(v) == ("feed: 1 readers (3 restarts, 2 kills), 6 records checked: lost 0, duplicated 0, "
                               "foreign values 0, order violations 0, watermark violations 0")
    assert feed_lines(v) == []


def test_two_readers_are_each_checked_on_their_own_chain() -> None:
    r = check_feed(HISTORY, [chain(*GOOD, name="thread-1"), chain(*GOOD[:2], *GOOD[3:], name="process-1")])
    text = _one(r, "lost")
    assert r.failures[0].reader == "process-1" and "'b'" in text


def test_a_lost_acknowledged_write_names_the_key_the_write_and_the_records_where_it_belongs() -> None:
    r = check_feed(HISTORY, [chain(*[x for x in GOOD if x.value != "b"])])
    text = _one(r, "lost")
    assert text.startswith("key ('p', 'k'): an acknowledged write is not in the feed")
    assert "#1 write 'b' ok [2.000000, 3.000000]" in text
    assert "insert 'a'" in text and "delete ts=" in text  # its neighbours in the feed
    assert r.failures[0].window == (2.0, 5.0)  # from the write to the record that must follow it


def test_an_unanswered_write_a_read_returned_must_be_in_the_feed() -> None:
    h = [*HISTORY, *ops(("read", 4.0, 4.5, "y", "ok", None, K2))]
    text = _one(check_feed(h, [chain(*GOOD)]), "lost")
    assert "whose answer never came but that a read returned" in text and "'y'" in text


def test_duplicates_by_position_and_by_value() -> None:
    again = rec("insert", "a", 1)
    text = _one(check_feed(HISTORY, [chain(GOOD[0], again, *GOOD[1:])]), "duplicated")
    assert "the same change twice" in text
    applied_twice = rec("replace", "b", 4)  # the same write at another Timestamp: applied twice
    r = check_feed(HISTORY, [chain(*GOOD[:3], applied_twice, *GOOD[3:])])
    assert _one(r, "duplicated") and r.failures[0].window == (3.0, 4.0)


def test_foreign_values_failed_writes_extra_deletes_and_unknown_keys() -> None:
    text = _one(check_feed(HISTORY, [chain(*GOOD[:3], rec("replace", "rogue", 4), *GOOD[3:])]), "foreign")
    assert "a record of a value no operation wrote (no operation wrote it)" in text and "'rogue'" in text
    failed = ops(("write", 0.0, 1.0, "a"), ("cas", 2.0, 3.0, "z", "fail", "q"))
    text = _one(check_feed(failed, [chain(rec("insert", "a", 1), rec("replace", "z", 3))]), "foreign")
    assert "written only by operations answered as failed: #1 cas 'q' -> 'z' fail" in text
    extra = [*GOOD[:4], rec("delete", None, 6), *GOOD[4:]]
    r = check_feed(HISTORY, [chain(*extra)])
    assert "foreign" in [f.kind for f in r.failures]
    assert "2 delete/expire records, but only 1 delete operation(s) on it may have applied" in r.failures[0].text
    stranger = rec("insert", "s", 30, key=("q", "zz"))
    text = _one(check_feed(HISTORY, [chain(*GOOD, stranger)]), "foreign")
    assert "no operation touched this key" in text
    assert check_feed(HISTORY, [chain(*GOOD, stranger)], ignore=["q"]).ok  # rows written outside the history


def test_the_feed_order_must_be_one_the_writes_can_take_effect_in() -> None:
    swapped = [rec("insert", "b", 1), GOOD[1], rec("replace", "a", 3), *GOOD[3:]]
    text = _one(check_feed(HISTORY, [chain(*swapped)]), "order")
    assert "the feed's order is not one the writes can have taken effect in" in text
    assert "must take effect by t=1.000 (its write was answered at t=1.000: #0 write 'a'" in text
    assert "which cannot take effect before t=2.000 (its write began at t=2.000: #1 write 'b'" in text


def test_reads_pin_the_order_of_concurrent_writes() -> None:
    # 'a' and 'b' overlap, so either order is fine, until reads say which came first
    h = ops(("write", 0.0, 10.0, "a"), ("write", 0.0, 10.0, "b"), ("read", 6.0, 7.0, "b"), ("read", 8.0, 9.0, "a"))
    assert check_feed(h, [chain(rec("insert", "b", 1), rec("replace", "a", 2))]).ok
    text = _one(check_feed(h, [chain(rec("insert", "a", 1), rec("replace", "b", 2))]), "order")
    assert "a read of its value was answered at t=7.000: #2 read -> 'b'" in text
    assert "a read of the value before it began at t=8.000: #3 read -> 'a'" in text


def test_kinds_and_preconditions_follow_the_record_before() -> None:
    text = _one(check_feed(HISTORY, [chain(rec("replace", "a", 1), *GOOD[1:])]), "order")
    assert "a replace of an entity absent after the record before it" in text
    h = ops(("write", 0.0, 1.0, "a"), ("write", 1.5, 1.8, "b"), ("cas", 2.0, 3.0, "c", "ok", "a"))
    text = _one(check_feed(h, [chain(rec("insert", "a", 1), rec("replace", "b", 2), rec("replace", "c", 3))]),
                "order")
    assert "a cas that expected 'a', after a record that left 'b'" in text
    h = ops(("write", 0.0, 1.0, "a"), ("insert", 2.0, 3.0, "c"))
    text = _one(check_feed(h, [chain(rec("insert", "a", 1), rec("insert", "c", 2))]), "order")
    assert "an insert of an entity the record before it left present" in text


def test_positions_must_increase() -> None:
    r = check_feed(HISTORY, [chain(GOOD[1], GOOD[0], *GOOD[2:])])
    assert _one(r, "order").startswith("key ('p', 'k'): a record at a position not after the one before it")


def test_a_record_at_or_below_a_resolved_time_after_it_and_a_resolved_time_going_back() -> None:
    text = _one(check_feed(HISTORY, [chain(*GOOD, resolved=((2, 3),))]), "watermark")  # 'b' at T0+3 came after
    assert "a record at or below resolved time" in text and "replace 'b'" in text
    r = check_feed(HISTORY, [chain(*GOOD, resolved=((6, 20), (6, 19)))])
    assert "it moved backwards" in _one(r, "watermark")
    assert check_feed(HISTORY, [chain(*GOOD, resolved=((2, 2), (3, 3)))]).ok  # at the edge: fine


def test_a_reader_that_never_got_past_the_last_acknowledged_write_is_behind() -> None:
    text = _one(check_feed(HISTORY, [chain(*GOOD, resolved=((6, 10),))], until=T0 + 11), "behind")
    assert "not past the last acknowledged write" in text
    assert check_feed(HISTORY, [chain(*GOOD, resolved=((6, 11),))], until=T0 + 11).ok


def test_a_fail_line_names_the_key_the_records_and_the_faults_in_its_window() -> None:
    r = check_feed(HISTORY, [chain(*[x for x in GOOD if x.value != "b"])])
    events = [{"t": 4.0, "until": None, "fault": "feed-reader", "what": "kill -9 feed reader process-1 (pid 9)"}]
    v = {**r.to_dict(), "events": events, "journals": ["/d/feed-readers/feed-t-1.jsonl"]}
    faults: list[dict[str, Any]] = [{"t": 2.5, "until": 2.6, "fault": "kill_ps", "what": "kill -9 ps-2 (pid 7)"},
              {"t": 30.0, "until": None, "fault": "split", "what": "split r1 at 'p4'"}]
    lines = feed_lines(v, faults)
    assert lines[0] == "feed FAIL: LOST (reader thread-1) key ('p', 'k'): an acknowledged write is not in the feed"
    text = "\n".join(lines)
    assert "#1 write 'b' ok" in text and "insert 'a'" in text
    assert "faults in the window t=2.00-5.00 s (and 3 s before): 2" in text
    assert "kill -9 ps-2" in text and "kill -9 feed reader process-1" in text and "split r1" not in text
    assert lines[-1] == "feed readers' journals kept in /d/feed-readers/feed-t-1.jsonl"
    assert feed_summary({**v, "restarts": 0, "kills": 1}).endswith("lost 1, duplicated 0, foreign values 0, "
                                                                   "order violations 0, watermark violations 0")


def test_records_travel_as_json_lists() -> None:
    r = rec("replace", "b", 3, seen=1.23456)
    assert FeedRecord.from_list(json.loads(json.dumps(r.to_list()))) == FeedRecord(K, "replace", "b", r.ts, r.cursor,
                                                                                    1.2346)
    log = ReaderLog("x")
    log.add_page([r], None, 1.0)
    log.add_page([], (T0 + 9, T0 + 9), 2.0)
    assert log.last_resolved == T0 + 9 and log.resolved[0].at == 1


def test_the_journal_resumes_from_its_last_complete_line(tmp_path: Path) -> None:
    j = tmp_path / "feed.jsonl"
    assert resume(str(j)) is None
    j.write_bytes(b'{"c": "c1.one"}\n{"c": "c1.two"}\n{"r": [["p", "k"')  # the kill cut the third line short
    assert resume(str(j)) == "c1.two"
    assert j.read_bytes() == b'{"c": "c1.one"}\n{"c": "c1.two"}\n'
    j.write_bytes(b'{"r": [')
    assert resume(str(j)) is None and j.read_bytes() == b""


def test_the_exact_resolved_time_is_the_page_s() -> None:
    t = T0 + 12_345_677  # not a whole microsecond: the page's datetime drops the last digit, its ticks do not
    page = ChangePage([], feed_cursor.encode((t, None)), t)
    assert resolved_bounds(page) == (t, t) and page.resolved == ticks_to_datetime(t)
    assert resolved_bounds(ChangePage([], page.cursor, None)) is None


def test_a_resolved_time_known_within_its_microsecond_goes_back_only_below_its_range() -> None:
    log = chain(*GOOD)
    log.add_page([], (T0 + 20, T0 + 20), 10.0)
    log.add_page([], (T0 + 13, T0 + 20), 11.0)  # maybe 20 still: fine
    assert check_feed(HISTORY, [log]).ok
    log.add_page([], (T0 + 13, T0 + 19), 12.0)
    assert "it moved backwards" in _one(check_feed(HISTORY, [log]), "watermark")
