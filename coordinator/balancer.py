"""The balancer policy: a pure function from (partition map, load history, settings) to actions.

``plan_actions(ranges, servers, history, settings, now, recent, in_flight)`` looks at the map and
the load reports and says what to do this round; the coordinator carries the actions out, records
their times in ``recent`` and logs each one as an event (or only logs them when
``settings.dry_run``). Nothing here does I/O or reads a clock. Anchor numbers refer to sections of
``shared/reference/partition-layer-anchors.md``.

**Load.** A range's load is its *score* = reads_s + writes_s + busy_s + entities_s / 100 (requests/s
plus refused requests plus one unit per 100 entities; see ``coordinator.load_history``). Its
*current* load is the mean score over the last ``max(hot_window_s, 2 × interval_s)`` seconds;
reports older than that are stale and count as no load — unless a heartbeat confirmed the latest
one since (partition servers leave out unchanged reports; ``LoadHistory.confirm``): then the
latest report is the current load. A server's load is the sum of the current
loads of the ranges the *map* gives it (not its last report), so a move counts at once and does
not make the next round move again.

**Eligible ranges.** Only ranges in state ``serving`` whose owner is live are acted on; ranges of
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
   ``split_size_bytes`` is split at its data median (key None: the owner finds it). TiKV's region
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
   schedule limits, §4). Never to a dead server, never to the owner.
6. **Merge** [merge_cold_rps 5/s, merge_max_bytes 32 MiB, merge_cooldown_s 60 s,
   max_merges_per_round 1]. Two adjacent ranges of one table (left.high == right.low), both
   eligible, both cold (score < ``merge_cold_rps`` in every report of the last ``merge_cooldown_s``
   (at least the stale bound), and reported for that long), together < ``merge_max_bytes``, and
   both older than ``merge_cooldown_s`` since their creation, split or merge, are merged (the
   range is the left one; ``key`` is the boundary that disappears, ``target`` the server that will hold the
   result: the common owner, else the less loaded one). If they sit on different servers the
   coordinator moves one first, so that merge uses one unit of the move budget. Anti-flapping:
   TiKV blocks merges for 1 h after a split (merge < 54 MiB), CockroachDB for 5 min after a load
   split (merge < 128 MiB), FoundationDB never merges a shard writing > 100 KB/s (§4, §5, §7). The
   hysteresis between split (> 500/s, ≥ 256 MiB) and merge (< 5/s, < 32 MiB) is wide on purpose.

``recent`` maps an action kind to {range id: time of the last such action}: "split" (the time each
*half* was created by a split), "merge" (the merged range), "created" (any other creation),
"move", "hot_key" and "append_hotspot". Output order: splits and warnings (hottest first), then
moves, then merges (table and key order); equal inputs give equal outputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from coordinator.load_history import LoadHistory

MiB = 1 << 20
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

HOT_KEY_ADVICE = (
    "one PartitionKey carries most of this range's load and a range cannot be split inside a "
    "PartitionKey: spread it over several partitions with a finer-grained PartitionKey (Azure: "
    "'Designing a scalable partitioning strategy'), or prefix the key with a short hash of it "
    "(Alibaba Tablestore), so the load can be split and moved across servers"
)
APPEND_ADVICE = (
    "every new entity lands at the {end} of the key space (an {kind}-only pattern), so the {which} "
    "range takes all the writes and splitting it does not help: prefix the PartitionKey with a hash "
    "or a bucket number (e.g. hash(id) % N) so new keys spread over N ranges (Azure's "
    "prepend/append anti-pattern)"
)


@dataclass
class Settings:
    """Balancer settings; every field can be changed at run time with ``set``."""

    enabled: bool = True
    dry_run: bool = False  # the caller logs the actions instead of doing them
    split: bool = True
    move: bool = True
    merge: bool = True
    interval_s: float = 2.0  # how often the coordinator runs plan_actions
    hot_rps: float = 500.0  # load score (requests/s, see module doc) above which a range is hot
    hot_window_s: float = 6.0  # hot for this long -> load split
    split_size_bytes: int = 256 * MiB  # size split at the data median
    hot_key_share: float = 0.8  # one key >= this share of a hot range's samples -> hot_key warning
    append_share: float = 0.8  # share of each report's keys past the previous report's end -> append
    max_splits_per_round: int = 2
    server_imbalance: float = 1.25  # move when the hottest server > this x the mean
    move_min_rps: float = 50.0  # ... and hottest - coldest >= this (noise floor)
    max_concurrent_moves: int = 1  # moves in flight + planned (merges across servers count)
    move_cooldown_s: float = 10.0  # per range
    recent_split_s: float = 30.0  # a half this young is preferred for a move
    merge_cold_rps: float = 5.0
    merge_max_bytes: int = 32 * MiB
    merge_cooldown_s: float = 60.0  # cold for, and older than, this before a merge
    max_merges_per_round: int = 1
    warn_interval_s: float = 60.0  # repeat a hot_key / append_hotspot warning at most this often

    def set(self, key: str, value: str) -> None:
        """Parse ``value`` for field ``key`` (``hot-rps`` = ``hot_rps``) and set it.

        Booleans take true/false/on/off/yes/no/1/0; sizes take a unit (``256MiB``, ``1GB``);
        raises ValueError on an unknown key, an unparsable value or one out of its range.
        """
        name = key.strip().lower().replace("-", "_")
        kinds = {f.name: type(f.default) for f in fields(self)}
        if name not in kinds:
            raise ValueError(f"unknown balancer setting {key!r}; known: {', '.join(sorted(kinds))}")
        parsed = _parse(name, kinds[name], value)
        _check(name, parsed)
        setattr(self, name, parsed)

    def to_dict(self) -> dict[str, Any]:
        """All settings as plain data."""
        return asdict(self)


def _parse(name: str, kind: type, value: str) -> Any:
    text = str(value).strip().lower()
    if kind is bool:
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{name}: expected on/off, true/false or 1/0, got {value!r}")
    try:
        if kind is int and name.endswith("_bytes"):
            num = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
            unit = text[len(num):].strip()
            if unit not in _UNITS:
                raise ValueError
            x = float(num.replace("_", "")) * _UNITS[unit]
            if not math.isfinite(x) or x != int(x):
                raise ValueError
            return int(x)
        if kind is int:
            return int(text.replace("_", ""))
        x = float(text)
    except ValueError:
        what = "size" if name.endswith("_bytes") else kind.__name__
        raise ValueError(f"{name}: not a valid {what}: {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    return x


def _check(name: str, v: Any) -> None:
    if isinstance(v, bool):
        return
    if name in ("hot_key_share", "append_share") and not 0 < v <= 1:
        raise ValueError(f"{name}: must be in (0, 1], got {v}")
    if name == "server_imbalance" and v < 1:
        raise ValueError(f"{name}: must be >= 1, got {v}")
    if name == "interval_s" and v <= 0:
        raise ValueError(f"{name}: must be > 0, got {v}")
    if v < 0:
        raise ValueError(f"{name}: must be >= 0, got {v}")


@dataclass(frozen=True)
class Action:
    """One thing to do: split (at ``key``; None = data median), move (to ``target``), merge (with
    ``detail["right"]``, dropping boundary ``key``, onto ``target``), or a warning event
    (``hot_key`` / ``append_hotspot``, ``key`` = the hot key)."""

    kind: str
    range: str
    key: str | None = None
    target: str | None = None
    reason: str = ""
    detail: dict = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for events and the CLI."""
        return asdict(self)


