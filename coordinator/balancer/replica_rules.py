"""Balancer rules 7 and 8 (see :mod:`coordinator.balancer.policy`), for replicated ranges. Pure: no I/O, no clock.

7. **Replica balance** (balancing data): while the live server holding the most replicas holds at least
   ``replica_move_min_gap`` more than the one holding the fewest (a new, empty server joined; a server
   came back after its replicas were rebuilt elsewhere), move one replica from the fuller to the emptier
   (:mod:`coordinator.control.replica_move`: add, catch up, remove). Each move narrows the gap by two, so with a gap
   of at least 2 no replica ever moves back (no ping-pong). A follower is preferred over a primary (a primary
   first hands its leadership over), then the smallest range (the cheapest copy). Replicas of a range stay in
   distinct zones when servers carry them. Never a range that is not serving (split, merge, failover), moving
   a replica already, split or moved within ``replica_move_cooldown_s``. At most ``max_replica_moves`` in
   flight. PD's balance-region scheduler and CockroachDB's replicate queue even out replica counts the same
   way, and HDFS's balancer moves blocks to a new DataNode.
8. **Primary spread**: while a live server leads at least ``replica_move_min_gap`` more replicated ranges
   than another that holds an in-sync replica of one of them, transfer that range's leadership (a ``move``
   to an in-sync replica: no data copied). Only ranges below ``move_min_rps`` are spread (rule 5 places the
   hot ones by load, and the two rules must not undo each other), only when rule 5 planned nothing, within the
   move budget. PD's balance-leader scheduler.
"""

from __future__ import annotations

from coordinator.balancer.rounds import Action, RangeView, Round
from coordinator.replicas.sets import zone_clash


def _replicated(v: RangeView) -> bool:
    return "replicas" in v.rec


def replica_counts(views: list[RangeView], live: list[str]) -> dict[str, int]:
    """Live server -> how many replicas it holds (primaries included; a moving range counts its new one)."""
    counts = dict.fromkeys(live, 0)
    for v in views:
        if _replicated(v):
            for s in v.rec["replicas"]:
                if s in counts:
                    counts[s] += 1
    return counts


def moves_in_flight(views: list[RangeView]) -> int:
    """Replica moves recorded in the map and not ended yet."""
    return sum(1 for v in views if v.rec.get("move"))


def _movable(v: RangeView, rd: Round) -> bool:
    st = rd.st
    return (v.eligible and _replicated(v) and v.id not in rd.acted  # eligible: serving, no replica move under way
            and not rd.recently("split", v.id, st.replica_move_cooldown_s)
            and not rd.recently("merge", v.id, st.replica_move_cooldown_s)
            and not rd.recently("replica_move", v.id, st.replica_move_cooldown_s))


def plan_replica_moves(views: list[RangeView], live: list[str], zones: dict[str, str], rd: Round,
                       budget: int) -> list[Action]:
    """Rule 7 over the live servers that can hold replicas (``live``; ``zones``: server -> zone)."""
    st = rd.st
    counts = replica_counts(views, live)
    out: list[Action] = []
    while len(counts) >= 2 and len(out) < budget:
        cold = min(counts, key=lambda s: (counts[s], s))
        planned = None
        for hot in sorted(counts, key=lambda s: (-counts[s], s)):
            if counts[hot] - counts[cold] < max(st.replica_move_min_gap, 2):
                break
            cands = [v for v in views if _movable(v, rd) and hot in v.rec["replicas"]
                     and cold not in v.rec["replicas"] and not zone_clash(v.rec, hot, cold, zones)]
            if cands:
                best = min(cands, key=lambda v: (v.rec["primary"] == hot, v.bytes, v.order))
                planned = (hot, best)
                break
        if planned is None:
            break
        hot, best = planned
        out.append(Action(
            "replica_move", best.id, target=cold,
            reason=f"server {hot} holds {counts[hot]} replicas, {cold} {counts[cold]}: move {best.id}'s replica "
                   f"from {hot} to {cold}" + (" (its primary hands over first)" if best.rec["primary"] == hot else ""),
            detail={"source": hot, "bytes": best.bytes, "primary": best.rec["primary"] == hot,
                    "before": {hot: counts[hot], cold: counts[cold]}}))
        counts[hot] -= 1
        counts[cold] += 1
        rd.acted.add(best.id)
    return out


def plan_primary_spread(views: list[RangeView], live: list[str], rd: Round, budget: int) -> list[Action]:
    """Rule 8: leadership transfers from the server leading the most replicated ranges to one leading fewer."""
    st = rd.st
    led = dict.fromkeys(live, 0)
    for v in views:
        if _replicated(v) and v.rec.get("primary") in led:
            led[v.rec["primary"]] += 1
    out: list[Action] = []
    while len(led) >= 2 and len(out) < budget:
        planned = None
        for hot in sorted(led, key=lambda s: (-led[s], s)):
            mine: list[RangeView] | None = None  # the ranges hot leads that may move (once per hot server)
            for cold in sorted(led, key=lambda s: (led[s], s)):
                if led[hot] - led[cold] < max(st.replica_move_min_gap, 2):
                    break
                if mine is None:
                    mine = [v for v in views if v.eligible and _replicated(v) and v.rec["primary"] == hot
                            and v.id not in rd.acted and v.score < st.move_min_rps
                            and not rd.recently("move", v.id, st.move_cooldown_s)]
                cands = [v for v in mine if cold in v.rec.get("insync", [])]
                if cands:
                    planned = (hot, cold, min(cands, key=lambda v: (v.score, v.order)))
                    break
            if planned is not None:
                break
        if planned is None:
            break
        hot, cold, best = planned
        out.append(Action(
            "move", best.id, target=cold,
            reason=f"server {hot} leads {led[hot]} replicated ranges, {cold} {led[cold]}: {best.id}'s primary "
                   f"moves to its in-sync replica on {cold}",
            detail={"source": hot, "spread": True, "before": {hot: led[hot], cold: led[cold]}}))
        led[hot] -= 1
        led[cold] += 1
        rd.acted.add(best.id)
    return out
