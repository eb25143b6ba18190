"""The frontend's walk over a table's ranges for one page of its change feed (frontend.changes): a page holds at
most ``limit`` records in position order, and its cursor resumes exactly after what it holds. No processes."""

from __future__ import annotations

from frontend.changes import ChangesWalk
from rangetable.keys import encode_key


def _rec(ts: int, pk: str) -> list:
    return [ts, encode_key(pk, "r"), "insert", None, None]


def _walk(limit: int, left: list, right: list, frontiers: tuple[int, int], more: tuple[bool, bool]) -> dict:
    walk = ChangesWalk(None, limit)
    walk.advance({"records": left, "frontier": frontiers[0], "more": more[0]}, encode_key("m", ""))
    walk.advance({"records": right, "frontier": frontiers[1], "more": more[1]}, None)
    return walk.page()


def test_a_page_is_the_records_below_the_lowest_frontier_in_position_order() -> None:
    page = _walk(5, [_rec(10, "a"), _rec(30, "b")], [_rec(20, "x")], (30, 25), (False, False))
    assert [r[0] for r in page["records"]] == [10, 20]  # 30 is above the right range's frontier
    assert page["cursor"] == [25, None] and page["resolved"] == 25


def test_a_page_keeps_at_most_limit_records_and_ends_at_the_last_one() -> None:
    page = _walk(2, [_rec(10, "a"), _rec(12, "b")], [_rec(11, "x"), _rec(13, "y")], (12, 13), (True, True))
    assert [(r[0], r[1]) for r in page["records"]] == [(10, encode_key("a", "r")), (11, encode_key("x", "r"))]
    assert page["cursor"] == [11, encode_key("x", "r")] and page["resolved"] is None
    full = _walk(3, [_rec(10, "a")], [_rec(11, "x")], (40, 40), (False, False))
    assert len(full["records"]) == 2 and full["resolved"] == 40  # under the limit: up to the frontier
