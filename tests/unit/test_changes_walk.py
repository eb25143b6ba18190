"""The frontend's walk over a table's ranges for one page of its change feed (frontend.changes): a page holds at
most ``limit`` records in position order (and the rest of the last one's Timestamp), and its cursor resumes
exactly after what it holds. No processes."""

from __future__ import annotations

from frontend.changes import ChangesWalk
from rangetable.keys import encode_key


def _rec(ts: int, pk: str) -> list:
    return [ts, encode_key(pk, "r"), "insert", None, None]


class _Route:
    def __init__(self, rid: str) -> None:
        self.range = {"id": rid, "epoch": 1}


def _walk(limit: int, left: list, right: list, frontiers: tuple[int, int], more: tuple[bool, bool]) -> dict:
    walk = ChangesWalk(None, limit)
    a, _ = walk.ask(_Route("r1"), b"", b"m")  # type: ignore[arg-type]
    b, _ = walk.ask(_Route("r2"), b"m", None)  # type: ignore[arg-type]
    assert not walk.done and walk.gaps() == []
    walk.take(b, {"records": right, "frontier": frontiers[1], "more": more[1]})  # answers in any order
    walk.take(a, {"records": left, "frontier": frontiers[0], "more": more[0]})
    assert walk.done
    return walk.page()


def test_a_part_that_failed_is_a_gap_again_and_a_late_answer_is_ignored() -> None:
    walk = ChangesWalk(None, 10, b"c", b"x")
    a, body = walk.ask(_Route("r1"), b"c", b"k")  # type: ignore[arg-type]
    assert body["lo"] == b"c" and body["hi"] == b"k" and body["close"] is True
    assert walk.gaps() == [(b"k", b"x")]
    walk.failed(a)
    assert walk.gaps() == [(b"c", b"x")]
    walk.take(a, {"records": [_rec(5, "d")], "frontier": 9, "more": False})  # given up on: not taken
    assert walk.records == [] and not walk.done
    b, _ = walk.ask(_Route("r1"), b"c", b"x")  # type: ignore[arg-type]
    walk.take(b, {"records": [], "frontier": 9, "more": False})
    assert walk.done and walk.page()["resolved"] == 9


def test_a_page_is_the_records_below_the_lowest_frontier_in_position_order() -> None:
    page = _walk(5, [_rec(10, "a"), _rec(30, "b")], [_rec(20, "x")], (30, 25), (False, False))
    assert [r[0] for r in page["records"]] == [10, 20]  # 30 is above the right range's frontier
    assert page["cursor"] == [25, None] and page["resolved"] == 25


def test_a_page_keeps_at_most_limit_records_and_ends_after_the_last_one_s_timestamp() -> None:
    page = _walk(2, [_rec(10, "a"), _rec(12, "b")], [_rec(11, "x"), _rec(13, "y")], (12, 13), (True, True))
    assert [(r[0], r[1]) for r in page["records"]] == [(10, encode_key("a", "r")), (11, encode_key("x", "r"))]
    assert page["cursor"] == [11, None] and page["resolved"] is None
    same = _walk(1, [_rec(11, "a")], [_rec(11, "x"), _rec(12, "y")], (20, 20), (False, False))
    assert [r[0] for r in same["records"]] == [11, 11] and same["cursor"] == [11, None]  # a Timestamp is never split
    full = _walk(3, [_rec(10, "a")], [_rec(11, "x")], (40, 40), (False, False))
    assert len(full["records"]) == 2 and full["resolved"] == 40  # under the limit: up to the frontier
