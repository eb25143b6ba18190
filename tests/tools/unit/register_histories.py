"""Register histories for the verifier tests: compact op builders (W, R, CAS, INS, UPD, DEL) and a
simulated correct (linearizable) register store."""

from __future__ import annotations

import random
from typing import Any

from cli.workload.verify import Op

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
