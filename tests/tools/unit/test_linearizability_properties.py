"""Properties of the per-key linearizability checker (cli.workload.verify): the same verdict as
exhaustive search on tiny arbitrary histories, histories of a simulated correct register pass (and fail
with one provably stale read injected), agreement with a reference search, and scale.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, assume, given, settings

from cli.workload.verify import Op, check
from tests.tools.unit.register_histories import simulate

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
@settings(max_examples=200, deadline=None)
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
