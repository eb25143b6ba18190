"""The verdicts of the linearizability checker (:mod:`cli.workload.verify.linearizability`): one per
key, one per history, and the op listings their explanations are made of."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cli.workload.verify.history import Op


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
        names = ("ok", "status", "key", "explanation", "ops_checked", "keys_checked", "bad_keys")
        out = {name: getattr(self, name) for name in names}
        out["timed_out_keys"] = self.timed_out_keys
        out["failing_ops"] = [op.describe() for op in self.failing_ops]
        out["elapsed_s"] = round(self.elapsed_s, 3)
        return out


def format_ops(ops: Iterable[Op], indent: str = "  ") -> str:
    """One op per line, indented (for explanations)."""
    return "\n".join(indent + op.describe() for op in ops)


def context_ops(ops: list[Op], bad: Op, limit: int = 8) -> tuple[list[Op], list[Op]]:
    """Ops concurrent with ``bad``, and the last mutations that completed before it started."""
    concurrent = [o for o in ops if o is not bad and o.start <= bad.end_time and bad.start <= o.end_time]
    before = [o for o in ops if o.end_time < bad.start and o.kind != "read" and o.outcome == "ok"]
    before.sort(key=lambda o: o.end_time)
    return concurrent[:limit], before[-3:]
