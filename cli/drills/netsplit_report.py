"""Pure policy of ``rangetable drill netsplit``: gaps between acknowledged writes, the verdict of each
fault, the overall verdict and the text report. No I/O here; the orchestration is in cli/drills/netsplit.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cli.workload.verify.explain import failure_lines

SERVED_WITHIN_S = 3.0  # a cut server's ranges answer elsewhere at most this long after its lease ran out
NO_OUTAGE_GAP_S = 1.0  # "no outage": writes never stop for longer than this
RECOVER_WITHIN_S = 10.0  # writes resume at most this long after a long cut is healed
PROBE_SLACK_S = 0.3  # the fence probe asks every 100 ms, and each round may wait for two answers


def longest_gap(times: Iterable[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] with no time in ``times`` (the window's edges count)."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return round(max(b - a for a, b in zip(edges, edges[1:], strict=False)), 3) if end > start else 0.0


def in_ranges(pk: str, ranges: list[dict]) -> bool:
    """True when PartitionKey ``pk`` falls in one of ``ranges`` (``low`` inclusive, ``high`` exclusive, None open)."""
    return any((r.get("low") or "") <= pk and (r.get("high") is None or pk < r["high"]) for r in ranges)


def ack_times(acks: list[list], *, endpoint: str | None = None, ranges: list[dict] | None = None) -> list[float]:
    """Times of acknowledged writes ``[t, endpoint, pk]``, optionally through one endpoint or into some ranges."""
    return [t for t, ep, pk in acks
            if (endpoint is None or ep == endpoint) and (ranges is None or in_ranges(pk, ranges))]


def first_after(times: Iterable[float], t: float) -> float | None:
    """Seconds from ``t`` to the first time after it, or None."""
    later = [x for x in times if x > t]
    return round(min(later) - t, 3) if later else None


def fence_summary(rounds: list[list], t_cut: float, lease_s: float) -> dict[str, Any]:
    """What the probe in a cut server's namespace saw: when the server said its lease had lapsed
    (seconds after the cut) and how many data requests it answered after its lease."""
    lapsed = next((t for t, lease, _got in rounds if t > t_cut and lease is False), None)
    answered = [t for t, _lease, got in rounds if t > t_cut + lease_s and got == "ok"]
    return {"lease_lapsed_after_cut_s": None if lapsed is None else round(lapsed - t_cut, 3),
            "answered_after_lease": len(answered), "probe_rounds": len(rounds)}


def fault_problems(f: dict[str, Any]) -> list[str]:
    """Why one fault's result fails (empty: it passed)."""
    p = []
    if f.get("error"):
        p.append(f"the drill failed: {f['error']}")
        return p
    if f["lost_writes"]:
        p.append(f"{f['lost_writes']} acknowledged writes lost")
    if f["duplicate_applications"]:
        p.append(f"{f['duplicate_applications']} duplicate applications")
    if not f["linearizable"]:
        p.append("history not linearizable")
    if f["converged_after_heal_s"] is None:
        p.append("the map did not converge after the heal (a range not serving on a live server)")
    kind = f["fault"]
    if kind == "partition-server":
        fence = f["fence"]
        lapsed = fence["lease_lapsed_after_cut_s"]
        if lapsed is None:
            p.append(f"{f['target']} never said its lease had lapsed")
        elif lapsed > f["lease_s"] + PROBE_SLACK_S:
            p.append(f"{f['target']} said its lease lapsed only {lapsed} s after the cut (lease {f['lease_s']} s)")
        if fence["answered_after_lease"]:
            p.append(f"{f['target']} answered {fence['answered_after_lease']} data requests after its lease")
        if f["acked_by_cut_server"]:
            p.append(f"{f['acked_by_cut_server']} writes acknowledged by {f['target']} after its lease")
        after = f["served_after_lease_s"]
        if after is None or after > SERVED_WITHIN_S:
            p.append(f"its ranges were not served elsewhere within {SERVED_WITHIN_S} s of its lease (took {after})")
        if f["rejoined_after_heal_s"] is None:
            p.append(f"{f['target']} did not rejoin after the heal")
    elif kind == "coordinator-short":
        if f["gap_s"] > NO_OUTAGE_GAP_S:
            p.append(f"writes stopped for {f['gap_s']} s (no outage allows {NO_OUTAGE_GAP_S} s)")
    elif kind == "coordinator-long":
        r = f["writes_resumed_after_heal_s"]
        if r is None or r > RECOVER_WITHIN_S:
            p.append(f"writes did not resume within {RECOVER_WITHIN_S} s of the heal (took {r})")
    elif kind == "frontend":
        if f["other_frontend_gap_s"] > NO_OUTAGE_GAP_S:
            p.append(f"writes through the other frontend stopped for {f['other_frontend_gap_s']} s")
        if f["writes_resumed_after_heal_s"] is None:
            p.append(f"writes through {f['target']} did not resume after the heal")
    return p


