"""Balancer rules 1-4 (see :mod:`coordinator.balancer.policy`): load splits, hot-key and append-hotspot
warnings, size splits. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.balancer.rounds import Action, RangeView, Round
from coordinator.balancer.settings import MiB

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


def plan_splits(views: list[RangeView], rd: Round) -> list[Action]:
    """Rules 1-4, hottest (then largest) range first."""
    out: list[Action] = []
    splits = 0
    limit = rd.st.split_size_bytes
    cands = (v for v in views if v.eligible and v.fresh and (v.hot_now or v.bytes >= limit))
    for v in sorted(cands, key=lambda v: (-v.score, -v.bytes, v.order)):
        a = _load_action(v, rd)
        if a is None and v.bytes >= limit:
            a = Action("split", v.id, None, detail={"trigger": "size", "bytes": v.bytes},
                       reason=f"size {v.bytes / MiB:.0f} MiB >= {limit / MiB:.0f} MiB: split at the data median")
        if a is None or (a.kind == "split" and splits >= rd.st.max_splits_per_round):
            continue
        splits += a.kind == "split"
        rd.acted.add(v.id)
        out.append(a)
    return out


def _load_action(v: RangeView, rd: Round) -> Action | None:
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

