"""Tests for cli.workload.verify: the history recorder and the per-key linearizability checker.

Histories that must pass and must fail, and the recorder; the properties (agreement with brute
force, a simulated correct register, scale) are in test_linearizability_properties.py.
"""

from __future__ import annotations

import threading

import pytest

from cli.workload.verify import Op, Recorder, check, check_key, dump_history, load_history
from tests.tools.unit.register_histories import CAS, DEL, INF, INS, UPD, R, W, build

MUST_PASS = {
    "write then read": [W(0, 1, "a"), R(2, 3, "a")],
    "read of initial absent": [R(0, 1, None)],
    "read concurrent with write sees old": [W(0, 10, "a"), R(1, 2, None)],
    "read concurrent with write sees new": [W(0, 10, "a"), R(1, 2, "a")],
    "concurrent writes, read sees b": [W(0, 5, "a"), W(0, 5, "b"), R(6, 7, "b")],
    "concurrent writes, read sees a": [W(0, 5, "a"), W(0, 5, "b"), R(6, 7, "a")],
    "concurrent writes seen a then b": [W(0, 10, "a"), W(0, 10, "b"), R(1, 2, "a"), R(3, 4, "b")],
    "touching intervals are concurrent": [W(0, 1, "a"), R(1, 2, None)],
    "cas success": [W(0, 1, "a"), CAS(2, 3, "a", "b"), R(4, 5, "b")],
    "cas failure on other value": [W(0, 1, "a"), CAS(2, 3, "x", "b", "fail"), R(4, 5, "a")],
    "cas failure on absent": [CAS(0, 1, "x", "b", "fail"), R(2, 3, None)],
    "cas as conditional delete": [W(0, 1, "a"), CAS(2, 3, "a", None), R(4, 5, None)],
    "cas races: one wins": [W(0, 1, "a"), CAS(2, 5, "a", "b"), CAS(2, 5, "a", "c", "fail"), R(6, 7, "b")],
    "insert then failed insert": [INS(0, 1, "a"), INS(2, 3, "b", "fail"), R(4, 5, "a")],
    "concurrent inserts, one wins": [INS(0, 5, "a"), INS(0, 5, "b", "fail"), R(6, 7, "a")],
    "delete then absent": [W(0, 1, "a"), DEL(2, 3), R(4, 5, None)],
    "delete of absent fails (404)": [DEL(0, 1, "fail"), R(2, 3, None)],
    "insert after delete": [INS(0, 1, "a"), DEL(2, 3), INS(4, 5, "b"), R(6, 7, "b")],
    "update present": [W(0, 1, "a"), UPD(2, 3, "b"), R(4, 5, "b")],
    "update absent fails": [UPD(0, 1, "b", "fail"), R(2, 3, None)],
    "unknown write later observed": [W(0, INF, "a"), R(5, 6, "a")],
    "unknown write never observed": [W(0, INF, "a"), R(5, 6, None)],
    "unknown write takes effect late": [W(0, INF, "a"), R(5, 6, None), R(7, 8, "a")],
    "unknown write explains a cas failure": [W(0, 1, "a"), W(2, INF, "b"), CAS(5, 6, "a", "c", "fail")],
    "unknown insert explains insert failure": [INS(0, INF, "a"), INS(5, 6, "b", "fail")],
    "unknown cas observed": [W(0, 1, "a"), CAS(2, INF, "a", "b"), R(5, 6, "b")],
    "unknown delete observed": [W(0, 1, "a"), DEL(2, INF), R(5, 6, None)],
    "failed unconditional write is ignored": [W(0, 1, "a"), W(2, 3, "b", "fail"), R(4, 5, "a")],
    "aborted op is ignored": [W(0, 1, "a"), W(2, 3, "b", "aborted"), R(4, 5, "a")],
    "unknown read is ignored": [W(0, 1, "a"), ("read", 2, None, "zzz", "unknown")],
    "dict values compare by content": [W(0, 1, {"x": 1, "y": [2]}), R(2, 3, {"y": [2], "x": 1})],
}

MUST_FAIL = {
    "stale read after completed write": [W(0, 1, "a"), W(2, 3, "b"), R(4, 5, "a")],
    "lost write": [W(0, 1, "a"), R(2, 3, None)],
    "read of value never written": [W(0, 1, "a"), R(2, 3, "z")],
    "sequential writes read out of order": [W(0, 1, "a"), W(2, 3, "b"), R(4, 5, "b"), R(6, 7, "a")],
    "read from the future": [R(0, 1, "a"), W(2, 3, "a")],
    "reads disagree after writes settle": [W(0, 5, "a"), W(0, 5, "b"), R(6, 7, "a"), R(6, 7, "b")],
    "cas success on stale value": [W(0, 1, "a"), W(2, 3, "x"), W(4, 5, "y"), CAS(6, 7, "x", "b")],
    "cas success on unwritten value": [W(0, 1, "a"), CAS(2, 3, "q", "b")],
    "cas failure though value matched": [W(0, 1, "a"), CAS(2, 3, "a", "b", "fail")],
    "both racing cas succeed": [W(0, 1, "a"), CAS(2, 5, "a", "b"), CAS(2, 5, "a", "c"), R(6, 7, "c")],
    "insert twice both ok": [INS(0, 1, "a"), INS(2, 3, "b")],
    "concurrent inserts both ok": [INS(0, 5, "a"), INS(0, 5, "b")],
    "insert failure on absent": [INS(0, 1, "a", "fail")],
    "unknown write read, then older read": [W(0, 1, "a"), W(2, INF, "b"), R(3, 4, "b"), R(5, 6, "a")],
    "read after delete sees old": [W(0, 1, "a"), DEL(2, 3), R(4, 5, "a")],
    "delete failure though present": [W(0, 1, "a"), DEL(2, 3, "fail")],
    "update of absent succeeds": [UPD(0, 1, "a")],
    "update failure though present": [W(0, 1, "a"), UPD(2, 3, "b", "fail")],
    "failed write observed": [W(0, 1, "b", "fail"), R(2, 3, "b")],
    "unknown cas with impossible precondition observed": [W(0, 1, "a"), CAS(2, INF, "q", "b"), R(5, 6, "b")],
    "read initial when initial was given": [R(0, 1, None)],  # initial {"k": "init"} below
}


