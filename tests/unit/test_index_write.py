"""An index write spread over the ranges of the index's table (frontend.indexes.write): each range asked for
its share at once, a share that failed cut again by the map of then, each key answered for once; and the
applier's progress row (frontend.indexes.progress) read back as written. No processes."""

from __future__ import annotations

import pytest

from frontend.indexes.progress import Progress
from frontend.indexes.write import IndexWrite
from frontend.routing import MapCache
from rangetable.edm import STRING
from rangetable.errors import TableError
from rangetable.keys import encode_key
from tests.unit.map_helpers import one_table_map


def _map(lows: list[str], version: int) -> MapCache:
    return one_table_map("t$ix", lows, version)


def _k(pk: str) -> bytes:
    return encode_key(pk, "r")


def test_shares_by_range_a_failed_share_cut_again_and_a_late_answer_ignored() -> None:
    w = IndexWrite.from_request({"table": "t$ix", "claim": 3, "pos": [9, b"k"],
                                 "ops": [[_k("a"), {}], [_k("n"), None], [_k("z"), {"q": [STRING, "x"]}]]})
    parts = w.parts(_map(["", "m"], 1))
    assert [[op[0] for op in b["ops"]] for _, _, b in parts] == [[_k("a")], [_k("n"), _k("z")]]
    assert all(b["claim"] == 3 and b["pos"] == [9, b"k"] and b["op"] == "index_apply" for _, _, b in parts)
    for _, part, body in parts:
        w.sent(part, body)
    assert w.parts(_map(["", "m"], 1)) == []  # all in flight
    (_, a, _), (_, b, _) = parts
    w.answered(a, True)
    w.failed(b)  # its range split meanwhile
    again = w.parts(_map(["", "m", "t"], 2))
    assert [[op[0] for op in body["ops"]] for _, _, body in again] == [[_k("n")], [_k("z")]]
    for _, part, body in again:
        w.sent(part, body)
    w.answered(b, True)  # the late answer of the share given up on: ignored
    assert not w.done
    for _, part, _ in again:
        w.answered(part, False)
    assert w.done and (w.applied, w.skipped) == (1, 2)


def test_a_malformed_write_is_refused() -> None:
    for req in ({"table": "t", "claim": "1", "ops": []}, {"table": "t", "claim": 1, "ops": [["k", {}]]}):
        with pytest.raises(TableError):
            IndexWrite.from_request(req)


def test_progress_row_round_trip() -> None:
    prog = Progress("feed", [5, None], scan=["p", "r"], cursor=[7, b"\x00\xffk"], built=3, applied=4, resolved=7)
    back = Progress.from_props(prog.props())
    assert back == prog and back.saved > 0