@dataclass
class _View:
    """What the policy knows about one range this round."""

    rec: Mapping[str, Any]
    score: float  # current load (0 when unknown or stale)
    bytes: int
    fresh: bool  # has a report within the stale bound
    eligible: bool  # serving, on a live server
    hot_now: bool = True  # its latest report is above hot_rps (else no load rule can apply)

    @property
    def id(self) -> str:
        return self.rec["id"]

    @property
    def order(self) -> tuple[str, str, str]:
        return (self.rec["table"].lower(), self.rec["low"], self.rec["id"])


Recent = Mapping[str, Mapping[str, float]]


@dataclass
class _Round:
    """The inputs of one round, shared by the rules."""

    history: LoadHistory
    st: Settings
    now: float
    recent: Recent
    stale_s: float
    acted: set[str] = field(default_factory=set)

    def recently(self, kind: str, rid: str, span: float) -> bool:
        """True when ``recent[kind][rid]`` is less than ``span`` seconds ago."""
        t = self.recent.get(kind, {}).get(rid)
        return t is not None and self.now - t < span


def plan_actions(
    ranges: list[dict],
    servers: list[str],
    history: LoadHistory,
    settings: Settings,
    now: float,
    recent: Recent | None = None,
    in_flight: int = 0,
) -> list[Action]:
    """This round's actions for the map ``ranges`` on the ``servers`` alive (rules: module doc).

    ``in_flight`` counts the moves (and cross-server merges) still being carried out.
    """
    if not settings.enabled:
        return []
    live = sorted(set(servers))
    live_set = set(live)
    rd = _Round(history, settings, now, recent or {}, max(settings.hot_window_s, 2 * settings.interval_s))
    views = []
    for r in ranges:
        last = history.latest(r["id"])
        until = history.current_until(r["id"])
        fresh = until is not None and now - until <= rd.stale_s
        avg = history.avg(r["id"], "score", rd.stale_s, now) if fresh else None
        # no report in the window but a heartbeat confirmed the latest one: it still holds
        score = (avg if avg is not None else last.score) if fresh and last is not None else 0.0
        size = int(last.load.get("bytes", 0) or 0) if last is not None else 0
        eligible = r.get("state", "serving") == "serving" and r.get("owner") in live_set
        views.append(_View(r, score, size, fresh, eligible, last is not None and last.score > settings.hot_rps))
    out: list[Action] = []
    if settings.split:
        out += _splits(views, rd)
    budget = settings.max_concurrent_moves - in_flight
    loads = {s: 0.0 for s in live}
    for v in views:
        if v.rec.get("owner") in loads:
            loads[v.rec["owner"]] += v.score
    if settings.move:
        moves = _moves(views, loads, rd, budget)
        budget -= len(moves)
        out += moves
    if settings.merge:
        out += _merges(views, loads, rd, budget)
    return out