@pytest.mark.parametrize("name", sorted(MUST_PASS))
def test_must_pass(name: str) -> None:
    r = check(build(*MUST_PASS[name]))
    assert r.ok, r.explanation
    assert r.status == "ok" and r.key is None


@pytest.mark.parametrize("name", sorted(MUST_FAIL))
def test_must_fail(name: str) -> None:
    r = check(build(*MUST_FAIL[name]), initial={"k": "init"} if "initial" in name else None)
    assert not r.ok and r.status == "violation", name
    assert r.key == "k" and r.bad_keys == ["k"]
    assert "'k'" in r.explanation and r.failing_ops
    assert all(isinstance(op, Op) for op in r.failing_ops)


def test_initial_value() -> None:
    assert check(build(R(0, 1, "x")), initial={"k": "x"}).ok
    assert not check(build(R(0, 1, "x"))).ok


def test_explanation_names_key_and_stuck_op() -> None:
    ops = [
        Op(0, ("t", "p", "r"), "write", "a", None, 0, 1, "ok"),
        Op(1, ("t", "p", "r"), "write", "b", None, 2, 3, "ok"),
    ]
    ops += [
        Op(2, ("t", "p", "r"), "read", "a", None, 4, 5, "ok"),
        Op(3, "other", "write", "z", None, 0, 9, "ok"),
    ]
    r = check(ops)
    assert r.key == ("t", "p", "r") and r.keys_checked == 2
    assert "#2 read -> 'a'" in r.explanation and "#1 write 'b'" in r.explanation
    assert r.failing_ops[0].id == 2 and 1 in {op.id for op in r.failing_ops}
    assert r.to_dict()["status"] == "violation"


def test_many_bad_keys_reported() -> None:
    ops = [Op(i * 2, f"k{i}", "write", "a", None, 0, 1, "ok") for i in range(3)]
    ops += [Op(i * 2 + 1, f"k{i}", "read", None, None, 2, 3, "ok") for i in range(3)]
    r = check(ops)
    assert sorted(r.bad_keys) == ["k0", "k1", "k2"] and "2 more bad keys" in r.explanation


def test_search_budget_gives_timeout_not_pass() -> None:
    # 7 concurrent writes, each read back concurrently, then two reads that contradict each other:
    # refuting it takes exploring many orders of the writes.
    specs = [W(0, 100, f"v{i}") for i in range(7)] + [R(1, 99, f"v{i}") for i in range(7)]
    specs.append(R(101, 102, "v0"))
    specs.append(R(103, 104, "v1"))
    r = check(build(*specs), max_states_per_key=50)
    assert not r.ok and r.status == "timeout" and r.timed_out_keys == ["k"] and r.key == "k"
    kr = check_key("k", build(*specs), max_states=50)
    assert kr.status == "timeout" and "cut short" in kr.explanation
    assert check(build(*specs)).status == "violation"  # with the full budget it is refuted


def test_ops_ending_before_start_rejected() -> None:
    with pytest.raises(ValueError):
        check([Op(0, "k", "write", "a", None, 5, 1, "ok")])
    with pytest.raises(ValueError):
        Op(0, "k", "frobnicate")


# --- recorder ----------------------------------------------------------------------------------


def test_recorder_threads_and_pending_ops(tmp_path) -> None:
    rec = Recorder()

    def worker(t: int) -> None:
        for i in range(200):
            op = rec.invoke(("t", t, i % 5), "write", value=f"{t}-{i}")
            rec.complete(op, "ok")
            op = rec.invoke(("t", t, i % 5), "read")
            rec.complete(op, "ok", value=f"{t}-{i}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    pending = rec.invoke("x", "cas", value="new", expected="old")
    timed_out = rec.invoke("x", "insert", value="v")
    rec.complete(timed_out, "unknown")
    hist = rec.history()
    assert len(hist) == len(rec) == 8 * 400 + 2
    assert sorted(op.id for op in hist) == list(range(len(hist)))
    assert all(op.end is not None and op.end >= op.start for op in hist[:-2])
    assert hist[pending].outcome == "unknown" and hist[pending].end is None
    assert hist[pending].expected == "old" and hist[timed_out].end is None
    with pytest.raises(ValueError):
        rec.complete(timed_out, "ok")
    with pytest.raises(ValueError):
        rec.complete(pending, "maybe")
    assert check(hist).ok
    path = tmp_path / "h.jsonl"
    dump_history(hist, path)
    assert load_history(path) == hist
