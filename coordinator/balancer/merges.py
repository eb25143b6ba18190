"""Balancer rule 6 (see :mod:`coordinator.balancer.policy`): merge adjacent ranges that are old, cold and
small together. Pure: no I/O, no clock.
"""

from __future__ import annotations

from coordinator.balancer.rounds import Action, RangeView, Round
from coordinator.balancer.settings import MiB


def _cold(v: RangeView, rd: Round) -> bool:
    """Reported for merge_cooldown_s, and below merge_cold_rps in every report of that window."""
    first = rd.history.first_seen(v.id)
    if not v.fresh or first is None or rd.now - first < rd.st.merge_cooldown_s:
        return False
    peak = rd.history.peak(v.id, "score", max(rd.st.merge_cooldown_s, rd.stale_s), rd.now)
    return peak is not None and peak < rd.st.merge_cold_rps


def _mergeable(a: RangeView, b: RangeView, rd: Round) -> bool:
    """Adjacent, both eligible and untouched this round, old, cold, and small together; replicated ranges on
    the same servers (after replica moves they may not be: then they are not merged)."""
    return (a.rec["high"] is not None and a.rec["high"] == b.rec["low"]
            and set(a.rec.get("replicas", ())) == set(b.rec.get("replicas", ()))
            and all(v.eligible and v.id not in rd.acted for v in (a, b))
            and not any(rd.recently(kind, v.id, rd.st.merge_cooldown_s)
                        for v in (a, b) for kind in ("created", "split", "merge"))
            and a.bytes + b.bytes < rd.st.merge_max_bytes
            and _cold(a, rd) and _cold(b, rd))


def plan_merges(views: list[RangeView], loads: dict[str, float], rd: Round, budget: int) -> list[Action]:
    """Rule 6, left to right in each table; a cross-server merge takes one unit of move budget."""
    st = rd.st
    out: list[Action] = []
    tables: dict[str, list[RangeView]] = {}
    for v in sorted(views, key=lambda v: v.order):
        tables.setdefault(v.rec["table"].lower(), []).append(v)
    for name in sorted(tables):
        rs, i = tables[name], 0
        while i + 1 < len(rs) and len(out) < st.max_merges_per_round:
            a, b = rs[i], rs[i + 1]
            oa, ob = a.rec["primary"], b.rec["primary"]
            if not _mergeable(a, b, rd) or (oa != ob and budget <= 0):
                i += 1
                continue
            budget -= oa != ob
            target = oa if oa == ob or loads.get(oa, 0.0) <= loads.get(ob, 0.0) else ob
            size = a.bytes + b.bytes
            out.append(Action(
                "merge", a.id, b.rec["low"], target,
                reason=f"{a.id} and {b.id} cold (< {st.merge_cold_rps:g}/s for {st.merge_cooldown_s:g}s) and "
                       f"small ({size / MiB:.1f} MiB): merge",
                detail={"right": b.id, "bytes": size, "score": round(a.score + b.score, 2), "needs_move": oa != ob}))
            rd.acted.update((a.id, b.id))
            i += 2
    return out
