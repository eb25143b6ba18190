"""Per-key linearizability checker for register histories (read, write, cas, insert, update, delete).

Linearizability is local (Herlihy & Wing): a history is linearizable iff each key's sub-history is,
so :func:`check` splits the history per key and searches each one with Wing & Gong's algorithm,
memoized as in Lowe's refinement (a cache of ``(set of linearized ops, register value)`` pairs
already explored), the approach of Knossos and Porcupine.

The search walks a doubly linked list of call and return events ordered by time. At each step it
tries to linearize one of the operations whose call precedes the first pending return (the
"minimal" ops); reaching a return whose op is not linearized yet means a dead end, so it backtracks.

Outcomes (see :mod:`rangetable.verify.history`): ``ok`` ops must be linearized inside their
interval; ``fail`` ops too, as checks that do not change the value (a failed cas saw a value other
than ``expected``, a failed insert saw a present value, a failed update or delete an absent one);
``unknown`` ops have no return event: they may be linearized anywhere after their start, or never.
The search succeeds once every definite op is linearized, since the remaining unknown ops can be
left out. Unknown writes of values nobody observed are dropped up front when that is provably safe
(no failed cas/insert or update on the key could depend on them), which keeps histories with many
timeouts cheap.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rangetable.verify.history import Op, by_key, freeze

# Step codes: what an op checks and does when linearized.
_READ, _WRITE, _CAS, _CAS_FAIL, _INS, _INS_FAIL, _UPD, _UPD_FAIL, _DEL, _DEL_FAIL = range(10)
_NO: Any = object()  # "this op cannot be linearized in this state"


class _Unobserved:
    """The abstract value standing for every value that no read returned and no cas expected."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a value nobody read>"


_UNOBS = _Unobserved()


def _code(op: Op) -> int | None:
    """The step code of ``op``, or None when it carries no information and is skipped."""
    if op.outcome == "aborted":
        return None
    applied = op.outcome in ("ok", "unknown")
    kind = op.kind
    if kind == "read":
        return _READ if op.outcome == "ok" else None
    if kind == "write":
        return _WRITE if applied else None
    if kind == "cas":
        return _CAS if applied else _CAS_FAIL
    if kind == "insert":
        return _INS if applied else _INS_FAIL
    if kind == "update":
        return _UPD if applied else _UPD_FAIL
    return _DEL if applied else _DEL_FAIL


def _step(code: int, state: Any, value: Any, expected: Any) -> Any:
    """The register value after linearizing an op in ``state``, or ``_NO`` if it cannot be."""
    if code == _READ:
        return state if state == value else _NO
    if code == _WRITE:
        return value
    if code == _CAS:
        return value if state == expected else _NO
    if code == _CAS_FAIL:
        return state if state != expected else _NO
    if code == _INS:
        return value if state is None else _NO
    if code == _INS_FAIL:
        return state if state is not None else _NO
    if code == _UPD:
        return value if state is not None else _NO
    if code == _UPD_FAIL:
        return state if state is None else _NO
    if code == _DEL:
        return None
    return state if state is None else _NO  # _DEL_FAIL


@dataclass
class KeyResult:
    """The verdict for one key: ``status`` is ``"ok"``, ``"violation"`` or ``"timeout"``."""

    key: Hashable
    status: str
    explanation: str = ""
    ops_checked: int = 0
    states_explored: int = 0
    elapsed_s: float = 0.0
    failing_ops: list[Op] = field(default_factory=list)


