"""Coordinator leader election (``coordinator/leadership.py``), leader discovery
(``rangetable/coordinators.py``) and the new leader's meta store (``coordinator/meta_store.py``).

fcntl locks belong to a process, so every contender other than the test itself is a real child
process; nothing is mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cli.coordinator_client import call
from coordinator.leadership import (
    BASE_META,
    Leadership,
    TermRecord,
    encode_record,
    is_deposed,
    lock_free,
    meta_dir_for,
    parse_record,
    should_take_over,
    stale_meta_dirs,
    term_path,
)
from coordinator.meta_store import MetaStore, open_for_term
from coordinator.server import Coordinator
from rangetable import curve
from rangetable.config import CoordinatorConfig
from rangetable.coordinators import LeaderTracker, leader_hint, not_leader, split_endpoints
from rangetable.errors import TableError

ROOT = Path(__file__).resolve().parents[2]

# A contender in its own process: wins a term, beats, and says when it is deposed.
CONTENDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from coordinator.leadership import Leadership
    le = Leadership({data!r}, "tcp://child:1", "tcp://child:2", timeout_s=0.8)
    while le.poll() is None:
        time.sleep(0.02)
    print("won", le.term, flush=True)
    while not le.deposed():
        le.beat()
        time.sleep(0.05)
    print("deposed", flush=True)
    time.sleep(30)
""")


def _contender(data: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", CONTENDER.format(root=str(ROOT), data=str(data))],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    assert line[0] == "won", line
    return p


def _win(le: Leadership, within: float) -> tuple[TermRecord, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        rec = le.poll()
        if rec is not None:
            return rec, time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError(f"no term won within {within} s")


# --- pure policy -------------------------------------------------------------------------------


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


# --- the election, with real processes --------------------------------------------------------


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


def test_standby_waits_while_the_leader_beats(tmp_path: Path) -> None:
    child = _contender(tmp_path)
    try:
        le = Leadership(str(tmp_path), "tcp://me:1", "tcp://me:2", timeout_s=0.8)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.6:
            assert le.poll() is None
            time.sleep(0.05)
        assert le.read_latest().endpoint == "tcp://child:1"
    finally:
        child.kill()
        child.wait()


def test_a_killed_leader_is_replaced_at_once(tmp_path: Path) -> None:
    child = _contender(tmp_path)
    le = Leadership(str(tmp_path), "tcp://me:1", "tcp://me:2", timeout_s=5.0)
    assert le.poll() is None
    child.kill()
    child.wait()
    assert lock_free(term_path(str(tmp_path), 1))
    rec, took = _win(le, 2.0)
    assert rec.term == 2 and rec.meta == BASE_META  # the previous term's store, to reopen or copy
    assert took < 1.0  # not the 5 s beat timeout: the free lock says the holder is gone


def test_a_paused_leader_is_replaced_after_the_timeout_and_steps_down_on_waking(tmp_path: Path) -> None:
    child = _contender(tmp_path)
    try:
        le = Leadership(str(tmp_path), "tcp://me:1", "tcp://me:2", timeout_s=0.8)
        assert le.poll() is None
        os.kill(child.pid, signal.SIGSTOP)
        rec, took = _win(le, 5.0)
        assert rec.term == 2 and 0.6 < took < 2.0
        os.kill(child.pid, signal.SIGCONT)
        assert child.stdout.readline().strip() == "deposed"
        assert le.read_latest().term == 2 and not le.deposed()
    finally:
        child.kill()
        child.wait()


def test_a_won_term_stays_used_after_its_holder_dies(tmp_path: Path) -> None:
    child = _contender(tmp_path)
    child.kill()
    child.wait()
    open(term_path(str(tmp_path), 2), "w").close()  # tried, never won (empty): free to take
    le = Leadership(str(tmp_path), "tcp://me:1", "tcp://me:2")
    rec, _ = _win(le, 2.0)
    assert rec.term == 2
    le2 = Leadership(str(tmp_path), "tcp://b:1", "tcp://b:2")
    # term 1 holds a record, so nobody else can ever win it again
    assert le2._try(1, BASE_META) is None


def test_collect_keeps_the_last_terms(tmp_path: Path) -> None:
    le = Leadership(str(tmp_path), "tcp://me:1", "tcp://me:2")
    for t in range(1, 6):
        Path(term_path(str(tmp_path), t)).write_bytes(encode_record(TermRecord(t, "x", "y", BASE_META)))
    le.collect(keep=2)
    assert sorted(os.listdir(tmp_path / "election")) == ["term-0000000004", "term-0000000005"]


# --- the new leader's meta store ---------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from coordinator.meta_store import MetaStore
    m = MetaStore({data!r})
    m.commit({{b"range/a": {{"n": 1}}, b"range/b": {{"n": 2}}}})
    print("open", flush=True)
    time.sleep(60)
""")


def test_new_leader_copies_a_store_a_paused_leader_still_holds(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=str(ROOT), data=str(tmp_path))],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        os.kill(holder.pid, signal.SIGSTOP)
        meta, how = open_for_term(str(tmp_path), BASE_META, "coordinator.t2", lambda: None)
        assert how["copied"] == 2 and meta.name == "coordinator.t2"
        assert dict(meta.items(b"range/")) == {b"range/a": {"n": 1}, b"range/b": {"n": 2}}
        assert not (tmp_path / "coordinator.t2.tmp").exists()
        meta.close()
    finally:
        holder.kill()
        holder.wait()
    # the writer is gone: the next leader reopens its store instead of copying it
    meta, how = open_for_term(str(tmp_path), "coordinator.t2", "coordinator.t3", lambda: None)
    assert how["copied"] is None and meta.name == "coordinator.t2"
    meta.close()


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
            co.commit(({b"x": 1}, []))  # and every write is fenced
        assert exc.value.error_code == "NotLeader"
    finally:
        co.stopping = True
        loop.join(timeout=5)
