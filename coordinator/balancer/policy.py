"""The balancer policy: a pure function from (partition map, load history, settings) to actions.

``plan_actions(ranges, servers, history, settings, now, recent, in_flight)`` looks at the map and
the load reports and says what to do this round; the coordinator carries the actions out, records
their times in ``recent`` and logs each one as an event (or only logs them when
``settings.dry_run``). Nothing here does I/O or reads a clock. Anchor numbers refer to sections of
``shared/reference/partition-layer-anchors.md``.

The rules live in :mod:`coordinator.balancer.splits` (1-4), :mod:`coordinator.balancer.moves` (5),
:mod:`coordinator.balancer.replica_rules` (7, 8)
and :mod:`coordinator.balancer.merges` (6); the settings in :mod:`coordinator.balancer.settings`,
the actions and each range's view in :mod:`coordinator.balancer.rounds`.

**Load.** A range's load is its *score* = reads_s + writes_s + busy_s + entities_s / 100 (requests/s
plus refused requests plus one unit per 100 entities; see ``coordinator.balancer.load_history``). Its
*current* load is the mean score over the last ``max(hot_window_s, 2 × interval_s)`` seconds;
reports older than that are stale and count as no load — unless a heartbeat confirmed the latest
one since (partition servers leave out unchanged reports; ``LoadHistory.confirm``): then the
latest report is the current load. A server's load is the sum of the current
loads of the ranges the *map* gives it (not its last report), so a move counts at once and does
not make the next round move again.

**Eligible ranges.** Only ranges in state ``serving`` whose primary is live are acted on; ranges of
a dead server belong to failover, ranges in a move/split/merge to the operation holding them.
At most one action per range per round (a merge names two ranges and takes both).

Rules, in the order they are applied (defaults in brackets):

1. **Load split** [hot_rps 500/s, hot_window_s 6 s]. A range whose score stayed above ``hot_rps`` in
   every report for ``hot_window_s`` (one report at or below it restarts the clock; reports more
   than the stale bound apart break the run) is split at the *load median* of its sampled request
   keys: the sampled PartitionKey strictly inside (low, high) that best halves the sampled load
   (reservoir samples weighted by each report's score). TiKV and CockroachDB split after 10 s
   above 3000 / 2500 QPS at a key chosen from ~20 sampled request keys (§4, §5); WAS picks a
   load-split key by range profiling (§1). We default to 6 s because the demo cluster runs on 2
   cores with 0.5 s heartbeats and must split-and-move within 15 s (issue #6). A hot range whose
   reports carry no keys (full-table scans) is split at its data median (key None).
2. **Hot single key** [hot_key_share 0.8]. If one PartitionKey carries ≥ ``hot_key_share`` of a hot
   range's sampled load, splitting cannot help (a boundary never falls inside a PartitionKey): emit
   ``hot_key`` naming the key, its share and load, with the advice of Azure's partitioning guide (a
   finer PartitionKey) and Alibaba Tablestore (a hash prefix). DynamoDB skips split-for-heat on a
   single hot item; FoundationDB cannot split single-key hot spots (§6, §7).
3. **Append/prepend hotspot** [append_share 0.8]. If the hot range is the table's last (first)
   range and, on average over consecutive reports in the window, ≥ ``append_share`` of each
   report's sampled keys are above the maximum (below the minimum) key of the report before — every
   new key lands past the end of the key space — emit ``append_hotspot`` with the advice to spread
   new keys with a hash or bucket prefix (Azure's append/prepend anti-pattern). DynamoDB skips
   split-for-heat on sequential keys (§6). A split would leave the new half just as hot.
   Warnings 2 and 3 are repeated at most every ``warn_interval_s`` [60 s] per range (``recent``);
   while a warning is suppressed the range is neither load-split nor warned, only rule 4 applies.
4. **Size split** [split_size_bytes 256 MiB]. A range whose last report says ``bytes`` ≥
   ``split_size_bytes`` is split at its data median (key None: the primary finds it). TiKV's region
   split size is 256 MiB since v8.4, HBase's first split 256 MB (§2, §4).
   Splits per round are capped at ``max_splits_per_round`` [2], hottest (then largest) first: WAS
   picks "a small number" to split per 15 s pass (§1).
5. **Move** [server_imbalance 1.25, move_min_rps 50/s, max_concurrent_moves 1, move_cooldown_s 10 s,
   recent_split_s 30 s]. While the hottest live server's load is > ``server_imbalance`` × the mean
   and exceeds the coldest's by ≥ ``move_min_rps`` (a noise floor), move one of its ranges to the
   coldest live server: the range whose load best evens the two (|gap − 2·load| smallest) among those
   that strictly shrink the gap (0 < load < gap, so a lone hot range is never ping-ponged). A
   range created by a split within ``recent_split_s`` is preferred whenever one qualifies: WAS's
   overloaded server "first sheds a range that was recently split off it" (§1). CockroachDB
   rebalances a store 25 % above the mean (§5). A range moved within ``move_cooldown_s`` is not
   moved again; moves in flight plus moves planned never exceed ``max_concurrent_moves`` (PD's
   schedule limits, §4). Never to a dead server, never to the primary.
6. **Merge** [merge_cold_rps 5/s, merge_max_bytes 32 MiB, merge_cooldown_s 60 s,
   max_merges_per_round 1]. Two adjacent ranges of one table (left.high == right.low), both
   eligible, both cold (score < ``merge_cold_rps`` in every report of the last ``merge_cooldown_s``
   (at least the stale bound), and reported for that long), together < ``merge_max_bytes``, and
   both older than ``merge_cooldown_s`` since their creation, split or merge, are merged (the
   range is the left one; ``key`` is the boundary that disappears, ``target`` the server that will hold the
   result: the common primary, else the less loaded one). If they sit on different servers the
   coordinator moves one first, so that merge uses one unit of the move budget. Anti-flapping:
   TiKV blocks merges for 1 h after a split (merge < 54 MiB), CockroachDB for 5 min after a load
   split (merge < 128 MiB), FoundationDB never merges a shard writing > 100 KB/s (§4, §5, §7). The
   hysteresis between split (> 500/s, ≥ 256 MiB) and merge (< 5/s, < 32 MiB) is wide on purpose.

``recent`` maps an action kind to {range id: time of the last such action}: "split" (the time each
*half* was created by a split), "merge" (the merged range), "created" (any other creation),
"move", "replica_move", "hot_key" and "append_hotspot". Output order: splits and warnings (hottest first),
then moves (rule 5, else rule 8), then merges (table and key order), then replica moves; equal inputs give
equal outputs.

7-8. **Replica balance and primary spread** (replicated ranges only): :mod:`coordinator.balancer.replica_rules`.
"""