@dataclass
class Result:
    """The verdict for a whole history.

    ``ok`` is True only when every key was proven linearizable. ``status`` is ``"ok"``,
    ``"violation"`` (``key`` is the first bad key, ``explanation`` says why, ``failing_ops`` are the
    op that could not be placed and the ops around it) or ``"timeout"`` (no violation found, but the
    search was cut short on the keys in ``timed_out_keys``).
    """

    ok: bool
    key: Hashable | None
    explanation: str
    ops_checked: int
    status: str = "ok"
    keys_checked: int = 0
    bad_keys: list[Hashable] = field(default_factory=list)
    timed_out_keys: list[Hashable] = field(default_factory=list)
    failing_ops: list[Op] = field(default_factory=list)
    elapsed_s: float = 0.0

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (for ``rangetable drill --json``)."""
        return {
            "ok": self.ok,
            "status": self.status,
            "key": self.key,
            "explanation": self.explanation,
            "ops_checked": self.ops_checked,
            "keys_checked": self.keys_checked,
            "bad_keys": self.bad_keys,
            "timed_out_keys": self.timed_out_keys,
            "failing_ops": [op.describe() for op in self.failing_ops],
            "elapsed_s": round(self.elapsed_s, 3),
        }


def _fmt_ops(ops: Iterable[Op], indent: str = "  ") -> str:
    return "\n".join(indent + op.describe() for op in ops)


def _context_ops(ops: list[Op], bad: Op, limit: int = 8) -> tuple[list[Op], list[Op]]:
    """Ops concurrent with ``bad``, and the last mutations that completed before it started."""
    concurrent = [o for o in ops if o is not bad and o.start <= bad.end_time and bad.start <= o.end_time]
    before = [o for o in ops if o.end_time < bad.start and o.kind != "read" and o.outcome == "ok"]
    before.sort(key=lambda o: o.end_time)
    return concurrent[:limit], before[-3:]


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
            why = f" (only failed ops wrote it:\n{_fmt_ops(failed)})" if failed else ""
            text = f"key {key!r}: {what} {seen!r}, a value no operation on this key wrote{why}\n  {op.describe()}"
            return KeyResult(key, "violation", text, len(ops), failing_ops=[op, *failed])
        if all(w.start > op.end_time for w in ws):
            text = (
                f"key {key!r}: {what} {seen!r} before any write of it began\n  {op.describe()}\n"
                f"written only later by:\n{_fmt_ops(ws)}"
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
    coded = [(op, c) for op in ops if (c := _code(op)) is not None]
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
    # Values no op tests for equality are indistinguishable: fold them into one abstract value.
    observed = {fvals[i] for i in keep if codes[i] == _READ}
    observed |= {fexps[i] for i in keep if codes[i] in (_CAS, _CAS_FAIL)}

    def abstract(v: Any) -> Any:
        return v if v is None or v in observed else _UNOBS

    values = [abstract(fvals[i]) for i in keep]
    expects = [abstract(fexps[i]) for i in keep]

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
    for _, kind, i in events:
        if kind or definite[i]:
            if kind == 0:
                bit[i], n_def = 1 << n_def, n_def + 1
            continue
        bit[i], n_unk = 1 << n_unk, n_unk + 1
        cls = (scodes[i], values[i], expects[i] if scodes[i] == _CAS else None)
        earlier[i] = classes.get(cls, 0)
        classes[cls] = earlier[i] | bit[i]

    state: Any = abstract(initial)
    dl = ul = 0  # linearized definite / unknown ops
    remaining = n_def
    stack: list[tuple[int, Any]] = []
    # (definite mask, state) -> unknown masks explored; a node is redundant if one of them is a subset
    # of its own: with fewer optional ops spent, the explored node had every option it has.
    cache: dict[tuple[int, Any], list[int]] = {(0, state): [0]}
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
            new = _step(scodes[i], state, values[i], expects[i])
            if new is not _NO:
                if definite[i]:
                    ndl, nul = dl | bit[i], ul
                else:
                    ndl, nul = dl, ul | bit[i]
                seen = cache.get((ndl, new))
                fresh = True
                if seen is None:
                    cache[(ndl, new)] = [nul]
                else:
                    for mask in seen:
                        if not mask & ~nul:
                            fresh = False
                            break
                    else:
                        seen.append(nul)
                if fresh:
                    n_states += 1
                    stack.append((i, state))
                    state, dl, ul = new, ndl, nul
                    for x in (entry, ret_node[i]):  # lift the call and its return out of the list
                        if x >= 0:
                            nxt[prv[x]] = nxt[x]
                            prv[nxt[x]] = prv[x]
                    if definite[i]:
                        remaining -= 1
                    entry, phase = nxt[0], 0
                    continue
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
    concurrent, before = _context_ops(sops, bad)
    tail_ops = [sops[j] for j in best_tail]
    states = ", ".join(sorted(repr(s) for s in best_states))
    parts = [
        f"key {key!r}: not linearizable ({n} ops searched, {n_states} states). No linearization gets",
        f"past this op (the longest reached {best_depth} of {n_def} definite ops):",
        f"  {bad.describe()}",
        f"when its answer came, the register held one of {{{states}}} in the longest partial orders.",
    ]
    if tail_ops:
        parts += ["The longest partial linearization ended with:", _fmt_ops(tail_ops)]
    if before:
        parts += ["Last mutations acknowledged before it started:", _fmt_ops(before)]
    if concurrent:
        parts += ["Ops concurrent with it:", _fmt_ops(concurrent)]
    failing = [bad, *before, *concurrent]
    return KeyResult(key, "violation", "\n".join(parts), n, n_states, elapsed, failing)


def check(
    history: Iterable[Op],
    initial: Mapping[Hashable, Any] | None = None,
    timeout_s: float = 60.0,
    key_timeout_s: float | None = None,
    max_states_per_key: int = 1_000_000,
) -> Result:
    """Check that ``history`` is linearizable, key by key, for a register model.

    ``initial`` maps keys to their value before the history (missing keys start absent, None).
    ``timeout_s`` bounds the whole check; ``key_timeout_s`` (default: ``timeout_s``) and
    ``max_states_per_key`` bound each key. Keys are checked smallest first; a key the budget runs
    out on is reported as timed out (status ``"timeout"``), never as a pass.
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
