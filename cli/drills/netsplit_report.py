"""Pure policy of ``rangetable drill netsplit``: gaps between acknowledged writes, the verdict of each fault,
the overall verdict and the text report. No I/O here; the orchestration is in cli/drills/netsplit.py and
cli/drills/netsplit_faults.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cli.workload.verify.explain import failure_lines
from rangetable.errors import code

SERVED_WITHIN_S = 3.0  # a cut primary's ranges answer elsewhere at most this long after its lease ran out
UNSERVED_MAX_S = 3.0  # the design's bound on a range going unserved (coordinator cut)
NO_OUTAGE_GAP_S = 1.0  # "invisible": acknowledged writes never stop for longer than this
RECOVER_WITHIN_S = 10.0  # writes resume at most this long after a heal
PROBE_SLACK_S = 0.3  # the fence probe asks every 100 ms, and each round may wait for two answers
TAKEOVER_SLACK_S = 1.0  # etcd expires a lease on its own tick, then the standby's watch fires and it loads the map
MIN_WENT_ON_S = 0.5  # etcd majority lost: writes must not stop at once (the leases still hold)
PROFILES = {"full": ["primary", "follower", "coordinator", "etcd-minority", "etcd-majority", "primary-and-etcd",
                     "host-lost"],
            "short": ["primary", "coordinator", "etcd-minority", "etcd-majority"]}


def longest_gap(times: Iterable[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] with no time in ``times`` (the window's edges count)."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return round(max(b - a for a, b in zip(edges, edges[1:], strict=False)), 3) if end > start else 0.0


def in_ranges(pk: str, ranges: list[dict]) -> bool:
    """True when PartitionKey ``pk`` falls in one of ``ranges`` (``low`` inclusive, ``high`` exclusive, None open)."""
    return any((r.get("low") or "") <= pk and (r.get("high") is None or pk < r["high"]) for r in ranges)


def acked_while_primary(acks: list[list], ranges: list[dict], primary_until: dict[str, float], since: float) -> list[float]:
    """Times of acknowledged writes ``[t, endpoint, pk]`` after ``since`` into a range of ``ranges`` while the map
    still named the cut server its primary (``primary_until``: range id → the last time it did): the writes the
    cut server may have acknowledged after its lease. Judged per range: once one range is served elsewhere,
    its writes are the new primary's, whatever the cut server's other ranges still show."""
    return [t for t, _ep, pk in acks for r in ranges
            if in_ranges(pk, [r]) and since < t <= primary_until.get(r["id"], since)]


def ack_times(acks: list[list], *, endpoint: str | None = None, ranges: list[dict] | None = None) -> list[float]:
    """Times of acknowledged writes ``[t, endpoint, pk]``, optionally through one endpoint or into some ranges."""
    return [t for t, ep, pk in acks
            if (endpoint is None or ep == endpoint) and (ranges is None or in_ranges(pk, ranges))]


def range_gaps(acks: list[list], ranges: list[dict], start: float, end: float) -> dict[str, float]:
    """Per range (by id): the longest stretch of [start, end] with no acknowledged write into it."""
    return {r["id"]: longest_gap(ack_times(acks, ranges=[r]), start, end) for r in ranges}


def first_after(times: Iterable[float], t: float) -> float | None:
    """Seconds from ``t`` to the first time after it, or None."""
    later = [x for x in times if x > t]
    return round(min(later) - t, 3) if later else None


def outage(times: Iterable[float], start: float, heal: float) -> tuple[float, float]:
    """The longest stop of acknowledged writes that began between ``start`` and ``heal``: (seconds from
    ``start`` until it began, how long it lasted, up to the first write after it or ``heal`` when none came)."""
    after = sorted(t for t in times if t >= start)
    edges = [start, *after] if after and after[-1] > heal else [start, *after, heal]
    best = (0.0, 0.0)
    for a, b in zip(edges, edges[1:], strict=False):
        if a <= heal and b - a > best[1]:
            best = (a - start, b - a)
    return round(best[0], 3), round(best[1], 3)


def client_errors(client: dict[str, Any]) -> int:
    """Operations the client saw fail for want of service: outcomes unknown, plus errors of status 5xx
    (a precondition failed or an entity not found is the workload's own business, not an error here)."""
    return int(client.get("unknown", 0)) + sum(
        n for name, n in (client.get("errors") or {}).items() if code(name).status >= 500)


def coordinator_events(events: list[dict], cut_wall: float, limit: int = 12) -> list[str]:
    """The coordinator's events about a fault's ranges (promotions, in-sync changes, re-replications), one line
    each with its time relative to the cut: what a failed fault's explanation shows."""
    out = []
    for e in events[:limit]:
        what = {k: e[k] for k in ("source", "target", "reason", "insync", "dropped", "added", "epoch") if e.get(k)}
        detail = ", ".join(f"{k} {','.join(v) if isinstance(v, list) else v}" for k, v in what.items())
        out.append(f"{e.get('time', cut_wall) - cut_wall:+.2f} s {e.get('kind')} {e.get('range')}: {detail}")
    if len(events) > limit:
        out.append(f"... and {len(events) - limit} more")
    return out


def fence_summary(rounds: list[list], t_cut: float, lease_s: float) -> dict[str, Any]:
    """What the probe in a cut server's namespace saw: when the server said its lease had lapsed
    (seconds after the cut) and how many data requests it answered after its lease."""
    lapsed = next((t for t, lease, _got in rounds if t > t_cut and lease is False), None)
    answered = [t for t, _lease, got in rounds if t > t_cut + lease_s and got == "ok"]
    return {"lease_lapsed_after_cut_s": None if lapsed is None else round(lapsed - t_cut, 3),
            "answered_after_lease": len(answered), "probe_rounds": len(rounds)}


def _primary_problems(f: dict[str, Any]) -> list[str]:
    p = []
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
    return p + _served_problems(f) + _rejoin_problems(f)


def _served_problems(f: dict[str, Any]) -> list[str]:
    after = f["served_after_lease_s"]
    if after is None or after > SERVED_WITHIN_S:
        return [f"its ranges were not served elsewhere within {SERVED_WITHIN_S} s of its lease (took {after})"]
    return []


def _rejoin_problems(f: dict[str, Any]) -> list[str]:
    p = []
    if f.get("rejoined_after_heal_s") is None:
        p.append(f"{f['target']} did not rejoin after the heal")
    elif "caught_up_after_heal_s" in f and f["caught_up_after_heal_s"] is None:
        p.append(f"{f['target']} did not catch up (back in the in-sync set of its ranges) after the heal")
    return p


def _kind_problems(f: dict[str, Any]) -> list[str]:
    kind, p = f["fault"], []
    if kind == "primary":
        p += _primary_problems(f)
    elif kind == "follower":
        if f["primaries_on_target"]:
            p.append(f"{f['target']} was still primary of {f['primaries_on_target']} ranges when cut")
        if f["client_errors"]:
            p.append(f"clients saw {f['client_errors']} errors ({f['client']['errors']})")
        p += _rejoin_problems(f)
    elif kind == "coordinator":
        led = f["standby_led_after_s"]
        if led is None or led > f["lease_s"] + TAKEOVER_SLACK_S:
            p.append(f"the standby did not lead within the lease of {f['lease_s']} s and {TAKEOVER_SLACK_S} s to "
                     f"take over (took {led})")
        if f["range_gap_s"] > UNSERVED_MAX_S:
            p.append(f"a range went unserved for {f['range_gap_s']} s (at most {UNSERVED_MAX_S} s)")
        if f["old_leader_standby_after_heal_s"] is None:
            p.append(f"{f['target']} did not come back as a standby after the heal")
    elif kind == "etcd-minority":
        if f["gap_s"] > NO_OUTAGE_GAP_S:
            p.append(f"writes stopped for {f['gap_s']} s (invisible allows {NO_OUTAGE_GAP_S} s)")
        if f["client_errors"]:
            p.append(f"clients saw {f['client_errors']} errors ({f['client']['errors']})")
        if not f["create_table_during_cut"]["ok"]:
            p.append(f"creating a table failed during the cut ({f['create_table_during_cut']['code']})")
    elif kind == "etcd-majority":
        if f["create_table_during_cut"]["ok"]:
            p.append("a table was created without an etcd quorum")
        if f["writes_went_on_s"] < MIN_WENT_ON_S:
            p.append(f"writes stopped {f['writes_went_on_s']} s after the cut (the leases still held)")
        r = f["writes_resumed_after_heal_s"]
        if r is None or r > RECOVER_WITHIN_S:
            p.append(f"writes did not resume within {RECOVER_WITHIN_S} s of the heal (took {r})")
        if f["create_table_after_heal_s"] is None:
            p.append("no table could be created after the heal")
    elif kind == "primary-and-etcd":
        p += _served_problems(f)
        if f["others_lease_lapses"]:
            p.append(f"other partition servers lost their lease: {f['others_lease_lapses']}")
        p += _rejoin_problems(f)
    elif kind == "host-lost":
        if f["rebuilt_after_cut_s"] is None:
            p.append(f"the lost replicas were not all rebuilt elsewhere (on {f['rebuilt_on']})")
        if f["rejoined_after_heal_s"] is None:
            p.append(f"the replacement {f['target']} did not rejoin")
    return p


def fault_problems(f: dict[str, Any]) -> list[str]:
    """Why one fault's result fails (empty: it passed)."""
    if f.get("error"):
        return [f"the drill failed: {f['error']}"]
    p = []
    if f["lost_writes"]:
        p.append(f"{f['lost_writes']} acknowledged writes lost")
    if f["duplicate_applications"]:
        p.append(f"{f['duplicate_applications']} duplicate applications")
    if not f["linearizable"]:
        p.append("history not linearizable")
    if f["converged_after_heal_s"] is None:
        p.append("the map did not converge after the heal (a range not serving on a live server)")
    return p + _kind_problems(f)


def verdict(faults: list[dict[str, Any]]) -> bool:
    """True when every fault passed (and there was at least one)."""
    return bool(faults) and all(not fault_problems(f) for f in faults)


def _s(x: Any) -> str:
    return "-" if x is None else f"{x} s"


def _create(c: dict[str, Any]) -> str:
    return f"ok in {c['after_s']} s" if c["ok"] else f"failed with {c['code']} after {c['after_s']} s"


def fault_figures(f: dict[str, Any]) -> list[str]:
    """The fault's own figures, as report lines."""
    kind = f["fault"]
    if kind == "primary":
        fence = f["fence"]
        return [f"{f['target']} fenced itself {_s(fence['lease_lapsed_after_cut_s'])} after the cut (probe from its "
                f"namespace: {fence['answered_after_lease']} data requests answered after its lease); client "
                f"writes acknowledged by it after its lease: {f['acked_by_cut_server']}",
                f"its {f['ranges_on_target']} primaries served elsewhere {_s(f['served_after_cut_s'])} after the cut "
                f"({_s(f['served_after_lease_s'])} after its lease); gap on them {f['target_ranges_gap_s']} s",
                f"rejoined {_s(f['rejoined_after_heal_s'])} after the heal, caught up (in sync again) "
                f"{_s(f['caught_up_after_heal_s'])} after it"]
    if kind == "follower":
        return [f"{f['target']} follows {f['ranges_followed']} ranges, primary of {f['primaries_on_target']}; client "
                f"errors {f['client_errors']}; rejoined {_s(f['rejoined_after_heal_s'])}, caught up "
                f"{_s(f['caught_up_after_heal_s'])} after the heal"]
    if kind == "coordinator":
        return [f"standby {f['standby']} led {_s(f['standby_led_after_s'])} after the cut (lease {f['lease_s']} s); "
                f"longest a range went unserved {f['range_gap_s']} s; {f['target']} answered as a standby "
                f"{_s(f['old_leader_standby_after_heal_s'])} after the heal"]
    if kind == "etcd-minority":
        t = f["coordinator_term"]
        return [f"etcd leader cut; create table during the cut: {_create(f['create_table_during_cut'])}; client "
                f"errors {f['client_errors']}; coordinator term {t[0]} -> {t[1]}"]
    if kind == "etcd-majority":
        return [f"create table during the cut: {_create(f['create_table_during_cut'])}",
                f"writes went on {f['writes_went_on_s']} s after the cut, then stopped for {f['writes_stopped_s']} s; "
                f"resumed {_s(f['writes_resumed_after_heal_s'])} after the heal; a table could be created "
                f"{_s(f['create_table_after_heal_s'])} after the heal",
                f"errors the client saw: {f['errors_seen'] or 'none'}"]
    if kind == "primary-and-etcd":
        lapses = ", ".join(f"{s} {n}x" for s, n in sorted(f["others_lease_lapses"].items())) or "none"
        return [f"its {f['ranges_on_target']} primaries served elsewhere {_s(f['served_after_cut_s'])} after the cut "
                f"({_s(f['served_after_lease_s'])} after its lease); other servers' leases lapsed: {lapses}",
                f"rejoined {_s(f['rejoined_after_heal_s'])} after the heal, caught up (in sync again) "
                f"{_s(f['caught_up_after_heal_s'])} after it"]
    if kind == "host-lost":
        return [f"{f['ranges_with_copy']} ranges had a copy on it; all {f['replicas']} replicas in sync again "
                f"{_s(f['rebuilt_after_cut_s'])} after the cut (rebuilt after {f['rereplicate_after_s']} s dead) "
                f"on {', '.join(f['rebuilt_on']) or '-'}; the replacement rejoined {_s(f['rejoined_after_heal_s'])} "
                f"after the heal"]
    return []


def _row(f: dict[str, Any]) -> str:
    if f.get("error"):
        return f"{f['fault']:<14} {f['target']:<14} error: {f['error'][:60]}"
    lin = "yes" if f["linearizable"] else "NO"
    ok = "ok" if not fault_problems(f) else "FAILED"
    return (f"{f['fault']:<14} {f['target']:<14} {f['gap_s']:>6.2f} {f['range_gap_s']:>9.2f} "
            f"{f['client_errors']:>6} {f['lost_writes']!s:>5} {lin:>5}  {ok}")


def format_report(r: dict[str, Any]) -> str:
    """The drill's report as text: a table with a row per fault, each fault's figures; the last line is PASS
    or FAIL."""
    lines = [f"netsplit drill ({r.get('profile', 'full')}): {r['hosts']} namespaces on {r['subnet']}, lease "
             f"{r['lease_s']} s, cuts of {r['fault_seconds']} s, seed {r['seed']}"
             + (f", {r['elapsed_s']} s, load average {r['loadavg'][0]} -> {r['loadavg'][1]}" if "loadavg" in r else ""),
             f"{'fault':<14} {'cut':<14} {'gap s':>6} {'range gap':>9} {'errors':>6} {'lost':>5} {'lin':>5}  verdict"]
    lines += [_row(f) for f in r["faults"]]
    for f in r["faults"]:
        lines.append(f"- {f['fault']}: cut {f['target']} ({f.get('address', '?')}) for {f.get('cut_s', '?')} s")
        if f.get("error"):
            lines.append(f"    error: {f['error']}")
        else:
            c = f["client"]
            lines.append(f"    client: {c['ops']} ops, {c['ok']} ok, {c['unknown']} unknown; gap (no acknowledged "
                         f"write) {f['gap_s']} s from {f.get('gap_began_after_cut_s', '?')} s after the cut, longest "
                         f"on one range {f['range_gap_s']} s")
            lines += ["    " + x for x in fault_figures(f)]
            lines.append(f"    map converged (every range serving on a live server) "
                         f"{_s(f['converged_after_heal_s'])} after the heal")
            lines.append(f"    acknowledged writes lost {f['lost_writes']}, duplicates {f['duplicate_applications']}, "
                         f"linearizable {'yes' if f['linearizable'] else 'NO'} ({f['history_ops']} ops)")
        problems = fault_problems(f)
        lines.append("    ok" if not problems else "    FAILED: " + "; ".join(problems))
        if problems and not f.get("error"):
            lines += ["      " + x for x in failure_lines(f, f.get("injected", []))]
            if f.get("coordinator_events"):
                lines.append("      the coordinator's events on these ranges (time from the cut):")
                lines += ["        " + x for x in f["coordinator_events"]]
    lines.append("PASS" if r["passed"] else "FAIL")
    return "\n".join(lines)
