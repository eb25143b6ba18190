"""Balancer rule 5 (see :mod:`coordinator.balancer.policy`): move a range from the hottest live server to
the coldest while they are out of balance. Pure: no I/O, no clock.
"""

from __future__ import annotations

from coordinator.balancer.rounds import Action, RangeView, Round


def plan_moves(views: list[RangeView], loads: dict[str, float], rd: Round, budget: int) -> list[Action]:
    """Rule 5; ``loads`` (server -> load) is updated for each planned move."""
    st = rd.st
    out: list[Action] = []
    while len(loads) >= 2 and len(out) < budget:
        hot = min(loads, key=lambda s: (-loads[s], s))
        cold = min(loads, key=lambda s: (loads[s], s))
        mean = sum(loads.values()) / len(loads)
        gap = loads[hot] - loads[cold]
        if loads[hot] <= st.server_imbalance * mean or gap < st.move_min_rps or gap <= 0:
            break
        cands = [v for v in views if v.eligible and v.rec["primary"] == hot and v.id not in rd.acted
                 and 0 < v.score < gap and not rd.recently("move", v.id, st.move_cooldown_s)
                 and ("replicas" not in v.rec or cold in v.rec["insync"])]  # a primary moves to an in-sync replica
        if not cands:
            break
        young = [v for v in cands if rd.recently("split", v.id, st.recent_split_s)]
        best = min(young or cands, key=lambda v: (abs(gap - 2 * v.score), v.order))
        out.append(Action(
            "move", best.id, target=cold,
            reason=f"server {hot} at {loads[hot]:.0f}/s > {st.server_imbalance:g} x mean {mean:.0f}/s: move "
                   f"{best.id} ({best.score:.0f}/s{', just split' if young else ''}) to {cold}",
            detail={"source": hot, "score": round(best.score, 1), "just_split": bool(young),
                    "before": {hot: round(loads[hot], 1), cold: round(loads[cold], 1)}}))
        loads[hot] -= best.score
        loads[cold] += best.score
        rd.acted.add(best.id)
    return out