# --- splits and warnings ------------------------------------------------------------------------


def _inside(key: str, rec: Mapping[str, Any]) -> bool:
    return key >= rec["low"] and (rec["high"] is None or key < rec["high"])


def load_median(dist: list[tuple[str, float]], low: str, high: str | None) -> tuple[str | None, float]:
    """The key strictly inside (low, high) that best halves the weighted load, and its left share.

    ``dist`` is ``[(key, weight)]`` in key order. Splitting at k puts keys < k left. Among the
    candidate keys the one minimising |left − right| wins, the smaller on a tie; so the median
    itself or the next key above it (the median is skipped when it equals ``low``).
    """
    total = sum(w for _, w in dist)
    best: tuple[float, str, float] | None = None
    left = 0.0
    for k, w in dist:
        if k > low and (high is None or k < high):
            imbalance = abs(total - 2 * left)
            if best is None or imbalance < best[0]:
                best = (imbalance, k, left / total if total else 0.0)
        left += w
    return (best[1], best[2]) if best else (None, 0.0)


def append_pattern(batches: list[list[str]], last: bool, first: bool, share: float) -> tuple[str, float] | None:
    """("append" | "prepend", share) when consecutive key samples keep moving past one end.

    For each report after the first, the fraction of its keys above the previous report's maximum
    (append, checked when the range is the table's last) or below its minimum (prepend, when it is
    the first) is taken; the mean over ≥ 2 such pairs must reach ``share``.
    """
    if len(batches) < 3:
        return None
    pairs = list(zip(batches, batches[1:], strict=False))
    for kind, ok in (("append", last), ("prepend", first)):
        if not ok:
            continue
        if kind == "append":
            fracs = [sum(k > max(a) for k in b) / len(b) for a, b in pairs]
        else:
            fracs = [sum(k < min(a) for k in b) / len(b) for a, b in pairs]
        mean = sum(fracs) / len(fracs)
        if mean >= share:
            return kind, round(mean, 3)
    return None


def _splits(views: list[_View], rd: _Round) -> list[Action]:
    """Rules 1-4, hottest (then largest) range first."""
    out: list[Action] = []
    splits = 0
    limit = rd.st.split_size_bytes
    cands = (v for v in views if v.eligible and v.fresh and (v.hot_now or v.bytes >= limit))
    for v in sorted(cands, key=lambda v: (-v.score, -v.bytes, v.order)):
        a = _load_action(v, rd)
        limit = rd.st.split_size_bytes
        if a is None and v.bytes >= limit:
            a = Action("split", v.id, None, detail={"trigger": "size", "bytes": v.bytes},
                       reason=f"size {v.bytes / MiB:.0f} MiB >= {limit / MiB:.0f} MiB: split at the data median")
        if a is None or (a.kind == "split" and splits >= rd.st.max_splits_per_round):
            continue
        splits += a.kind == "split"
        rd.acted.add(v.id)
        out.append(a)
    return out


