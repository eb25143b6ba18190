"""A drill's FAIL, explained: what the checkers found, the faults injected around it, and where the history is.

Every drill runs the verifying workload (:mod:`cli.workload.generator`), whose ``verify()`` returns a
verdict dict. :func:`failure_lines` turns a failed verdict into the text a drill prints under its
FAIL line:

- lost acknowledged writes, with the first few of them;
- duplicate applications of a retried request;
- for a linearizability failure, whether the checker found a **violation** (the key, the operation
  no linearization gets past, the operations around it with their times and results, and the
  faults injected in that window) or ran out of its **time budget** (the keys, and how many
  operations each had: a timeout is never a pass);
- where the history was kept, to re-run the checker on it offline (``rangetable verify history``).

Times are seconds since the workload started (the history's clock); a drill passes its faults as
``{"t": start, "until": end or None, "what": description}`` on the same clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cli.workload.verify.history import Op, by_key
from cli.workload.verify.verdict import Result

WINDOW_MARGIN_S = 3.0
"""Faults this long before the failing operations began still count as "in the window" (a lease,
a takeover and a retry deadline all take a few seconds to play out)."""



def lin_verdict(history: list[Op], result: Result, detail_chars: int | None = None) -> dict[str, Any]:
    """The linearizability checker's ``result`` as the verdict fields :func:`failure_lines` reads
    (``detail_chars`` bounds the explanation's length, for reports that travel as JSON)."""
    detail = "" if result.ok else result.explanation[:detail_chars]
    return {
        "linearizable": bool(result.ok),
        "linearizability": result.status,
        "linearizability_key": result.key,
        "linearizability_detail": detail,
        "linearizability_window": failing_window(result.failing_ops),
        "linearizability_timeouts": timeout_sizes(history, result.timed_out_keys),
        "linearizability_s": round(result.elapsed_s, 3),
    }

def failing_window(ops: list[Op]) -> list[float] | None:
    """``[first start, last answer]`` of the ops a violation names (None when there are none)."""
    if not ops:
        return None
    ends = [o.end_time for o in ops if o.end_time != float("inf")]
    lo = min(o.start for o in ops)
    return [round(lo, 3), round(max(ends, default=lo), 3)]


def timeout_sizes(history: list[Op], keys: list[Any]) -> list[dict[str, Any]]:
    """For each key the checker could not decide: its number of ops and of unknown ops."""
    if not keys:
        return []
    per_key = by_key(history)
    return [{"key": k, "ops": len(per_key.get(k, [])),
             "unknown": sum(o.outcome == "unknown" for o in per_key.get(k, []))} for k in keys]


def faults_in_window(faults: Iterable[dict[str, Any]], lo: float, hi: float,
                     margin: float = WINDOW_MARGIN_S) -> list[dict[str, Any]]:
    """The faults whose interval overlaps ``[lo - margin, hi]``."""
    out = []
    for f in faults:
        start = f["t"]
        end = f.get("until")
        end = start if end is None else end
        if start <= hi and end >= lo - margin:
            out.append(f)
    return out


def describe_fault(f: dict[str, Any]) -> str:
    """``t=12.30-15.30 s  paused ps-2 …`` for one fault."""
    until = f.get("until")
    span = f"t={f['t']:.2f} s" if until is None or until - f["t"] < 0.01 else f"t={f['t']:.2f}-{until:.2f} s"
    return f"{span}  {f['what']}"


def coordinator_events(events: Iterable[dict[str, Any]], wall0: float) -> list[dict[str, Any]]:
    """The coordinator's events (its ``events`` op) on the history's clock, shaped as faults are: ``t`` when one
    began (its wall time, less its duration, less ``wall0``: the wall clock at the history's start), ``until``
    when it was recorded, ``what`` in one line (its kind, then its fields)."""
    out = []
    for ev in events:
        end = float(ev["time"]) - wall0
        fields = " ".join(f"{k}={v}" for k, v in ev.items() if k not in ("seq", "time", "kind", "duration_ms"))
        out.append({"t": round(end - float(ev.get("duration_ms") or 0) / 1000, 3), "until": round(end, 3),
                    "what": f"{ev['kind']} {fields}"})
    return out


def event_lines(events: Iterable[dict[str, Any]], window: list[float] | None, indent: str = "  ") -> list[str]:
    """What the coordinator recorded around a violation's ``window`` (:func:`coordinator_events`): the map
    changes (promotions, failovers, in-sync sets, splits, merges, moves) the operations may have crossed."""
    if not window:
        return []
    near = faults_in_window(events, window[0], window[1])
    return [f"the coordinator's events in that window: {len(near)}", *(indent + describe_fault(e) for e in near)]


def window_lines(faults: Iterable[dict[str, Any]], window: tuple[float, float], indent: str = "  ") -> list[str]:
    """``faults in the window t=…`` and one line per fault that overlaps ``window`` (a failure's explanation)."""
    lo, hi = window
    near = faults_in_window(faults, lo, hi)
    return [f"{indent}faults in the window t={lo:.2f}-{hi:.2f} s (and {WINDOW_MARGIN_S:.0f} s before): {len(near)}",
            *(indent * 2 + describe_fault(x) for x in near)]


def failure_lines(verdict: dict[str, Any], faults: Iterable[dict[str, Any]] = (), indent: str = "  ",
                  events: Iterable[dict[str, Any]] = ()) -> list[str]:
    """The explanation of a failed verdict (empty when it passed), one line per list item; ``events``: the
    coordinator's (:func:`coordinator_events`), listed with the faults around a violation."""
    faults = list(faults)
    lines: list[str] = []
    if verdict.get("lost_writes"):
        lines.append(f"lost acknowledged writes: {verdict['lost_writes']}")
        lines += [f"{indent}{d}" for d in verdict.get("lost_detail", [])]
    if verdict.get("duplicate_applications"):
        lines.append(f"duplicate applications of a retried insert: {verdict['duplicate_applications']}")
    status = verdict.get("linearizability", "ok")
    if status == "violation":
        lines.append(f"linearizability: VIOLATION on key {verdict.get('linearizability_key')!r} "
                     f"(the checker decided it: this is a real anomaly, not a budget overrun)")
        lines += [indent + x for x in verdict.get("linearizability_detail", "").splitlines()]
        window = verdict.get("linearizability_window")
        if window:
            lo, hi = window
            near = faults_in_window(faults, lo, hi)
            lines.append(f"faults injected in the window t={lo:.2f}-{hi:.2f} s (and {WINDOW_MARGIN_S:.0f} s before): "
                         f"{len(near)}")
            lines += [indent + describe_fault(f) for f in near]
            lines += event_lines(events, window, indent)
    elif status == "timeout":
        lines.append("linearizability: checker TIMEOUT (undecided, which counts as a failure, not a pass)")
        for k in verdict.get("linearizability_timeouts", []):
            lines.append(f"{indent}key {k['key']!r}: {k['ops']} ops ({k['unknown']} unknown) not decided in the budget")
    if lines and verdict.get("history_file"):
        lines.append(f"history kept in {verdict['history_file']}")
        lines.append(f"{indent}re-check it offline: rangetable verify history {verdict['history_file']}")
    return lines


def slow_op_lines(slow_ops: Iterable[dict[str, Any]], faults: Iterable[dict[str, Any]], indent: str = "  ",
                  limit: int = 20) -> list[str]:
    """Each operation slower than the bound, slowest first, with the faults that overlapped it (or came
    just before) and how often the client itself retried (the rest of the wait was in a frontend)."""
    slow_ops = sorted(slow_ops, key=lambda o: o["t"] - o["until"])
    faults = list(faults)
    if not slow_ops:
        return []
    lines = [f"operations slower than 3 s: {len(slow_ops)} (slowest first)"]
    for op in slow_ops[:limit]:
        took = op["until"] - op["t"]
        err = f" ({op['error']})" if op.get("error") else ""
        lines.append(f"{indent}{op['what']} took {took:.2f} s, t={op['t']:.2f}-{op['until']:.2f} s, "
                     f"{op['outcome']}{err}, client retries {op.get('client_retries', 0)}")
        near = faults_in_window(faults, op["t"], op["until"])
        lines += [f"{indent}{indent}overlapping: {describe_fault(f)}" for f in near] or [
            f"{indent}{indent}no injected fault overlapped it"]
    if len(slow_ops) > limit:
        lines.append(f"{indent}… and {len(slow_ops) - limit} more")
    return lines
