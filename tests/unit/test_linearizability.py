"""Tests for rangetable.verify: the history recorder and the per-key linearizability checker.

Histories that must pass and must fail, a Hypothesis property over histories produced by a
simulated correct register (and the same histories with one provably stale read injected), and a
scale test.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, assume, given, settings

from rangetable.verify import Op, Recorder, check, check_key, dump_history, load_history

INF = None  # end of an op whose answer never came


def build(*specs: tuple) -> list[Op]:
    """Ops from compact specs: (kind, start, end, value[, expected][, outcome][, key])."""
    ops = []
    for i, spec in enumerate(specs):
        kind, start, end, value, *rest = spec
        expected = rest.pop(0) if kind == "cas" else None
        outcome = rest.pop(0) if rest else ("unknown" if end is None else "ok")
        key = rest.pop(0) if rest else "k"
        ops.append(Op(i, key, kind, value, expected, start, end, outcome))
    return ops


def W(s, e, v, out=None):  # noqa: N802 - short table names
    return ("write", s, e, v, out) if out else ("write", s, e, v)


def R(s, e, v):  # noqa: N802
    return ("read", s, e, v)


def CAS(s, e, exp, new, out=None):  # noqa: N802
    return ("cas", s, e, new, exp, out or ("unknown" if e is None else "ok"))


def INS(s, e, v, out=None):  # noqa: N802
    return ("insert", s, e, v, out) if out else ("insert", s, e, v)


def UPD(s, e, v, out=None):  # noqa: N802
    return ("update", s, e, v, out) if out else ("update", s, e, v)


def DEL(s, e, out=None):  # noqa: N802
    return ("delete", s, e, None, out) if out else ("delete", s, e, None)


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


# --- cross-check against brute force on tiny arbitrary histories -------------------------------


_BAD: Any = object()
_ANY: Any = object()


def model_step(o: Op, state: Any) -> Any:
    """The register after ``o`` (the spec, written independently of the checker), or ``_BAD``."""
    applied = o.outcome != "fail"
    pre = {
        "read": state == o.value,
        "write": True,
        "cas": (state == o.expected) == applied,
        "insert": (state is None) == applied,
        "update": (state is not None) == applied,
        "delete": True if applied else state is None,
    }[o.kind]
    if not pre:
        return _BAD
    return o.value if o.kind != "read" and applied else state


def brute_force(ops: list[Op], initial: Any = None) -> bool | None:
    """Linearizable? By trying every subset of unknown ops in every real-time-respecting order.

    Ops that carry no information are ignored (an empty history after that is linearizable);
    ``initial=_ANY`` only asks whether anything is left (None if not).
    """
    relevant = [
        o for o in ops
        if o.outcome != "aborted"
        and not (o.kind == "read" and o.outcome != "ok")
        and not (o.kind == "write" and o.outcome == "fail")
    ]  # fmt: skip
    if initial is _ANY:
        return True if relevant else None
    definite = [o for o in relevant if o.outcome != "unknown"]
    unknown = [o for o in relevant if o.outcome == "unknown"]
    for mask in range(2 ** len(unknown)):
        chosen = definite + [u for j, u in enumerate(unknown) if mask >> j & 1]
        for perm in itertools.permutations(chosen):
            if any(
                perm[j].end_time < perm[i].start for i in range(len(perm)) for j in range(i + 1, len(perm))
            ):
                continue
            state = initial
            for o in perm:
                state = model_step(o, state)
                if state is _BAD:
                    break
            else:
                return True
    return False


tiny_op = st.tuples(
    st.sampled_from(["read", "read", "write", "cas", "cas", "insert", "update", "delete"]),
    st.integers(0, 6),  # start
    st.integers(0, 4),  # duration
    st.integers(0, 7),  # picks the value (a read's: of another op, or None)
    st.integers(0, 7),  # picks a cas's expected value
    st.sampled_from(["ok", "ok", "ok", "fail", "unknown", "unknown", "aborted"]),
)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(
    specs=st.lists(tiny_op, min_size=1, max_size=7),
    initial=st.sampled_from([None, "w0"]),
    unique=st.booleans(),
)
def test_agrees_with_brute_force(specs: list[tuple], initial: Any, unique: bool) -> None:
    """Tiny arbitrary histories (most not linearizable): same verdict as exhaustive search.

    With ``unique`` each op writes its own value and reads return another op's value (the shape of
    the real workload); otherwise values repeat, which exercises the symmetry reductions.
    """

    def pick(j: int) -> Any:
        if unique:
            return f"w{j}" if j < len(specs) else None
        return ["w0", "w1", "w2", None][j % 4]

    ops = []
    for i, (kind, start, dur, v, e, outcome) in enumerate(specs):
        value = None if kind == "delete" else pick(v) if kind == "read" else f"w{i}" if unique else pick(v)
        if value is None and kind in ("write", "insert", "update", "cas") and kind != "cas":
            value = "w2"
        end = None if outcome == "unknown" else start + dur
        ops.append(Op(i, "k", kind, value, pick(e) if kind == "cas" else None, start, end, outcome))
    expected_ok = brute_force(ops, initial)
    r = check(ops, initial={"k": initial})
    assert r.ok == expected_ok, (expected_ok, r.explanation, [o.describe() for o in ops])


# --- simulated correct register ----------------------------------------------------------------

KIND_WEIGHTS = {"read": 4, "write": 2, "cas": 3, "insert": 1, "update": 1, "delete": 1}


def simulate(
    rng: random.Random, n_ops: int, n_keys: int, n_procs: int, p_unknown: float = 0.05
) -> tuple[list[Op], dict[Any, Any]]:
    """A history of a correct (linearizable) register store, and its final state.

    Each op is invoked, takes effect atomically and is answered at three distinct random moments,
    interleaved across processes. A lost answer makes the op ``unknown``; it may then take effect
    later (after the client gave up) or never.
    """
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    state: dict[Any, Any] = {}
    seen: list[dict[Any, Any]] = [{} for _ in range(n_procs)]
    slots: list[dict[str, Any] | None] = [None] * n_procs
    zombies: list[dict[str, Any]] = []
    ops: list[Op] = []
    t, issued, fresh = 0.0, 0, 0

    def apply(p: dict[str, Any]) -> None:
        op: Op = p["op"]
        k, cur = op.key, state.get(op.key)
        p["applied"] = True
        if p["never"]:
            return
        ok = {
            "read": True,
            "write": True,
            "cas": cur == op.expected,
            "insert": cur is None,
            "update": cur is not None,
            "delete": cur is not None,
        }[op.kind]
        if op.kind == "read":
            op.value = cur
        elif ok:
            state[k] = op.value
            if op.value is None:
                del state[k]
        p["result"] = "ok" if ok else "fail"

    while issued < n_ops or any(slots) or zombies:
        t += rng.uniform(0.001, 1.0)
        if zombies and rng.random() < 0.2:
            apply(zombies.pop(rng.randrange(len(zombies))))
            continue
        i = rng.randrange(n_procs)
        p = slots[i]
        if p is None:
            if issued >= n_ops:
                continue
            key = f"k{rng.randrange(n_keys)}"
            kind = rng.choices(kinds, weights)[0]
            fresh += 1
            value = None if kind in ("read", "delete") else f"v{fresh}"
            expected = None
            if kind == "cas":
                expected = rng.choice(
                    [seen[i].get(key), state.get(key), state.get(key), f"v{rng.randrange(fresh)}"]
                )
            op = Op(issued, key, kind, value, expected, start=t, process=i)
            ops.append(op)
            issued += 1
            lost = rng.random() < p_unknown
            slots[i] = {"op": op, "applied": False, "lost": lost, "never": lost and rng.random() < 0.3}
        elif not p["applied"] and not (p["lost"] and rng.random() < 0.5):
            apply(p)
        else:
            op = p["op"]
            slots[i] = None
            if p["lost"]:
                op.outcome, op.end = "unknown", None
                if not p["applied"]:
                    zombies.append(p)
                continue
            op.outcome, op.end = p["result"], t
            seen[i][op.key] = op.value if op.kind == "read" or p["result"] == "ok" else seen[i].get(op.key)
    return ops, dict(state)


def provably_stale(ops: list[Op]) -> list[tuple[Op, Any]]:
    """(read, value) pairs where the read returning that value cannot be linearized.

    ``u`` was written only by op A (acknowledged), a mutation B of another value was acknowledged
    after A completed and before the read started: the register left ``u`` for good.
    """
    writers: dict[Any, list[Op]] = {}
    for op in ops:
        if op.kind != "read":
            writers.setdefault((op.key, op.value), []).append(op)
    out = []
    for r in ops:
        if r.kind != "read" or r.outcome != "ok":
            continue
        for (key, u), ws in writers.items():
            if key != r.key or u is None or u == r.value or len(ws) != 1 or ws[0].outcome != "ok":
                continue
            a = ws[0]
            if any(
                b.key == key and b.kind != "read" and b.outcome == "ok" and b.value != u
                and a.end_time < b.start and b.end_time < r.start
                for b in ops
            ):  # fmt: skip
                out.append((r, u))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_ops=st.integers(1, 80),
    n_keys=st.integers(1, 4),
    n_procs=st.integers(1, 6),
    p_unknown=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_simulated_correct_histories_pass(
    seed: int, n_ops: int, n_keys: int, n_procs: int, p_unknown: float
) -> None:
    ops, _ = simulate(random.Random(seed), n_ops, n_keys, n_procs, p_unknown)
    r = check(ops, timeout_s=20)
    assert r.ok, r.explanation


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_ops=st.integers(5, 80),
    n_keys=st.integers(1, 3),
    n_procs=st.integers(1, 6),
    p_unknown=st.sampled_from([0.0, 0.05, 0.3]),
    pick=st.integers(0, 10**6),
)
def test_injected_stale_read_fails(
    seed: int, n_ops: int, n_keys: int, n_procs: int, p_unknown: float, pick: int
) -> None:
    ops, _ = simulate(random.Random(seed), n_ops, n_keys, n_procs, p_unknown)
    candidates = provably_stale(ops)
    assume(candidates)
    read, stale = candidates[pick % len(candidates)]
    read.value = stale
    r = check(ops, timeout_s=20)
    assert r.status == "violation" and read.key in r.bad_keys, r.explanation


def reference(ops: list[Op], initial: Any = None) -> bool:
    """Plain memoized Wing & Gong search, none of the checker's reductions: an oracle for mid sizes."""
    rel = [o for o in ops if brute_force([o], _ANY) is not None]  # same filter as brute_force
    n, failed = len(rel), set()
    definite = [i for i in range(n) if rel[i].outcome != "unknown"]

    def search(done: int, state: Any) -> bool:
        pending = [rel[i].end_time for i in definite if not done >> i & 1]
        if not pending:
            return True
        if (done, state) in failed:
            return False
        for i in range(n):
            if not done >> i & 1 and rel[i].start <= min(pending):
                new = model_step(rel[i], state)
                if new is not _BAD and search(done | 1 << i, new):
                    return True
        failed.add((done, state))
        return False

    return search(0, initial)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(5, 28), n_procs=st.integers(1, 5))