from __future__ import annotations

from coordinator.balancer.load_history import LoadHistory
from coordinator.balancer.merges import plan_merges
from coordinator.balancer.moves import plan_moves
from coordinator.balancer.replica_rules import moves_in_flight, plan_primary_spread, plan_replica_moves
from coordinator.balancer.rounds import Action, RangeView, Recent, Round
from coordinator.balancer.settings import Settings
from coordinator.balancer.splits import plan_splits


def plan_actions(
    ranges: list[dict],
    servers: list[str],
    history: LoadHistory,
    settings: Settings,
    now: float,
    recent: Recent | None = None,
    in_flight: int = 0,
    zones: dict[str, str] | None = None,
    replica_servers: list[str] | None = None,
    replica_jobs: int = 0,
) -> list[Action]:
    """This round's actions for the map ``ranges`` on the ``servers`` alive (rules: module doc).

    ``in_flight`` counts the moves (and cross-server merges) still being carried out; ``zones`` maps a
    server to its zone, ``replica_servers`` are the live servers that can hold replicas (default: ``servers``)
    and ``replica_jobs`` the replica moves queued but not yet recorded in the map (rules 7 and 8).
    """
    if not settings.enabled:
        return []
    live = sorted(set(servers))
    live_set = set(live)
    rd = Round(history, settings, now, recent or {}, max(settings.hot_window_s, 2 * settings.interval_s))
    views = []
    for r in ranges:
        last = history.latest(r["id"])
        until = history.current_until(r["id"])
        fresh = until is not None and now - until <= rd.stale_s
        avg = history.avg(r["id"], "score", rd.stale_s, now) if fresh else None
        # no report in the window but a heartbeat confirmed the latest one: it still holds
        score = (avg if avg is not None else last.score) if fresh and last is not None else 0.0
        size = int(last.load.get("bytes", 0) or 0) if last is not None else 0
        eligible = r.get("state", "serving") == "serving" and r.get("primary") in live_set and not r.get("move")
        views.append(RangeView(r, score, size, fresh, eligible, last is not None and last.score > settings.hot_rps))
    out: list[Action] = []
    if settings.split:
        out += plan_splits(views, rd)
    budget = settings.max_concurrent_moves - in_flight
    loads = {s: 0.0 for s in live}
    for v in views:
        if v.rec.get("primary") in loads:
            loads[v.rec["primary"]] += v.score
    if settings.move:
        moves = plan_moves(views, loads, rd, budget)
        budget -= len(moves)
        out += moves
        if not moves and settings.primary_spread:
            spread = plan_primary_spread(views, live, rd, budget)
            budget -= len(spread)
            out += spread
    if settings.merge:
        out += plan_merges(views, loads, rd, budget)
    if settings.replica_move:
        room = settings.max_replica_moves - moves_in_flight(views) - replica_jobs
        out += plan_replica_moves(views, sorted(set(replica_servers if replica_servers is not None else live)),
                                  zones or {}, rd, room)
    return out

