"""A drill's FAIL explains itself: violation or timeout, the key and ops, the faults in the window,
and the kept history re-checked offline with ``rangetable verify history``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from cli.main import main
from cli.workload.verify import check, dump_history
from cli.workload.verify.explain import (
    coordinator_events,
    event_lines,
    failure_lines,
    faults_in_window,
    lin_verdict,
    slow_op_lines,
    timeout_sizes,
)
from tests.tools.unit.register_histories import R, W, build

# A stale read: 'b' was acknowledged at t=2.0, yet a read that began at t=3.0 returned 'a'.
STALE = build(W(0.0, 1.0, "a"), W(1.5, 2.0, "b"), R(3.0, 3.5, "a"))
FAULTS = [{"t": 0.2, "until": 0.4, "what": "kill -9 ps-1 (pid 11)"},
          {"t": 1.8, "until": 2.9, "what": "paused ps-2 (pid 12) for 3.0 s"},
          {"t": 9.0, "until": None, "what": "split r000004 at 'p04'"}]


def _verdict(history: list) -> dict:
    return {"lost_writes": 0, "duplicate_applications": 0, **lin_verdict(history, check(history)),
            "history_file": "/tmp/h.jsonl"}


def test_a_violation_names_the_key_the_op_its_neighbours_and_the_faults_in_its_window() -> None:
    text = "\n".join(failure_lines(_verdict(STALE), FAULTS))
    assert "linearizability: VIOLATION on key 'k'" in text
    assert "#2 read -> 'a' ok [3.000000, 3.500000]" in text  # the op no linearization gets past
    assert "#1 write 'b' ok [1.500000, 2.000000]" in text  # the last acknowledged write before it
    assert "paused ps-2" in text and "kill -9 ps-1" in text  # within the window or its margin
    assert "split r000004" not in text  # long after
    assert "rangetable verify history /tmp/h.jsonl" in text


def test_the_coordinator_s_events_are_put_on_the_history_s_clock_and_listed_around_a_violation() -> None:
    wall0 = 1_000_000.0
    events = coordinator_events([
        {"seq": 7, "time": wall0 + 2.5, "kind": "promote", "range": "r000016", "source": "ps-2", "target": "ps-3",
         "reason": "ps-2 restarted", "duration_ms": 500.0},
        {"seq": 8, "time": wall0 + 20.0, "kind": "split", "range": "r000004", "key": "p04"}], wall0)
    assert events[0] == {"t": 2.0, "until": 2.5, "what": "promote range=r000016 source=ps-2 target=ps-3 "
                                                         "reason=ps-2 restarted"}
    assert events[1]["t"] == events[1]["until"] == 20.0
    text = "\n".join(event_lines(events, [3.0, 3.5]))
    assert "the coordinator's events in that window: 1" in text
    assert "t=2.00-2.50 s  promote range=r000016" in text and "split" not in text
    assert event_lines(events, None) == []
    text = "\n".join(failure_lines(_verdict(STALE), FAULTS, events=coordinator_events(
        [{"seq": 1, "time": wall0 + 2.8, "kind": "promote", "range": "r000004"}], wall0)))
    assert "faults injected in the window" in text and "t=2.80 s  promote range=r000004" in text
    assert text.index("promote") < text.index("history kept")  # with the faults, before the history's path


def test_a_timeout_is_reported_as_undecided_with_the_key_and_its_size() -> None:
    history = build(W(0.0, 1.0, "a"), W(0.5, None, "b"), R(2.0, 2.5, "a"))
    verdict = {"linearizable": False, "linearizability": "timeout", "linearizability_key": "k",
               "linearizability_timeouts": timeout_sizes(history, ["k"]), "history_file": None}
    assert failure_lines(verdict) == [
        "linearizability: checker TIMEOUT (undecided, which counts as a failure, not a pass)",
        "  key 'k': 3 ops (1 unknown) not decided in the budget"]


def test_lost_writes_are_listed_and_a_pass_explains_nothing() -> None:
    verdict = {"lost_writes": 1, "lost_detail": ["#7 write 'x' ok [1.0, 1.1] then gone"], "linearizability": "ok"}
    assert failure_lines(verdict) == ["lost acknowledged writes: 1", "  #7 write 'x' ok [1.0, 1.1] then gone"]
    assert failure_lines({"lost_writes": 0, "linearizability": "ok", "history_file": "/x"}) == []


def test_faults_in_window_keeps_overlaps_and_the_margin_before() -> None:
    near = faults_in_window(FAULTS, 3.0, 3.5, margin=1.0)
    assert [f["what"] for f in near] == ["paused ps-2 (pid 12) for 3.0 s"]


def test_verify_history_rechecks_a_kept_file(tmp_path: Path) -> None:
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    dump_history(STALE, bad)
    dump_history(build(W(0.0, 1.0, "a"), R(1.5, 2.0, "a")), good)
    out = CliRunner().invoke(main, ["verify", "history", str(bad)])
    assert out.exit_code == 1, out.output
    assert "3 ops on 1 keys" in out.output and "VIOLATION on key 'k'" in out.output
    out = CliRunner().invoke(main, ["verify", "history", str(good)])
    assert out.exit_code == 0 and out.output.rstrip().endswith("linearizable"), out.output
    (tmp_path / "junk").write_text("not json\n")
    out = CliRunner().invoke(main, ["verify", "history", str(tmp_path / "junk")])
    assert out.exit_code == 1 and "is not a history file" in out.output


def test_slow_operations_are_listed_with_the_faults_that_overlapped_them() -> None:
    slow = [{"t": 20.0, "until": 23.5, "what": "write ('p02', 'k0')", "outcome": "unknown",
             "error": "ServerBusy: gave up after 40 attempts"},
            {"t": 2.0, "until": 12.5, "what": "read ('p01', 'k2')", "outcome": "ok", "error": None}]
    lines = slow_op_lines(slow, FAULTS)
    assert lines[0] == "operations slower than 3 s: 2 (slowest first)"
    assert lines[1] == "  read ('p01', 'k2') took 10.50 s, t=2.00-12.50 s, ok, client retries 0"
    assert [x.rsplit("  ", 1)[-1] for x in lines[2:5]] == [  # the kill 1.6 s before it began counts too
        "kill -9 ps-1 (pid 11)", "paused ps-2 (pid 12) for 3.0 s", "split r000004 at 'p04'"]
    assert lines[5].startswith("  write ('p02', 'k0') took 3.50 s") and "ServerBusy" in lines[5]
    assert lines[6] == "    no injected fault overlapped it"
    assert slow_op_lines([], FAULTS) == []
