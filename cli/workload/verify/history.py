"""The history model the verifiers check, and a thread-safe recorder that workloads write it with.

A history is a list of :class:`Op` records, one per client operation. Each names the key it touched,
what kind of operation it was, the value it wrote (or, for a read, the value it returned; ``None``
stands for "absent"), and the interval in which it ran: ``start`` when it was invoked and ``end``
when its answer came (``None`` when the answer never came).

Operation kinds, as a register model (values stand for ETags: a workload writes unique values, so
ETag equality is value equality):

``read``
    Returned ``value`` (``None``: the entity was absent).
``write``
    Unconditional put of ``value`` (insert-or-replace).
``cas``
    Conditional write: set ``value`` only if the current value equals ``expected`` (If-Match with
    the ETag of ``expected``). ``value=None`` is a conditional delete.
``insert``
    Write ``value`` only if the key is absent (409 EntityAlreadyExists otherwise).
``update``
    Write ``value`` only if the key is present (If-Match ``*``; 404 otherwise).
``delete``
    Unconditional delete: the value becomes ``None``. A 404 answer is recorded as ``fail`` and
    means the key was absent.

Outcomes:

``ok``
    The operation took effect (for a read: it returned ``value``).
``fail``
    Definitely not applied because its precondition did not hold (412, 409, 404): checked as
    evidence about the state (a failed ``cas`` saw a value other than ``expected``, a failed
    ``insert`` saw a present value, a failed ``update`` or ``delete`` saw an absent one). A failed
    unconditional ``write`` or ``read`` carries no information and is ignored.
``unknown``
    Timeout, connection lost, 503 after the deadline: may or may not have taken effect, at any
    time after ``start``.
``aborted``
    Definitely not applied for a reason unrelated to the state (400, throttled before execution):
    ignored by the checkers.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

KINDS = frozenset({"read", "write", "cas", "insert", "update", "delete"})
MUTATIONS = frozenset({"write", "cas", "insert", "update", "delete"})
OUTCOMES = frozenset({"ok", "fail", "unknown", "aborted"})


@dataclass(slots=True)
class Op:
    """One client operation of a history (see the module docstring for the meaning of the fields)."""

    id: int
    key: Hashable
    kind: str
    value: Any = None
    expected: Any = None
    start: float = 0.0
    end: float | None = None
    outcome: str = "unknown"
    process: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"op {self.id}: unknown kind {self.kind!r} (one of {sorted(KINDS)})")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"op {self.id}: unknown outcome {self.outcome!r} (one of {sorted(OUTCOMES)})")
        if self.kind == "delete" and self.value is not None:
            raise ValueError(f"op {self.id}: a delete writes no value")

    @property
    def end_time(self) -> float:
        """When the operation is known to have finished: ``end``, or +inf if its answer never came."""
        if self.outcome == "unknown" or self.end is None:
            return math.inf
        return self.end

    @property
    def is_mutation(self) -> bool:
        """True for the kinds that can change the value (everything but ``read``)."""
        return self.kind in MUTATIONS

    def may_have_applied(self) -> bool:
        """True when the op is a mutation that took effect or may have (``ok`` or ``unknown``)."""
        return self.kind in MUTATIONS and self.outcome in ("ok", "unknown")

    def describe(self) -> str:
        """A one-line human description, e.g. ``#12 cas 'a'->'b' ok [1.000, 1.020] p3``."""
        if self.kind == "read":
            what = f"read -> {self.value!r}"
        elif self.kind == "cas":
            what = f"cas {self.expected!r} -> {self.value!r}"
        elif self.kind == "delete":
            what = "delete"
        else:
            what = f"{self.kind} {self.value!r}"
        end = "inf" if self.end is None else f"{self.end:.6f}"
        proc = "" if self.process is None else f" p{self.process}"
        return f"#{self.id} {what} {self.outcome} [{self.start:.6f}, {end}]{proc}"


def freeze(value: Any) -> Hashable:
    """Turn ``value`` into a hashable equal-for-equal form (dicts and lists become sorted tuples)."""
    if isinstance(value, dict):
        return tuple(sorted((freeze(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(freeze(v) for v in value)
    return value


def by_key(history: Iterable[Op]) -> dict[Hashable, list[Op]]:
    """Split a history into per-key histories, keeping each key's ops in the original order."""
    out: dict[Hashable, list[Op]] = {}
    for op in history:
        out.setdefault(op.key, []).append(op)
    return out


class Recorder:
    """Thread-safe history recorder for workload threads.

    ``op_id = rec.invoke(key, kind, value=..., expected=...)`` just before sending a request and
    ``rec.complete(op_id, outcome, value=...)`` once its answer is known (``value`` is what a read
    returned). Ops never completed appear in :meth:`history` as ``unknown`` with ``end=None``.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._done: list[bool] = []

    def invoke(
        self, key: Hashable, kind: str, value: Any = None, expected: Any = None, process: Any = None
    ) -> int:
        """Record the invocation of an operation; returns its id for :meth:`complete`."""
        if process is None:
            process = threading.get_ident()
        with self._lock:
            op_id = len(self._ops)
            op = Op(op_id, key, kind, value=value, expected=expected, start=self._clock(), process=process)
            self._ops.append(op)
            self._done.append(False)
        return op_id

    def complete(self, op_id: int, outcome: str, value: Any = None) -> None:
        """Record the answer of operation ``op_id``: ``outcome`` and, for a read, the value it returned.

        ``outcome="unknown"`` leaves ``end`` unset: the op may take effect at any later time.
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        with self._lock:
            now = self._clock()
            if not 0 <= op_id < len(self._ops):
                raise KeyError(f"no such op {op_id}")
            if self._done[op_id]:
                raise ValueError(f"op {op_id} completed twice")
            op = self._ops[op_id]
            new_value = value if op.kind == "read" else op.value
            end = None if outcome == "unknown" else now
            self._ops[op_id] = replace(op, outcome=outcome, end=end, value=new_value)
            self._done[op_id] = True

    def history(self) -> list[Op]:
        """A snapshot of the history so far (copies; pending ops are ``unknown``)."""
        with self._lock:
            return [replace(op) for op in self._ops]

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)


def op_to_dict(op: Op) -> dict[str, Any]:
    """A JSON-friendly dict for ``op`` (tuples become lists)."""
    return {
        "id": op.id,
        "key": op.key,
        "kind": op.kind,
        "value": op.value,
        "expected": op.expected,
        "start": op.start,
        "end": op.end,
        "outcome": op.outcome,
        "process": op.process,
    }


def op_from_dict(d: dict[str, Any]) -> Op:
    """Inverse of :func:`op_to_dict`; JSON lists in keys and values come back as tuples."""
    return Op(
        id=d["id"],
        key=freeze(d["key"]),
        kind=d["kind"],
        value=freeze(d.get("value")),
        expected=freeze(d.get("expected")),
        start=d.get("start", 0.0),
        end=d.get("end"),
        outcome=d.get("outcome", "unknown"),
        process=d.get("process"),
    )


def dump_history(history: Iterable[Op], path: str | Path) -> None:
    """Write a history as JSON lines (one op per line), e.g. to replay a failed drill's check."""
    with open(path, "w", encoding="utf-8") as f:
        for op in history:
            f.write(json.dumps(op_to_dict(op), default=repr) + "\n")


def load_history(path: str | Path) -> list[Op]:
    """Read a history written by :func:`dump_history`."""
    with open(path, encoding="utf-8") as f:
        return [op_from_dict(json.loads(line)) for line in f if line.strip()]
