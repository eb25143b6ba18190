"""Acknowledged-write-loss and duplicate-application checkers.

:func:`check_ack_loss` compares a history with the state read back at the end: every write that got
a success answer must be there with the last acknowledged value of its key, unless an op that may
legitimately take effect after it (an unknown op, or an acknowledged one concurrent with it)
overwrote it. It computes, per key, the set of values the final state may legally hold:

- the value of every acknowledged mutation not superseded in real time, i.e. with no acknowledged
  mutation of the key invoked after it completed (deletes count, with value None);
- the value of every mutation whose answer never came (``unknown``): it may have taken effect last;
- the initial value, if no mutation of the key was acknowledged.

This over-approximates (it ignores the preconditions of unknown conditional writes); the
linearizability checker does the exact work. A final value outside the set is reported in ``lost``.

:func:`check_counters` checks an exactly-once counter workload: each increment request is applied
once, so the final count lies between the acknowledged increments and those plus the unknown ones.
More means a request was applied twice (``duplicates``), fewer that an acknowledged one was lost.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cli.workload.verify.history import Op, by_key, freeze


@dataclass
class LostWrite:
    """A key whose final value is not one the history allows.

    ``kind`` is ``"absent"`` (the key is gone though no delete could explain it), ``"stale"`` (an
    older, superseded value is back: the later acknowledged writes were lost, or an old write was
    replayed), ``"failed_applied"`` (the value was written only by ops answered as failed) or
    ``"foreign"`` (no op wrote that value).
    """

    key: Hashable
    final: Any
    allowed: list[Any]
    last_acked: list[Op]
    kind: str
    note: str = ""

    def describe(self) -> str:
        """A human-readable paragraph about this loss."""
        acked = "; ".join(op.describe() for op in self.last_acked) or "none"
        note = f" ({self.note})" if self.note else ""
        return (
            f"key {self.key!r}: final value {self.final!r} [{self.kind}]{note}; allowed "
            f"{self.allowed!r}; last acknowledged: {acked}"
        )


@dataclass
class CounterAnomaly:
    """A counter whose final value is outside ``[low, high]`` = initial + ok .. initial + ok + unknown."""

    key: Hashable
    final: int
    ok: int
    unknown: int
    low: int
    high: int

    def describe(self) -> str:
        """A human-readable line about this counter."""
        if self.final > self.high:
            what = f"{self.final - self.high} increment(s) applied twice"
        else:
            what = f"{self.low - self.final} acknowledged increment(s) lost"
        return (
            f"counter {self.key!r}: final {self.final}, expected {self.low}..{self.high} "
            f"({self.ok} ok, {self.unknown} unknown increments): {what}"
        )


@dataclass
class AckResult:
    """Verdict of :func:`check_ack_loss` or :func:`check_counters`; ``ok`` iff nothing lost or duplicated."""

    lost: list[Any]
    duplicates: list[Any]
    ok: bool
    summary: str
    keys_checked: int = 0
    acked: int = field(default=0)

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (for ``rangetable drill --json``)."""
        return {
            "ok": self.ok,
            "summary": self.summary,
            "lost": [x.describe() for x in self.lost],
            "duplicates": [x.describe() for x in self.duplicates],
            "keys_checked": self.keys_checked,
            "acked": self.acked,
        }


def _allowed_final(ops: list[Op], initial: Any) -> tuple[set[Any], list[Op]]:
    """The values the key may legally hold at the end, and the acknowledged mutations that allow them."""
    ok_writers = [op for op in ops if op.is_mutation and op.outcome == "ok"]
    unknown_writers = [op for op in ops if op.is_mutation and op.outcome == "unknown"]
    latest_start = max((op.start for op in ok_writers), default=float("-inf"))
    last_acked = [op for op in ok_writers if op.end_time >= latest_start]
    allowed = {freeze(op.value) for op in last_acked}
    allowed |= {freeze(op.value) for op in unknown_writers}
    if not ok_writers:
        allowed.add(initial)
    return allowed, last_acked


def _classify(ops: list[Op], final: Any, initial: Any) -> tuple[str, str]:
    """Why ``final`` is not allowed: the ``kind`` and a note for :class:`LostWrite`."""
    if final is None:
        return "absent", "an acknowledged write vanished"
    writers = [op for op in ops if op.is_mutation and freeze(op.value) == final]
    if any(op.outcome == "ok" for op in writers) or final == initial:
        older = [op for op in writers if op.outcome == "ok"]
        since = f" written by {older[-1].describe()}" if older else " (the initial value)"
        return "stale", f"superseded value{since} is back: later acknowledged writes lost, or it was replayed"
    if writers:
        return "failed_applied", "written only by ops answered as failed: " + "; ".join(
            op.describe() for op in writers
        )
    return "foreign", "no operation wrote this value"


