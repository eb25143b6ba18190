"""Per-range load history for the balancer: timed heartbeat load reports in a bounded window.

Written by the coordinator's loop thread (``add``), read by the balancer's thread: readers copy a
range's samples (one C-level ``tuple()``, atomic under the GIL) before walking them.

Pure data: time is always passed in, nothing runs by itself. The coordinator calls ``add`` with
every heartbeat's load report (``partition_server.ranges.RangeSet.load_report``: per range
``reads_s, writes_s, entities_s, busy_s, lat_avg_ms, lat_max_ms, entities, bytes, sample``) and
hands the history to ``coordinator.balancer.policy.plan_actions``.

**Load score.** One number per range and report, used for every load threshold::

    score = reads_s + writes_s + busy_s + entities_s / 100

i.e. requests per second (a point read or write, a batch, or a query page each count 1), plus the
requests refused as busy (demand the range could not serve: WAS's throttling trigger, anchors §1),
plus one more unit per 100 entities moved, so a 1000-entity scan page costs like 11 point reads
(WAS learnt that request rate alone misses scan load, anchors §1 "lessons").

Samples are kept per range id (a moved range keeps its history; the halves of a split start new
ones) for ``window_s`` seconds and at most ``max_samples`` reports per range. A range's old samples
are dropped when it reports again; ranges that stopped reporting are swept every ``window_s / 4``,
``SWEEP_CHUNK`` ranges per report (so a report costs O(1), not O(ranges), with 100,000 ranges: a
sweep of them in one go held the coordinator's loop for 60 ms).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

RATE_KEYS = ("reads_s", "writes_s", "busy_s")
ENTITY_WEIGHT = 0.01  # one score unit per 100 entities/s
SWEEP_CHUNK = 2000  # ranges checked for stale samples per add() while a sweep runs


def load_score(load: Mapping[str, Any]) -> float:
    """The load score of one range report: reads_s + writes_s + busy_s + entities_s / 100."""
    g = load.get  # unrolled over RATE_KEYS: this runs for every range of every full report
    return (float(g("reads_s") or 0.0) + float(g("writes_s") or 0.0) + float(g("busy_s") or 0.0)
            + ENTITY_WEIGHT * float(g("entities_s") or 0.0))


class Sample(NamedTuple):
    """One range's load in one heartbeat: when, from which server, its score and the raw report.

    A named tuple: made for every range of every full report (20,000 a second with 100,000
    ranges), it is about three times cheaper to create than a frozen dataclass."""

    t: float
    server: str
    score: float
    load: Mapping[str, Any]

    def metric(self, name: str) -> float:
        """A metric of this report; ``"score"`` is the load score."""
        if name == "score":
            return self.score
        return float(self.load.get(name, 0.0) or 0.0)

    @property
    def keys(self) -> list[str]:
        """The sampled request PartitionKeys of this report."""
        return [k for k in self.load.get("sample", ()) or () if isinstance(k, str)]


class LoadHistory:
    """Load reports per range over a sliding window, with the queries the balancer needs."""

    def __init__(self, window_s: float = 180.0, max_samples: int = 2048) -> None:
        self.window_s = window_s  # keep >= the balancer's merge_cooldown_s (coldness is judged over it)
        self.max_samples = max_samples
        self.now = float("-inf")  # the latest time passed to add()
        self._ranges: dict[str, deque[Sample]] = {}
        self._first: dict[str, float] = {}
        self._servers: dict[str, tuple[float, dict[str, float]]] = {}
        self._pruned = float("-inf")
        self._sweep: list[str] = []  # range ids the running sweep has still to check
        self._confirmed: dict[str, float] = {}  # server -> its last heartbeat (confirms its reports)

    # --- input --------------------------------------------------------------------------------

    def add(self, now: float, server: str, loads: Mapping[str, Mapping[str, Any]]) -> None:
        """Record one heartbeat's per-range load report from ``server`` at time ``now``."""
        self.now = max(self.now, now)
        horizon = self.now - self.window_s
        scores: dict[str, float] = {}
        for rid, load in loads.items():
            q = self._ranges.get(rid)
            if q is None:
                q = self._ranges[rid] = deque(maxlen=self.max_samples)
                self._first.setdefault(rid, now)
            else:
                while q and q[0].t < horizon:  # this range's old samples go as it reports
                    q.popleft()
                if q and q[-1].load == load:  # an unchanged report (an idle range): share the previous one's
                    prev = q[-1]
                    q.append(Sample(now, server, prev.score, prev.load))
                    scores[rid] = prev.score
                    continue
                load = dict(load)
            s = Sample(now, server, load_score(load), load)
            q.append(s)
            scores[rid] = s.score
        self._servers[server] = (now, scores)
        if not self._sweep and self.now - self._pruned >= max(1.0, self.window_s / 4):
            self._start_sweep()  # ranges that stopped reporting
        if self._sweep:
            self._prune(SWEEP_CHUNK)

    def confirm(self, now: float, server: str) -> None:
        """Record that ``server`` heartbeated at ``now``: the latest reports it sent for its ranges
        still hold (a partition server leaves out reports that did not change, and sends all of
        them every ``FULL_REPORT_S``). O(1): heartbeats come 2,000 a second."""
        self._confirmed[server] = now

    def current_until(self, rid: str) -> float | None:
        """Until when the range's latest report is known to hold: its time, or the last heartbeat
        of the server that sent it (a range that moved is reported by its new primary at once)."""
        last = self.latest(rid)
        if last is None:
            return None
        return max(last.t, self._confirmed.get(last.server, last.t))

    def forget_server(self, server: str) -> None:
        """Drop a server's last report (it died or left); its ranges' samples stay."""
        self._servers.pop(server, None)
        self._confirmed.pop(server, None)

    def _start_sweep(self) -> None:
        self._pruned = self.now
        horizon = self.now - self.window_s
        for server in [s for s, (t, _) in self._servers.items() if t < horizon]:
            del self._servers[server]
        self._sweep = list(self._ranges)

    def _prune(self, n: int) -> None:
        """Check the next ``n`` ranges of the running sweep: drop their samples older than the
        window, and the ranges left without any."""
        horizon = self.now - self.window_s
        sweep, ranges = self._sweep, self._ranges
        for _ in range(min(n, len(sweep))):
            rid = sweep.pop()
            q = ranges.get(rid)
            if q is None:
                continue
            while q and q[0].t < horizon:
                q.popleft()
            if not q:
                del ranges[rid]
                self._first.pop(rid, None)

    # --- queries ------------------------------------------------------------------------------

    def ranges(self) -> list[str]:
        """Ids of the ranges with samples in the window."""
        return sorted(self._ranges)

    def history(self, rid: str) -> list[Sample]:
        """All samples of a range in the window, oldest first."""
        return list(self._ranges.get(rid, ()))

    def latest(self, rid: str) -> Sample | None:
        """The newest sample of a range."""
        q = self._ranges.get(rid)
        try:
            return q[-1] if q else None
        except IndexError:  # emptied by the coordinator's loop just now
            return None

    def first_seen(self, rid: str) -> float | None:
        """When the range was first reported (in its current unbroken presence in the window)."""
        return self._first.get(rid)

    def window(self, rid: str, window_s: float, now: float | None = None) -> list[Sample]:
        """Samples of a range with ``t > now - window_s`` (``now`` defaults to the latest add)."""
        now = self.now if now is None else now
        q = tuple(self._ranges.get(rid, ()))  # a copy: the loop thread may append meanwhile
        if not q:
            return []
        lo = now - window_s
        if q[0].t > lo:  # the whole history is inside the window's start
            return [s for s in q if s.t <= now]
        out = []
        for s in reversed(q):  # samples are in time order: walk back from the newest only
            if s.t <= lo:
                break
            if s.t <= now:
                out.append(s)
        out.reverse()
        return out

    def hot_since(self, rid: str, threshold: float, max_gap: float = float("inf")) -> float | None:
        """Start of the current run of reports with score > ``threshold``, or None when not hot now.

        The run is the longest suffix of the range's samples that are all above the threshold with
        no two consecutive reports further than ``max_gap`` apart; its start is the time of its first
        sample (conservative: the load before the first hot report is unknown). A single report
        at or below the threshold (a dip) ends the run.
        """
        q = tuple(self._ranges.get(rid, ()))
        if not q or q[-1].score <= threshold:
            return None
        start = q[-1].t
        for s in reversed(q):
            if s.score <= threshold or start - s.t > max_gap:
                break
            start = s.t
        return start

    def avg(self, rid: str, metric: str = "score", window_s: float = 6.0, now: float | None = None) -> float | None:
        """Mean of a metric over the range's reports in the last ``window_s`` (None: no reports)."""
        xs = [s.metric(metric) for s in self.window(rid, window_s, now)]
        return sum(xs) / len(xs) if xs else None

    def peak(self, rid: str, metric: str = "score", window_s: float = 6.0, now: float | None = None) -> float | None:
        """Maximum of a metric over the range's reports in the last ``window_s`` (None: no reports)."""
        xs = [s.metric(metric) for s in self.window(rid, window_s, now)]
        return max(xs) if xs else None

    def key_batches(self, rid: str, window_s: float, now: float | None = None) -> list[list[str]]:
        """The sampled keys of each report in the window, oldest report first (empty ones left out)."""
        return [ks for s in self.window(rid, window_s, now) if (ks := s.keys)]

    def samples(self, rid: str, window_s: float | None = None, now: float | None = None) -> list[tuple[str, float]]:
        """Merged key samples over the window: ``[(PartitionKey, load weight)]`` in key order.

        Each report's sample is a reservoir over that interval's requests, so each of its keys
        stands for ``score / len(sample)`` of load (1 / len when the score is 0); summing over
        reports weights busy intervals more. ``window_s`` None means the whole history.
        """
        ss = self.history(rid) if window_s is None else self.window(rid, window_s, now)
        acc: dict[str, float] = {}
        for s in ss:
            ks = s.keys
            if not ks:
                continue
            w = (s.score if s.score > 0 else 1.0) / len(ks)
            for k in ks:
                acc[k] = acc.get(k, 0.0) + w
        return sorted(acc.items())

    def server_load(self, server: str) -> float:
        """Total score of the ranges in the server's latest report (0.0 if none in the window)."""
        rep = self._servers.get(server)
        return sum(rep[1].values()) if rep else 0.0

    def servers(self) -> list[str]:
        """Servers with a report in the window."""
        return sorted(self._servers)