def verdict(faults: list[dict[str, Any]]) -> bool:
    """True when every fault passed (and there was at least one)."""
    return bool(faults) and all(not fault_problems(f) for f in faults)


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x} s"


def format_report(r: dict[str, Any]) -> str:
    """The drill's report as text; its last line is PASS or FAIL."""
    lines = [f"netsplit drill: {r['hosts']} namespaces on {r['subnet']}, lease {r['lease_s']} s, "
             f"cuts of {r['fault_seconds']} s, seed {r['seed']}"]
    for f in r["faults"]:
        lines.append(f"- {f['fault']}: cut {f['target']} ({f.get('address', '?')}) for {f.get('cut_s', '?')} s")
        if f.get("error"):
            lines.append(f"    error: {f['error']}")
        else:
            c = f["client"]
            lines.append(f"    client: {c['ops']} ops, {c['ok']} ok, {c['unknown']} unknown; "
                         f"gap (no acknowledged write) {f['gap_s']} s")
            if f["fault"] == "partition-server":
                fence = f["fence"]
                lines.append(f"    {f['target']} fenced itself {_fmt(fence['lease_lapsed_after_cut_s'])} after the cut "
                             f"(probe from its namespace: {fence['answered_after_lease']} data requests answered "
                             f"after its lease); client writes acknowledged by it after its lease: "
                             f"{f['acked_by_cut_server']}")
                lines.append(f"    its {f['ranges_on_target']} ranges served elsewhere {_fmt(f['served_after_cut_s'])} "
                             f"after the cut ({_fmt(f['served_after_lease_s'])} after its lease); "
                             f"gap on them {f['target_ranges_gap_s']} s; rejoined "
                             f"{_fmt(f['rejoined_after_heal_s'])} after the heal")
            elif f["fault"] == "coordinator-long":
                lines.append(f"    writes resumed {_fmt(f['writes_resumed_after_heal_s'])} after the heal")
            elif f["fault"] == "frontend":
                lines.append(f"    gap through the other frontend {f['other_frontend_gap_s']} s; through "
                             f"{f['target']} {f['target_gap_s']} s, resumed "
                             f"{_fmt(f['writes_resumed_after_heal_s'])} after the heal")
            lines.append(f"    map converged (every range serving on a live server) "
                         f"{_fmt(f['converged_after_heal_s'])} after the heal")
            lines.append(f"    acknowledged writes lost {f['lost_writes']}, duplicates {f['duplicate_applications']}, "
                         f"linearizable {'yes' if f['linearizable'] else 'NO'} ({f['history_ops']} ops)")
        problems = fault_problems(f)
        lines.append("    ok" if not problems else "    FAILED: " + "; ".join(problems))
        if problems and not f.get("error"):
            lines += ["      " + x for x in failure_lines(f, f.get("injected", []))]
    lines.append("PASS" if r["passed"] else "FAIL")
    return "\n".join(lines)