def _load_action(v: _View, rd: _Round) -> Action | None:
    """The load split or hot-spot warning for a range hot for the whole window, else None."""
    st, now = rd.st, rd.now
    since = rd.history.hot_since(v.id, st.hot_rps, max_gap=rd.stale_s)
    if since is None or now - since < st.hot_window_s:
        return None
    rec, hot_s = v.rec, round(now - since, 3)
    span = max(st.hot_window_s, rd.stale_s)
    dist = [(k, w) for k, w in rd.history.samples(v.id, span, now) if _inside(k, rec)]
    base = {"trigger": "load", "score": round(v.score, 1), "hot_s": hot_s, "distinct_keys": len(dist)}
    hot = f"load {v.score:.0f}/s > {st.hot_rps:.0f}/s for {hot_s:.1f}s"
    if not dist:
        return Action("split", v.id, None, reason=f"{hot}, no sampled keys: split at the data median", detail=base)
    total = sum(w for _, w in dist)
    top, top_w = min(dist, key=lambda kw: (-kw[1], kw[0]))
    share = top_w / total
    key, left = load_median(dist, rec["low"], rec["high"])
    if share >= st.hot_key_share or key is None:
        if rd.recently("hot_key", v.id, st.warn_interval_s):
            return None
        return Action("hot_key", v.id, top,
                      reason=f"PartitionKey {top!r} takes {share:.0%} of a hot range's load ({v.score:.0f}/s): "
                             "cannot split",
                      detail={**base, "share": round(share, 3), "key_load": round(v.score * share, 1),
                              "advice": HOT_KEY_ADVICE})
    batches = [b for ks in rd.history.key_batches(v.id, span, now) if (b := [k for k in ks if _inside(k, rec)])]
    pattern = append_pattern(batches, last=rec["high"] is None, first=rec["low"] == "", share=st.append_share)
    if pattern is not None:
        if rd.recently("append_hotspot", v.id, st.warn_interval_s):
            return None
        kind, frac = pattern
        advice = APPEND_ADVICE.format(end="end" if kind == "append" else "start", kind=kind,
                                      which="last" if kind == "append" else "first")
        return Action("append_hotspot", v.id, dist[-1][0] if kind == "append" else dist[0][0],
                      reason=f"{kind}-only pattern on a hot range ({v.score:.0f}/s): splitting would not help",
                      detail={**base, "pattern": kind, "share": frac, "advice": advice})
    return Action("split", v.id, key, reason=f"{hot}: split at the load median {key!r}",
                  detail={**base, "left_share": round(left, 3)})


# --- moves --------------------------------------------------------------------------------------


def _moves(views: list[_View], loads: dict[str, float], rd: _Round, budget: int) -> list[Action]:
    """Rule 5; ``loads`` (server -> load) is updated for each planned move."""
    st, out = rd.st, []
    while len(loads) >= 2 and len(out) < budget:
        hot = min(loads, key=lambda s: (-loads[s], s))
        cold = min(loads, key=lambda s: (loads[s], s))
        mean = sum(loads.values()) / len(loads)
        gap = loads[hot] - loads[cold]
        if loads[hot] <= st.server_imbalance * mean or gap < st.move_min_rps or gap <= 0:
            break
        cands = [v for v in views if v.eligible and v.rec["owner"] == hot and v.id not in rd.acted
                 and 0 < v.score < gap and not rd.recently("move", v.id, st.move_cooldown_s)]
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


# --- merges -------------------------------------------------------------------------------------


def _cold(v: _View, rd: _Round) -> bool:
    """Reported for merge_cooldown_s, and below merge_cold_rps in every report of that window."""
    first = rd.history.first_seen(v.id)
    if not v.fresh or first is None or rd.now - first < rd.st.merge_cooldown_s:
        return False
    peak = rd.history.peak(v.id, "score", max(rd.st.merge_cooldown_s, rd.stale_s), rd.now)
    return peak is not None and peak < rd.st.merge_cold_rps


def _mergeable(a: _View, b: _View, rd: _Round) -> bool:
    """Adjacent, both eligible and untouched this round, old, cold, and small together."""
    return (a.rec["high"] is not None and a.rec["high"] == b.rec["low"]
            and all(v.eligible and v.id not in rd.acted for v in (a, b))
            and not any(rd.recently(kind, v.id, rd.st.merge_cooldown_s)
                        for v in (a, b) for kind in ("created", "split", "merge"))
            and a.bytes + b.bytes < rd.st.merge_max_bytes
            and _cold(a, rd) and _cold(b, rd))


def _merges(views: list[_View], loads: dict[str, float], rd: _Round, budget: int) -> list[Action]:
    """Rule 6, left to right in each table; a cross-server merge takes one unit of move budget."""
    st, out = rd.st, []
    tables: dict[str, list[_View]] = {}
    for v in sorted(views, key=lambda v: v.order):
        tables.setdefault(v.rec["table"].lower(), []).append(v)
    for name in sorted(tables):
        rs, i = tables[name], 0
        while i + 1 < len(rs) and len(out) < st.max_merges_per_round:
            a, b = rs[i], rs[i + 1]
            oa, ob = a.rec["owner"], b.rec["owner"]
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
