"""Per-key linearizability checker for register histories (read, write, cas, insert, update, delete).

Linearizability is local (Herlihy & Wing): a history is linearizable iff each key's sub-history is,
so :func:`check` splits the history per key and searches each one with Wing & Gong's algorithm,
memoized as in Lowe's refinement (a cache of ``(set of linearized ops, register value)`` pairs
already explored), the approach of Knossos and Porcupine.

The search walks a doubly linked list of call and return events ordered by time. At each step it
tries to linearize one of the operations whose call precedes the first pending return (the
"minimal" ops); reaching a return whose op is not linearized yet means a dead end, so it backtracks.

Outcomes (see :mod:`cli.workload.verify.history`): ``ok`` ops must be linearized inside their
interval; ``fail`` ops too, as checks that do not change the value (a failed cas saw a value other
than ``expected``, a failed insert saw a present value, a failed update or delete an absent one);
``unknown`` ops have no return event: they may be linearized anywhere after their start, or never.
The search succeeds once every definite op is linearized, since the remaining unknown ops can be
left out.

Unknown ops are what makes the search expensive (each may or may not have happened, anywhere after
its start), so it is reduced in ways that keep the verdict exact (cross-checked against exhaustive
search in the tests):

- unknown ops that cannot matter are dropped up front (a cas on a value nobody could have written;
  writes of values nobody read, when no op on the key tests for inequality or presence);
- the memo keys on the register value only up to what the remaining ops can tell apart: a value that
  no remaining op reads or cas-expects is folded into one abstract "dead" value;
- a node is skipped when an explored node with the same definite ops and abstract value spent no
  more unknown ops (fewer spent ops means more options), counting unknown ops with dead values
  by class (an unconditional write of a dead value can stand in for an insert, update or cas);
- unknown ops with the same effect are interchangeable: only the earliest pending one is tried;
- each node tries its definite candidates before the unknown ones, so a (definite set, value) pair
  is first reached spending few unknown ops, and later visits are mostly dominated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from cli.workload.verify.history import Op, by_key, freeze
from cli.workload.verify.verdict import KeyResult, Result, context_ops, format_ops

# Step codes: what an op checks and does when linearized.
_READ, _WRITE, _CAS, _CAS_FAIL, _INS, _INS_FAIL, _UPD, _UPD_FAIL, _DEL, _DEL_FAIL = range(10)
_NO: Any = object()  # "this op cannot be linearized in this state"


class _Unobserved:
    """The abstract value standing for every value that no read returned and no cas expected."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a value nobody read>"


_UNOBS = _Unobserved()


_CODES = {
    ("read", "ok"): _READ, ("write", "ok"): _WRITE, ("write", "unknown"): _WRITE,
    ("cas", "ok"): _CAS, ("cas", "unknown"): _CAS, ("cas", "fail"): _CAS_FAIL,
    ("insert", "ok"): _INS, ("insert", "unknown"): _INS, ("insert", "fail"): _INS_FAIL,
    ("update", "ok"): _UPD, ("update", "unknown"): _UPD, ("update", "fail"): _UPD_FAIL,
    ("delete", "ok"): _DEL, ("delete", "unknown"): _DEL, ("delete", "fail"): _DEL_FAIL,
}  # fmt: skip
"""(kind, outcome) -> step code; pairs missing here carry no information and are skipped."""

# The register value after linearizing an op (state, value, expected), or _NO if it cannot be.
_STEPS: tuple[Callable[[Any, Any, Any], Any], ...] = (
    lambda s, v, e: s if s == v else _NO,  # _READ
    lambda s, v, e: v,  # _WRITE
    lambda s, v, e: v if s == e else _NO,  # _CAS
    lambda s, v, e: s if s != e else _NO,  # _CAS_FAIL
    lambda s, v, e: v if s is None else _NO,  # _INS
    lambda s, v, e: s if s is not None else _NO,  # _INS_FAIL
    lambda s, v, e: v if s is not None else _NO,  # _UPD
    lambda s, v, e: s if s is None else _NO,  # _UPD_FAIL
    lambda s, v, e: None,  # _DEL
    lambda s, v, e: s if s is None else _NO,  # _DEL_FAIL
)


