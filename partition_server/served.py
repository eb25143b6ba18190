"""A range as its partition server serves it (:class:`Served`), what it served since the last load
report (:class:`Load`), and which reports a heartbeat carries (:func:`only_changed`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from partition_server.store.range_store import RangeStore
from rangetable.keys import range_bounds

SAMPLE_SIZE = 64  # PartitionKeys in a range's reservoir sample (the balancer's split points)
LAT_SAMPLES = 512  # request latencies kept per report, for p99


@dataclass
class Load:
    """Counters of one range since the last load report."""

    reads: int = 0
    writes: int = 0
    entities: int = 0
    bytes: int = 0
    busy: int = 0
    lat_max: float = 0.0
    lat_sum: float = 0.0
    bytes_in: int = 0
    timed: int = 0  # requests answered without an error, whose latency is in lat_sum (and maybe in lats)
    lats: list[float] = field(default_factory=list)  # up to LAT_SAMPLES request latencies, for p99
    sample: list[str] = field(default_factory=list)  # reservoir of request PartitionKeys
    seen: int = 0

    def note(self, pk: str | None, weight: int = 1) -> None:
        """Add a request PartitionKey to the reservoir sample (weighted by cost)."""
        if pk is None:
            return
        sample = self.sample
        for _ in range(min(weight, 8)):
            self.seen += 1
            if len(sample) < SAMPLE_SIZE:
                sample.append(pk)
            else:
                j = int(random.random() * self.seen)
                if j < SAMPLE_SIZE:
                    sample[j] = pk


@dataclass
class Served:
    """One open range."""

    record: dict
    store: RangeStore
    state: str = "serving"
    lo: bytes = b""
    hi: bytes | None = None
    load: Load = field(default_factory=Load)
    low: str = field(init=False, default="")  # the record's PartitionKey bounds, for contains_pk
    high: str | None = field(init=False, default=None)
    epoch: int = field(init=False, default=-1)

    def __post_init__(self) -> None:
        self.low, self.high, self.epoch = self.record["low"], self.record["high"], self.record["epoch"]

    def reset(self, record: dict) -> None:
        """Serve ``record`` (a new epoch or bounds of the same range) from now on."""
        self.record = dict(record)
        self.state = "serving"
        self.lo, self.hi = range_bounds(record["low"], record["high"])
        self.__post_init__()

    def contains_pk(self, pk: str) -> bool:
        """True when the PartitionKey falls inside this range's bounds."""
        high = self.high
        return self.low <= pk and (high is None or pk < high)


@dataclass
class Deferred:
    """A control command answered later: the server's loop sends ``finish()``'s result (or error)
    once ``ready()`` is true, and keeps serving meanwhile."""

    ready: Callable[[], bool]
    finish: Callable[[], Any]


# Every range's load report is sent at least this often; in between, a report that did not change
# is left out and the coordinator takes the range's presence in the heartbeat as "unchanged"
# (LoadHistory.confirm). Below the balancer's merge cool-down (60 s), so that window always holds
# a report. PD's region heartbeat is 60 s.
FULL_REPORT_S = 30.0


def only_changed(report: dict[str, dict], sent: dict[str, dict], full: bool) -> dict[str, dict]:
    """The per-range reports that differ from the last ones sent (all of them when ``full``);
    ``sent`` is updated and forgets ranges no longer reported.

    An idle range's report is the same every heartbeat, so a server with 100 idle ranges sends
    100 reports every ``FULL_REPORT_S`` instead of every heartbeat (PD likewise takes region
    heartbeats far less often than store heartbeats, and on change). The coordinator takes a range
    listed in the heartbeat without a report as "its latest report still holds"
    (``LoadHistory.confirm``).
    """
    out = report if full else {rid: r for rid, r in report.items() if sent.get(rid) != r}
    for rid in [rid for rid in sent if rid not in report]:
        del sent[rid]
    sent.update(out)
    return out
