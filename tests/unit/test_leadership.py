"""Coordinator leader election (``coordinator/leadership/lock_election.py``), leader discovery.

The tests that start no process; those that do are in tests/integration/test_leadership.py.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from cli.coordinator_client import call
from coordinator.leadership.lock_election import (
    BASE_META,
    Leadership,
    TermRecord,
    encode_record,
    is_deposed,
    meta_dir_for,
    parse_record,
    should_take_over,
    stale_meta_dirs,
    term_path,
)
from coordinator.meta.store import MetaStore
from coordinator.server import Coordinator
from rangetable import curve
from rangetable.config import CoordinatorConfig
from rangetable.errors import TableError
from rangetable.kernel.coordinators import LeaderTracker, leader_hint, not_leader, split_endpoints


def test_record_round_trip_and_torn_files() -> None:
    rec = TermRecord(3, "tcp://a:1", "tcp://a:2", "coordinator.t3", 42, "h", 7)
    raw = encode_record(rec)
    assert len(raw) == 1024 and parse_record(raw) == rec
    assert parse_record(b"") is None
    assert parse_record(b" " * 1024) is None
    assert parse_record(raw[:20]) is None  # torn
    assert parse_record(b'{"term": 1}') is None  # missing fields


def test_takeover_and_deposition_rules() -> None:
    assert should_take_over(10.0, 9.5, 0.8, holder_alive=True) is False
    assert should_take_over(10.0, 9.1, 0.8, holder_alive=True) is True  # paused: the beat is stale
    assert should_take_over(10.0, 10.0, 0.8, holder_alive=False) is True  # dead: at once
    assert is_deposed(0, False) and is_deposed(4, True) and not is_deposed(4, False)
    assert meta_dir_for(1) == BASE_META and meta_dir_for(5) == "coordinator.t5"
    names = ["coordinator", "coordinator.t3", "coordinator.t4.tmp", "coordinator.t5", "ranges", "logs", "coordinatorx"]
    assert stale_meta_dirs(names, "coordinator.t5") == ["coordinator", "coordinator.t3", "coordinator.t4.tmp"]


def test_leader_tracker_follows_hints_and_moves_past_silence() -> None:
    assert split_endpoints(" a, b,,a ,c") == ["a", "b", "c"]
    t = LeaderTracker("a,b,c")
    assert t.current == "a" and t.several
    assert t.on_silence() == "b" and t.on_silence() == "c" and t.on_silence() == "a"
    assert t.on_not_leader(not_leader("a", "c")) == "c"
    assert t.on_not_leader(not_leader("c", None)) == "a"  # no hint: the next one
    assert t.on_not_leader(not_leader("a", "d")) == "d" and "d" in t.endpoints  # a leader we were not told of
    assert leader_hint(not_leader("a", "tcp://x:1")) == "tcp://x:1"
    assert leader_hint(not_leader("a", "a")) is None
    assert leader_hint(TableError("ServerBusy", "the leader is x")) is None
    with pytest.raises(ValueError):
        LeaderTracker(" , ")


def test_first_poll_wins_term_one_and_fences_on_the_next_term(tmp_path: Path) -> None:
    le = Leadership(str(tmp_path), "tcp://me:1", "tcp://me:2")
    rec = le.poll()
    assert rec is not None and (rec.term, rec.meta, rec.endpoint) == (1, BASE_META, "tcp://me:1")
    le.beat()
    le.set_meta("coordinator.t9")
    assert le.read_latest() == le.record and le.record.beat == 1 and le.record.meta == "coordinator.t9"
    assert not le.deposed()
    open(term_path(str(tmp_path), 2), "w").close()  # a standby tried term 2
    assert le.deposed()


def test_collect_keeps_the_last_terms(tmp_path: Path) -> None:
    le = Leadership(str(tmp_path), "tcp://me:1", "tcp://me:2")
    for t in range(1, 6):
        Path(term_path(str(tmp_path), t)).write_bytes(encode_record(TermRecord(t, "x", "y", BASE_META)))
    le.collect(keep=2)
    assert sorted(os.listdir(tmp_path / "election")) == ["term-0000000004", "term-0000000005"]


def test_meta_writes_are_fenced_on_both_sides(tmp_path: Path) -> None:
    calls = []

    def guard() -> None:
        calls.append(len(calls))
        if len(calls) == 2:
            raise TableError("NotLeader", "deposed")

    m = MetaStore(str(tmp_path), guard=guard)
    with pytest.raises(TableError):
        m.commit({b"k": 1})  # written, but the check after the write stops the caller from acting on it
    assert calls == [0, 1]
    m.close()


def test_a_deposed_leader_stops_before_answering_anything(tmp_path: Path) -> None:
    cfg = CoordinatorConfig(data_dir=str(tmp_path), bind="tcp://127.0.0.1:0", pub_bind="tcp://127.0.0.1:0",
                            restart_on_deposed=False)
    ring = curve.KeyRing.create(curve.keys_dir(str(tmp_path)))
    co = Coordinator(cfg)
    loop = threading.Thread(target=co.serve, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while not (co.term and co.endpoint and co.controller.is_alive()) and time.monotonic() < deadline:
            time.sleep(0.02)
        curve.remember(co.endpoint, ring.public("coordinator"), ring.pair("admin"))
        st = call(co.endpoint, {"op": "status"}, timeout=5)
        assert (st["term"], st["leader"], st["takeover"]["meta"]) == (1, co.endpoint, BASE_META)
        open(term_path(str(tmp_path), 2), "w").close()  # a standby tried term 2
        loop.join(timeout=5)
        assert not loop.is_alive()  # stepped down: the loop ended at its next turn
        with pytest.raises(TableError) as exc:
            co.cluster.map.commit(({b"x": 1}, []))  # and every write is fenced
        assert exc.value.error_code == "NotLeader"
    finally:
        co.stopping = True
        loop.join(timeout=5)