def _precheck(
    key: Hashable, ops: list[Op], codes: list[int], vals: list[Any], exps: list[Any], initial: Any
) -> KeyResult | None:
    """Cheap, well-explained violations: reading (or cas-ing on) a value nobody could have written."""
    writers: dict[Any, list[Op]] = {}
    for op, code, v in zip(ops, codes, vals, strict=True):
        if code in (_WRITE, _CAS, _INS, _UPD, _DEL):
            writers.setdefault(v, []).append(op)
    for op, code, v, e in zip(ops, codes, vals, exps, strict=True):
        if code == _READ and op.outcome == "ok":
            seen, what = v, "read returned"
        elif code == _CAS and op.outcome == "ok":
            seen, what = e, "successful cas expected"
        else:
            continue
        if seen == initial:
            continue
        ws = writers.get(seen, [])
        if not ws:
            failed = [
                o for o, ov in zip(ops, vals, strict=True) if ov == seen and o.kind != "read" and o is not op
            ]
            why = f" (only failed ops wrote it:\n{format_ops(failed)})" if failed else ""
            text = f"key {key!r}: {what} {seen!r}, a value no operation on this key wrote{why}\n  {op.describe()}"
            return KeyResult(key, "violation", text, len(ops), failing_ops=[op, *failed])
        if all(w.start > op.end_time for w in ws):
            text = (
                f"key {key!r}: {what} {seen!r} before any write of it began\n  {op.describe()}\n"
                f"written only later by:\n{format_ops(ws)}"
            )
            return KeyResult(key, "violation", text, len(ops), failing_ops=[op, *ws])
    return None


def _prune_unknown(
    ops: list[Op], codes: list[int], vals: list[Any], exps: list[Any], initial: Any
) -> list[int]:
    """Indices of ops to search: drops unknown ops that can be left out without losing any answer.

    An unknown cas whose expected value no op could have produced can never apply. An unknown write
    of a value nobody observed (no read returned it, no cas expected it) only matters to ops that
    test for inequality or presence; when the key has none of those (failed cas, failed insert, any
    update), every linearization that applies it stays valid without it.
    """
    possible = {initial}
    observed: set[Any] = set()
    negative = False
    for code, v, e in zip(codes, vals, exps, strict=True):
        if code in (_WRITE, _CAS, _INS, _UPD):
            possible.add(v)
        elif code == _DEL:
            possible.add(None)
        if code == _READ:
            observed.add(v)
        elif code in (_CAS, _CAS_FAIL):
            observed.add(e)
        if code in (_CAS_FAIL, _INS_FAIL, _UPD):
            negative = True
    keep: list[int] = []
    for i, (op, code, v, e) in enumerate(zip(ops, codes, vals, exps, strict=True)):
        if op.outcome == "unknown":
            if code == _CAS and e not in possible:
                continue
            if not negative and code in (_WRITE, _CAS, _INS) and v is not None and v not in observed:
                continue
        keep.append(i)
    return keep


