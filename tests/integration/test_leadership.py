"""Coordinator leader election (``coordinator/leadership/lock_election.py``), leader discovery
(``rangetable/kernel/coordinators.py``) and the new leader's meta store (``coordinator/meta/store.py``).

fcntl locks belong to a process, so every contender other than the test itself is a real child
process; nothing is mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from coordinator.leadership.lock_election import (
    BASE_META,
    Leadership,
    TermRecord,
    lock_free,
    term_path,
)
from coordinator.meta.store import open_for_term

ROOT = Path(__file__).resolve().parents[2]

# A contender in its own process: wins a term, beats, and says when it is deposed.
CONTENDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from coordinator.leadership.lock_election import Leadership
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


# --- the election, with real processes --------------------------------------------------------


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


# --- the new leader's meta store ---------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from coordinator.meta.store import MetaStore
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
