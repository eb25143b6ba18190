"""Queries through a secondary index checked against the verified history: read-your-writes and no wrong row.

A query asks for the rows whose ``v`` lies in ``[lo, hi)`` (the drills' workload writes unique string values to
``v``) and ran in ``[start, end]`` on the history's clock. Against the history of the keys it could return:

* **wrong row** — a returned row whose value is outside ``[lo, hi)`` (an index hit not re-checked);
* **read-your-writes** — for each key, the last mutation acknowledged before the query started: when it wrote a
  value in range and no other mutation of the key that may have applied (``ok`` or ``unknown``) can be ordered
  after it before the query ended (it started before the query ended and had not ended when that one started),
  the answer must hold the key with that value.

Pure: the reader thread (:mod:`cli.workload.index_reader`) records queries, :func:`check_queries` judges them.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from cli.workload.verify.explain import window_lines
from cli.workload.verify.history import MUTATIONS, Op, freeze

SHOWN = 5  # violations explained


@dataclass(slots=True)
class IndexQuery:
    """One query through the index: its value range, when it ran, what it returned, whether the plan used it."""

    lo: str
    hi: str
    start: float
    end: float
    rows: dict[Hashable, Any]  # key -> value returned
    through: bool = True  # the answer's plan named the index

    @property
    def filter(self) -> str:
        """The query's $filter."""
        return f"v ge '{self.lo}' and v lt '{self.hi}'"

    def matches(self, value: Any) -> bool:
        """True when ``value`` satisfies the filter."""
        return isinstance(value, str) and self.lo <= value < self.hi


@dataclass(slots=True)
class IndexFailure:
    """One violation: its kind (``ryw`` or ``wrong``), key, explanation and window on the history's clock."""

    kind: str
    key: Hashable
    text: str
    window: tuple[float, float]


class _Key:
    """One key's mutations: the acknowledged ones by end time, all that may have applied by start time."""

    def __init__(self, ops: list[Op]) -> None:
        acked = sorted((o for o in ops if o.outcome == "ok" and o.end is not None), key=lambda o: o.end or 0.0)
        self.acked, self.acked_ends = acked, [o.end or 0.0 for o in acked]
        self.maybe = sorted((o for o in ops if o.may_have_applied()), key=lambda o: o.start)
        self.starts = [o.start for o in self.maybe]

    def required(self, q: IndexQuery) -> Op | None:
        """The write the answer must show, if any (see the module docstring)."""
        i = bisect.bisect_left(self.acked_ends, q.start) - 1
        if i < 0:
            return None
        last = self.acked[i]
        if last.value is None or not q.matches(last.value):
            return None
        for o in self.maybe[:bisect.bisect_left(self.starts, q.end)]:
            if o is not last and (o.end is None or o.end > last.start):
                return None
        return last


def check_queries(history: Iterable[Op], queries: list[IndexQuery]) -> tuple[dict[str, int], list[IndexFailure]]:
    """Judge the queries: counts (``queries``, ``through``, ``ryw``, ``wrong``, ``rows``) and the violations."""
    per_key: dict[Hashable, list[Op]] = {}
    for op in history:
        if op.kind in MUTATIONS:
            per_key.setdefault(freeze(op.key), []).append(op)
    keys = {k: _Key(ops) for k, ops in per_key.items()}
    fails: list[IndexFailure] = []
    for q in queries:
        for key, value in q.rows.items():
            if not q.matches(value):
                fails.append(IndexFailure("wrong", key, f"{q.filter} returned {key} with v={value!r}",
                                          (q.start, q.end)))
        for key, k in keys.items():
            w = k.required(q)
            if w is not None and q.rows.get(key) != w.value:
                got = "no row" if key not in q.rows else f"v={q.rows[key]!r}"
                fails.append(IndexFailure("ryw", key, f"{q.filter} at [{q.start:.3f}, {q.end:.3f}] s returned {got}\n"
                                                      f"acknowledged before it: {w.describe()}",
                                          (w.start, q.end)))
    counts = {"queries": len(queries), "through": sum(q.through for q in queries),
              "rows": sum(len(q.rows) for q in queries), "ryw": sum(f.kind == "ryw" for f in fails),
              "wrong": sum(f.kind == "wrong" for f in fails)}
    return counts, fails


def index_lines(v: dict[str, Any], faults: Iterable[dict[str, Any]] = (), indent: str = "  ") -> list[str]:
    """The explanation of failed index checks: each violation with the faults in its window, the check's
    differences."""
    faults = sorted(faults, key=lambda f: f["t"])
    lines: list[str] = []
    for f in v.get("failures", [])[:SHOWN]:
        head, *rest = f["text"].splitlines()
        lines.append(f"index FAIL: {'READ-YOUR-WRITES' if f['kind'] == 'ryw' else 'WRONG ROW'} key {f['key']} {head}")
        lines += [indent + x for x in rest]
        lines += window_lines(faults, f["window"], indent)
    if len(v.get("failures", [])) > SHOWN:
        lines.append(f"{indent}… and {len(v['failures']) - SHOWN} more index violations")
    chk = v.get("check") or {}
    if chk.get("error"):
        lines.append(f"index FAIL: check: {chk['error']}")
    elif chk.get("differences"):
        lines.append(f"index FAIL: check found {chk['differences']} differences: missing {chk.get('missing')}, "
                     f"extra {chk.get('extra')}, wrong {chk.get('wrong')}")
    return lines


def index_summary(v: dict[str, Any]) -> str:
    """The drills' one-line index check."""
    chk = v.get("check") or {}
    check = (f"check: failed ({chk['error']})" if chk.get("error") else
             f"check: {chk.get('differences', '?')} differences ({chk.get('entries', 0):,} entries)")
    return (f"index: {v['indexes']} index, {v['through']} queries through it ({v['queries'] - v['through']} not, "
            f"{v['errors']} failed), {v['ryw']} read-your-writes violations, {v['wrong']} wrong rows; {check}")