def check_key(
    key: Hashable,
    ops: list[Op],
    initial: Any = None,
    timeout_s: float = 10.0,
    max_states: int = 1_000_000,
) -> KeyResult:
    """Check one key's sub-history against a register starting at ``initial`` (None: absent).

    Stops with status ``"timeout"`` after ``timeout_s`` seconds or ``max_states`` memoized states.
    """
    t0 = time.monotonic()
    initial = freeze(initial)
    coded = [(op, c) for op in ops if (c := _CODES.get((op.kind, op.outcome))) is not None]
    all_ops = [op for op, _ in coded]
    codes = [c for _, c in coded]
    for op in all_ops:
        if op.end is not None and op.outcome != "unknown" and op.end < op.start:
            raise ValueError(f"op {op.id} ends before it starts")
    fvals = [freeze(op.value) for op in all_ops]
    fexps = [freeze(op.expected) for op in all_ops]
    pre = _precheck(key, all_ops, codes, fvals, fexps, initial)
    if pre is not None:
        pre.elapsed_s = time.monotonic() - t0
        return pre
    keep = _prune_unknown(all_ops, codes, fvals, fexps, initial)
    sops = [all_ops[i] for i in keep]
    scodes = [codes[i] for i in keep]
    n = len(sops)
    definite = [op.outcome != "unknown" for op in sops]
    values = [fvals[i] for i in keep]
    expects = [fexps[i] for i in keep]
    step = [_STEPS[c] for c in scodes]
    # Values that no remaining op tests for equality (reads, cas) are indistinguishable from here on:
    # the memo folds them into one abstract value. live[v] counts the unlinearized ops testing v.
    obs: list[Any] = [_NO] * n
    live: dict[Any, int] = {}
    for i, c in enumerate(scodes):
        v = values[i] if c == _READ else expects[i] if c in (_CAS, _CAS_FAIL) else None
        if v is not None:
            live[v] = live.get(v, 0) + 1
            if definite[i]:  # an unknown cas pins its expected value for good (liveness then
                obs[i] = v  # depends only on which definite ops are linearized)

    def abstract(v: Any) -> Any:
        return v if v is None or live.get(v) else _UNOBS

    # Events: calls at start, returns at end (none for unknown ops); at equal times calls come first,
    # so ops that touch are treated as concurrent.
    events = [(op.start, 0, i) for i, op in enumerate(sops)]
    events += [(op.end_time, 1, i) for i, op in enumerate(sops) if definite[i]]
    events.sort()
    m = len(events)
    tail = m + 1
    nxt = list(range(1, m + 2)) + [tail]
    prv = [0, *range(0, m + 1)]
    node_op = [-1] * (m + 2)
    is_call = [False] * (m + 2)
    call_node = [0] * n
    ret_node = [-1] * n
    for pos, (_, kind, i) in enumerate(events, start=1):
        node_op[pos] = i
        if kind == 0:
            is_call[pos] = True
            call_node[i] = pos
        else:
            ret_node[i] = pos
    # Definite ops and unknown ops get bits in separate masks. Unknown ops with the same effect are
    # interchangeable once started: only the earliest unlinearized one of a class is tried.
    bit = [0] * n
    earlier = [0] * n
    n_def = n_unk = 0
    classes: dict[tuple[int, Any, Any], int] = {}
    unknown_ops: list[int] = []
    dead_cls = [-1] * n  # the class of an unknown op once its value is dead (no op tests it any more)
    dead_ids: dict[tuple[int, Any], int] = {}
    for _, kind, i in events:
        if kind or definite[i]:
            if kind == 0:
                bit[i], n_def = 1 << n_def, n_def + 1
            continue
        bit[i], n_unk = 1 << n_unk, n_unk + 1
        unknown_ops.append(i)
        c = scodes[i]
        cls = (c, abstract(values[i]), abstract(expects[i]) if c == _CAS else None)
        earlier[i] = classes.get(cls, 0)
        classes[cls] = earlier[i] | bit[i]
        if values[i] is None:
            c = _DEL
        elif c == _CAS and expects[i] is None:
            c = _INS
        dk = (c, expects[i] if c == _CAS else None)
        dead_cls[i] = dead_ids.setdefault(dk, len(dead_ids))

    write_cls = dead_ids.get((_WRITE, None), -1)
    del_cls = dead_ids.get((_DEL, None), -1)

    def summarize(ul: int) -> tuple[int, dict[int, int]]:
        """``ul`` as (the ops whose value is live, how many ops of each dead class were applied)."""
        counts: dict[int, int] = {}
        for u in unknown_ops:
            if ul & bit[u] and not live.get(values[u]):
                ul ^= bit[u]
                counts[dead_cls[u]] = counts.get(dead_cls[u], 0) + 1
        return ul, counts

    def covers(a: tuple[int, dict[int, int]], b: tuple[int, dict[int, int]]) -> bool:
        """Whether a node that spent ``a`` has every option of one that spent ``b`` (same ops and
        state otherwise): it spent a subset of the live ops and no more of each dead class, except
        that an unconditional write of a dead value can stand in for an insert, update or cas."""
        if a[0] & ~b[0]:
            return False
        ca, cb = a[1], b[1]
        surplus = cb.get(write_cls, 0) - ca.get(write_cls, 0)
        if surplus < 0:
            return False
        for c, k in ca.items():
            extra = k - cb.get(c, 0)
            if extra > 0 and c != write_cls:
                surplus -= extra
                if c == del_cls or surplus < 0:
                    return False
        return True

    state: Any = initial
    dl = ul = 0  # linearized definite / unknown ops
    remaining = n_def
    stack: list[tuple[int, Any]] = []
    # (definite mask, abstract state) -> unknown masks explored; a node is redundant if one of them is
    # a subset of its own: with fewer optional ops spent, the explored node had every option it has.
    cache: dict[tuple[int, Any], list[tuple[int, dict[int, int]]]] = {(0, abstract(state)): [(0, {})]}
    n_states = 1
    deadline = t0 + timeout_s
    best_depth, best_op, best_states, best_tail = -1, -1, set(), []
    steps = 0
    # Each node first tries the definite ops that may go next (phase 0), then the unknown ones (phase
    # 1), so the first visit of a (definite set, state) pair tends to spend the fewest unknown ops.
    entry, phase = nxt[0], 0
    while remaining:
        steps += 1
        if not steps & 1023 and (time.monotonic() > deadline or n_states > max_states):
            text = (
                f"key {key!r}: search cut short after {time.monotonic() - t0:.1f} s and {n_states} "
                f"states ({n} ops, {n_unk} of them unknown); no violation found so far"
            )
            return KeyResult(key, "timeout", text, n, n_states, time.monotonic() - t0)
        i = node_op[entry]
        if is_call[entry]:
            if definite[i] == phase or earlier[i] & ~ul:
                entry = nxt[entry]
                continue
            new = step[i](state, values[i], expects[i])
            if new is not _NO:
                if definite[i]:
                    ndl, nul = dl | bit[i], ul
                else:
                    ndl, nul = dl, ul | bit[i]
                o = obs[i]
                if o is not _NO:
                    live[o] -= 1
                for x in (entry, ret_node[i]):  # lift the call and its return out of the list
                    if x >= 0:
                        nxt[prv[x]] = nxt[x]
                        prv[nxt[x]] = prv[x]
                ck = (ndl, new if new is None or live.get(new) else _UNOBS)
                spent = summarize(nul) if nul else (0, {})
                seen = cache.get(ck)
                fresh = True
                if seen is None:
                    cache[ck] = [spent]
                else:
                    for old in seen:
                        if covers(old, spent):
                            fresh = False
                            break
                    else:
                        seen.append(spent)
                if fresh:
                    n_states += 1
                    stack.append((i, state))
                    state, dl, ul = new, ndl, nul
                    if definite[i]:
                        remaining -= 1
                    entry, phase = nxt[0], 0
                    continue
                for x in (ret_node[i], entry):  # not worth it: put them back
                    if x >= 0:
                        nxt[prv[x]] = x
                        prv[nxt[x]] = x
                if o is not _NO:
                    live[o] += 1
            entry = nxt[entry]
            continue
        if not phase:  # definite candidates exhausted: now try applying unknown ops
            entry, phase = nxt[0], 1
            continue
        # A return whose op is not linearized yet: dead end, backtrack.
        depth = n_def - remaining
        if depth > best_depth:
            best_depth, best_op, best_states = depth, i, {state}
            best_tail = [j for j, _ in stack[-4:]]
        elif i == best_op and len(best_states) < 8:
            best_states.add(state)
        if not stack:
            break
        j, state = stack.pop()
        if obs[j] is not _NO:
            live[obs[j]] += 1
        if definite[j]:
            dl ^= bit[j]
            remaining += 1
        else:
            ul ^= bit[j]
        for x in (ret_node[j], call_node[j]):  # put them back, in reverse order
            if x >= 0:
                nxt[prv[x]] = x
                prv[nxt[x]] = x
        entry, phase = nxt[call_node[j]], 0 if definite[j] else 1
    elapsed = time.monotonic() - t0
    if not remaining:
        return KeyResult(key, "ok", "", n, n_states, elapsed)

    bad = sops[best_op]
    concurrent, before = context_ops(sops, bad)
    tail_ops = [sops[j] for j in best_tail]
    states = ", ".join(sorted(repr(s) for s in best_states))
    parts = [
        f"key {key!r}: not linearizable ({n} ops searched, {n_states} states). No linearization gets",
        f"past this op (the longest reached {best_depth} of {n_def} definite ops):",
        f"  {bad.describe()}",
        f"when its answer came, the register held one of {{{states}}} in the longest partial orders.",
    ]
    if tail_ops:
        parts += ["The longest partial linearization ended with:", format_ops(tail_ops)]
    if before:
        parts += ["Last mutations acknowledged before it started:", format_ops(before)]
    if concurrent:
        parts += ["Ops concurrent with it:", format_ops(concurrent)]
    failing = [bad, *before, *concurrent]
    return KeyResult(key, "violation", "\n".join(parts), n, n_states, elapsed, failing)


