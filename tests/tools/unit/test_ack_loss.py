"""Tests for cli.workload.verify.ack_loss: acknowledged-write loss and exactly-once counters."""

from __future__ import annotations

import json
import random
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from cli.workload.verify import Op, check_ack_loss, check_counters, combine
from tests.tools.unit.register_histories import CAS, DEL, INF, INS, UPD, R, W, build, simulate

# name -> (op specs on key "k", final value of "k" (None: absent), lost kind or None if it must pass)
CASES: dict[str, tuple[list[tuple], Any, str | None]] = {
    "last acked write present": ([W(0, 1, "a"), W(2, 3, "b")], "b", None),
    "single write present": ([W(0, 1, "a"), R(2, 3, "a")], "a", None),
    "concurrent writes: first": ([W(0, 5, "a"), W(1, 6, "b")], "a", None),
    "concurrent writes: second": ([W(0, 5, "a"), W(1, 6, "b")], "b", None),
    "overwritten by unknown write": ([W(0, 1, "a"), W(2, INF, "b")], "b", None),
    "unknown write never applied": ([W(0, 1, "a"), W(2, INF, "b")], "a", None),
    "unknown write applies after a later ack": ([W(0, INF, "a"), W(2, 3, "b")], "a", None),
    "delete then absent": ([W(0, 1, "a"), DEL(2, 3)], None, None),
    "unknown delete applied": ([W(0, 1, "a"), DEL(2, INF)], None, None),
    "unknown delete not applied": ([W(0, 1, "a"), DEL(2, INF)], "a", None),
    "cas chain": ([INS(0, 1, "a"), CAS(2, 3, "a", "b"), UPD(4, 5, "c")], "c", None),
    "failed cas does not count": ([W(0, 1, "a"), CAS(2, 3, "a", "b", "fail")], "a", None),
    "failed insert does not count": ([INS(0, 1, "a"), INS(2, 3, "b", "fail")], "a", None),
    "aborted write does not count": ([W(0, 1, "a"), W(2, 3, "b", "aborted")], "a", None),
    "only reads": ([R(0, 1, None)], None, None),
    "only unknown writes, none applied": ([W(0, INF, "a")], None, None),
    "dict values compare by content": ([W(0, 1, {"x": [1, 2]})], {"x": [1, 2]}, None),
    "acked write vanished": ([W(0, 1, "a")], None, "absent"),
    "last acked write lost, older back": ([W(0, 1, "a"), W(2, 3, "b")], "a", "stale"),
    "acked delete lost": ([W(0, 1, "a"), DEL(2, 3)], "a", "stale"),
    "acked cas lost": ([W(0, 1, "a"), CAS(2, 3, "a", "b")], "a", "stale"),
    "write lost, unknown elsewhere": ([W(0, 1, "a"), W(2, 3, "b"), W(0, INF, "c")], "a", "stale"),
    "value nobody wrote": ([W(0, 1, "a")], "z", "foreign"),
    "failed cas applied anyway": ([W(0, 1, "a"), CAS(2, 3, "a", "b", "fail")], "b", "failed_applied"),
    "acked write lost to initial": ([W(0, 1, "a")], "init", "stale"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ack_loss_cases(name: str) -> None:
    specs, final, kind = CASES[name]
    state = {} if final is None else {"k": final}
    r = check_ack_loss(build(*specs), state, initial={"k": "init"} if "initial" in name else None)
    if kind is None:
        assert r.ok and not r.lost and not r.duplicates, r.summary
        assert "no acknowledged write lost" in r.summary
    else:
        assert not r.ok and [x.key for x in r.lost] == ["k"], r.summary
        assert r.lost[0].kind == kind, r.lost[0].describe()
        assert "'k'" in r.summary and r.duplicates == []


def test_lost_write_details() -> None:
    ops = build(W(0, 1, "a"), W(2, 3, "b"), W(2.5, 4, "c"), W(0, INF, "u"))
    r = check_ack_loss(ops, {"k": "a"})
    (lost,) = r.lost
    assert lost.allowed == ["b", "c", "u"]  # b and c were concurrent; u may have applied last
    assert {op.id for op in lost.last_acked} == {1, 2}
    assert "superseded value written by #0" in lost.describe()
    assert r.acked == 3 and r.keys_checked == 1
    assert json.loads(json.dumps(r.to_dict()))["lost"][0].startswith("key 'k'")


def test_untouched_keys_must_keep_initial_value() -> None:
    r = check_ack_loss([], {"x": "boo", "y": None})
    assert [(x.key, x.kind) for x in r.lost] == [("x", "foreign")]
    assert check_ack_loss([], {"x": "boo"}, initial={"x": "boo"}).ok


def test_many_keys_summary_is_bounded() -> None:
    ops = [Op(i, ("t", "p", str(i)), "write", f"v{i}", None, 0, 1, "ok") for i in range(25)]
    r = check_ack_loss(ops, {})
    assert len(r.lost) == 25 and "and 15 more" in r.summary
    assert r.summary.startswith("25 of 25 keys lost acknowledged writes")


# --- counters ----------------------------------------------------------------------------------


def incs(key: str, *outcomes: str) -> list[tuple[str, int, str]]:
    return [(key, i, o) for i, o in enumerate(outcomes)]


# name -> (increments, final, expected lost keys, expected duplicate keys)
COUNTER_CASES: dict[str, tuple[list, dict, list, list]] = {
    "exact": (incs("c", "ok", "ok", "ok"), {"c": 3}, [], []),
    "unknown applied": (incs("c", "ok", "unknown", "unknown"), {"c": 3}, [], []),
    "unknown not applied": (incs("c", "ok", "unknown", "unknown"), {"c": 1}, [], []),
    "failed increments ignored": (incs("c", "ok", "fail", "aborted"), {"c": 1}, [], []),
    "duplicate application": (incs("c", "ok", "ok"), {"c": 3}, [], ["c"]),
    "duplicate beyond unknown": (incs("c", "ok", "unknown"), {"c": 3}, [], ["c"]),
    "failed increment applied": (incs("c", "ok", "fail"), {"c": 2}, [], ["c"]),
    "lost increment": (incs("c", "ok", "ok", "unknown"), {"c": 1}, ["c"], []),
    "counter missing at the end": (incs("c", "ok"), {}, ["c"], []),
    "counter never incremented": ([], {"c": 1}, [], ["c"]),
    "retries of one request count once": (
        [("c", 7, "unknown"), ("c", 7, "ok"), ("c", 7, "fail"), ("c", 8, "ok")],
        {"c": 2},
        [],
        [],
    ),
    "retried request applied twice": ([("c", 7, "unknown"), ("c", 7, "ok")], {"c": 2}, [], ["c"]),
    "keys are independent": (incs("a", "ok") + incs("b", "ok", "ok"), {"a": 2, "b": 1}, ["b"], ["a"]),
}


@pytest.mark.parametrize("name", sorted(COUNTER_CASES))
def test_counter_cases(name: str) -> None:
    increments, final, lost, dups = COUNTER_CASES[name]
    r = check_counters(increments, final)
    assert sorted(x.key for x in r.lost) == lost, r.summary
    assert sorted(x.key for x in r.duplicates) == dups, r.summary
    assert r.ok == (not lost and not dups)


def test_counter_details_and_initial() -> None:
    r = check_counters(incs("c", "ok", "ok", "unknown"), {"c": 15}, initial={"c": 10})
    (d,) = r.duplicates
    assert (d.low, d.high, d.final) == (12, 13, 15)
    assert "2 increment(s) applied twice" in d.describe()
    r = check_counters(incs("c", "ok", "ok", "ok"), {"c": 11}, initial={"c": 10})
    assert "2 acknowledged increment(s) lost" in r.lost[0].describe()
    assert check_counters(incs("c", "ok"), {}, initial={"c": 4}).lost[0].final == 4
    assert check_counters([], {}).ok
    with pytest.raises(ValueError):
        check_counters([("c", 1, "maybe")], {})


def test_combine() -> None:
    a = check_ack_loss(build(W(0, 1, "a")), {"k": "a"})
    b = check_counters(incs("c", "ok"), {"c": 2})
    c = combine(a, b)
    assert not c.ok and len(c.duplicates) == 1 and c.lost == [] and c.acked == 2
    assert combine(a, a).ok


# --- against the simulated correct register ----------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_ops=st.integers(1, 120),
    n_keys=st.integers(1, 5),
    n_procs=st.integers(1, 6),
    p_unknown=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_simulated_final_state_passes(
    seed: int, n_ops: int, n_keys: int, n_procs: int, p_unknown: float
) -> None:
    ops, final = simulate(random.Random(seed), n_ops, n_keys, n_procs, p_unknown)
    r = check_ack_loss(ops, final)
    assert r.ok, r.summary
    # Forget one key whose last acknowledged mutations all wrote a value: that loss is caught.
    present = [k for k, v in final.items() if v is not None]
    for key in present:
        mine = [o for o in ops if o.key == key and o.is_mutation and o.outcome in ("ok", "unknown")]
        if all(o.value is not None for o in mine) and any(o.outcome == "ok" for o in mine):
            r = check_ack_loss(ops, {k: v for k, v in final.items() if k != key})
            assert [(x.key, x.kind) for x in r.lost] == [(key, "absent")], r.summary
            break