def test_agrees_with_reference_on_corrupted_simulations(seed: int, n_ops: int, n_procs: int) -> None:
    """Simulated histories with many unknown ops and random corruption: same verdict as the oracle."""
    rng = random.Random(seed)
    ops, _ = simulate(rng, n_ops, 1, n_procs, rng.choice([0.1, 0.3, 0.5]))
    reads = [o for o in ops if o.kind == "read" and o.outcome == "ok"]
    values = [o.value for o in ops if o.kind != "read"] + [None]
    for _ in range(rng.choice([0, 1, 2])):
        if reads:
            rng.choice(reads).value = rng.choice(values)
    r = check(ops, timeout_s=30)
    assert r.ok == reference(ops), r.explanation


def test_scale_20k_ops_200_keys() -> None:
    ops, _ = simulate(random.Random(4), 20_000, 200, 8, p_unknown=0.02)
    t0 = time.monotonic()
    r = check(ops, timeout_s=120)
    elapsed = time.monotonic() - t0
    print(f"\nlinearizability: {len(ops)} ops over {r.keys_checked} keys, 8 procs: {elapsed:.2f} s")
    assert r.ok, r.explanation
    assert r.ops_checked > 15_000 and elapsed < 60


def test_hot_key_with_high_concurrency() -> None:
    ops, _ = simulate(random.Random(7), 3_000, 1, 8, p_unknown=0.02)
    t0 = time.monotonic()
    r = check(ops, timeout_s=120)
    print(f"\nlinearizability: {len(ops)} ops on one key, 8 procs: {time.monotonic() - t0:.2f} s")
    assert r.ok, r.explanation