def check(
    history: Iterable[Op],
    initial: Mapping[Hashable, Any] | None = None,
    timeout_s: float = 60.0,
    key_timeout_s: float | None = 10.0,
    max_states_per_key: int = 1_000_000,
) -> Result:
    """Check that ``history`` is linearizable, key by key, for a register model.

    ``initial`` maps keys to their value before the history (missing keys start absent, None).
    ``timeout_s`` bounds the whole check; ``key_timeout_s`` (None: no per-key bound) and
    ``max_states_per_key`` bound each key, so one hard key cannot starve the others. Keys are
    checked smallest first; a key the budget runs out on is reported as timed out (status
    ``"timeout"``), never as a pass.

    Cost: correct histories check in about linear time (20k ops over 200 keys with 8 clients take
    well under a second). Refuting a violation needs the search to exhaust the orders before it,
    which grows with the number of unknown ops pending on the key at the time: fine for a few
    percent of timeouts, while hundreds of unknown ops on one long-lived key may hit the bound.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    per_key = by_key(history)
    initial = initial or {}
    results: list[KeyResult] = []
    timed_out: list[Hashable] = []
    for key, ops in sorted(per_key.items(), key=lambda kv: len(kv[1])):
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out.append(key)
            continue
        budget = left if key_timeout_s is None else min(left, key_timeout_s)
        r = check_key(key, ops, initial.get(key), budget, max_states_per_key)
        results.append(r)
        if r.status == "timeout":
            timed_out.append(key)
    elapsed = time.monotonic() - t0
    checked = sum(r.ops_checked for r in results)
    bad = [r for r in results if r.status == "violation"]
    if bad:
        first = bad[0]
        more = f"\n({len(bad) - 1} more bad keys: {[r.key for r in bad[1:6]]})" if len(bad) > 1 else ""
        return Result(
            False, first.key, first.explanation + more, checked, "violation", len(per_key),
            [r.key for r in bad], timed_out, first.failing_ops, elapsed,
        )  # fmt: skip
    if timed_out:
        explanation = (
            f"{len(timed_out)} of {len(per_key)} keys could not be decided in time "
            f"(first: {timed_out[0]!r}); no violation found on the others"
        )
        return Result(
            False, timed_out[0], explanation, checked, "timeout", len(per_key), [], timed_out, [], elapsed
        )
    text = f"linearizable: {len(per_key)} keys, {checked} ops in {elapsed:.2f} s"
    return Result(True, None, text, checked, "ok", len(per_key), [], [], [], elapsed)


__all__ = ["KeyResult", "Result", "check", "check_key"]