def check_ack_loss(
    history: Iterable[Op],
    final_state: Mapping[Hashable, Any],
    initial: Mapping[Hashable, Any] | None = None,
) -> AckResult:
    """Check that every acknowledged write survives, with the last acknowledged value of its key.

    ``final_state`` maps keys to the value read back at the end; a key missing from it is absent
    (None). Keys only in ``final_state`` must hold their ``initial`` value (default: absent).
    ``duplicates`` is always empty here (a replayed register write is indistinguishable from a lost
    later one and shows up in ``lost`` as ``"stale"``); see :func:`check_counters`.
    """
    initial = initial or {}
    per_key = by_key(op for op in history if op.outcome != "aborted")
    lost: list[LostWrite] = []
    acked = 0
    for key, ops in per_key.items():
        init = freeze(initial.get(key))
        acked += sum(1 for op in ops if op.is_mutation and op.outcome == "ok")
        allowed, last_acked = _allowed_final(ops, init)
        final = freeze(final_state.get(key))
        if final not in allowed:
            kind, note = _classify(ops, final, init)
            allowed_list = sorted(allowed, key=repr)
            lost.append(LostWrite(key, final, allowed_list, last_acked, kind, note))
    for key, value in final_state.items():
        if key in per_key:
            continue
        final, init = freeze(value), freeze(initial.get(key))
        if final != init:
            lost.append(LostWrite(key, final, [init], [], "foreign", "key untouched by the history"))
    keys = len(per_key.keys() | final_state.keys())
    if lost:
        summary = f"{len(lost)} of {keys} keys lost acknowledged writes:\n" + "\n".join(
            "  " + x.describe() for x in lost[:10]
        )
        if len(lost) > 10:
            summary += f"\n  ... and {len(lost) - 10} more"
    else:
        summary = f"no acknowledged write lost ({acked} acknowledged mutations over {keys} keys)"
    return AckResult(lost, [], not lost, summary, keys, acked)


_RANK = {"ok": 2, "unknown": 1, "fail": 0, "aborted": 0}


def check_counters(
    increments: Iterable[tuple[Hashable, Hashable, str]],
    final: Mapping[Hashable, int],
    initial: Mapping[Hashable, int] | None = None,
) -> AckResult:
    """Check an exactly-once counter workload.

    ``increments`` lists ``(key, op_id, outcome)`` for each increment request (an op id seen more
    than once, e.g. once per retry, counts once with its best outcome: ok > unknown > fail).
    ``final`` maps counters to their value at the end (missing: the initial value, default 0). The
    final value must lie in ``[initial + ok, initial + ok + unknown]``: above is reported in
    ``duplicates``, below in ``lost``.
    """
    initial = initial or {}
    best: dict[tuple[Hashable, Hashable], str] = {}
    for key, op_id, outcome in increments:
        if outcome not in _RANK:
            raise ValueError(f"unknown outcome {outcome!r}")
        prev = best.get((key, op_id))
        if prev is None or _RANK[outcome] > _RANK[prev]:
            best[(key, op_id)] = outcome
    counts: dict[Hashable, list[int]] = {}
    for (key, _), outcome in best.items():
        c = counts.setdefault(key, [0, 0])
        if outcome == "ok":
            c[0] += 1
        elif outcome == "unknown":
            c[1] += 1
    lost: list[CounterAnomaly] = []
    dups: list[CounterAnomaly] = []
    acked = 0
    for key in counts.keys() | final.keys():
        ok, unknown = counts.get(key, [0, 0])
        acked += ok
        init = initial.get(key, 0)
        value = final.get(key, init)
        low, high = init + ok, init + ok + unknown
        if value < low:
            lost.append(CounterAnomaly(key, value, ok, unknown, low, high))
        elif value > high:
            dups.append(CounterAnomaly(key, value, ok, unknown, low, high))
    n = len(counts.keys() | final.keys())
    if lost or dups:
        lines = [x.describe() for x in (dups + lost)[:10]]
        summary = f"{len(dups)} counters over-applied, {len(lost)} lost increments:\n  " + "\n  ".join(lines)
    else:
        summary = f"counters exact: {n} counters, {acked} acknowledged increments, none lost or doubled"
    return AckResult(lost, dups, not (lost or dups), summary, n, acked)


def combine(*results: AckResult) -> AckResult:
    """Merge several verdicts (e.g. the register check and the counter check of one drill)."""
    lost = [x for r in results for x in r.lost]
    dups = [x for r in results for x in r.duplicates]
    ok = all(r.ok for r in results)
    summary = "\n".join(r.summary for r in results)
    return AckResult(
        lost, dups, ok, summary, sum(r.keys_checked for r in results), sum(r.acked for r in results)
    )
