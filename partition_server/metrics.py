"""A partition server's Prometheus metrics (``rangetable_range_*`` and ``rangetable_server_*``).

The request path only bumps the plain per-range counters of :class:`~partition_server.served.Load`.
Every load report (one per heartbeat, 0.5 s) folds them into :class:`RangeTotals`: monotonic
counters, a latency histogram and the gauges the report carries. A scrape reads the totals under a
lock that only the report takes, so the request path never waits for it. The gauges hold exactly the
values of the last report sent to the coordinator. That is what ``rangetable top`` and ``ranges``
show, so the two agree.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from partition_server.memory import server_memory
from rangetable.kernel import storage
from rangetable.kernel.metrics import LATENCY_BUCKETS, bucket_counts, cumulative

COUNTERS = {  # Load field -> (metric name, help)
    "reads": ("rangetable_range_reads_total", "Read requests (point reads and scan pages) served by the range."),
    "writes": ("rangetable_range_writes_total", "Write requests (single writes and batches) served by the range."),
    "entities": ("rangetable_range_entities_accessed_total", "Entities read or written by the range's requests."),
    "bytes_in": ("rangetable_range_request_bytes_total", "Bytes of the requests the range served."),
    "busy": ("rangetable_range_busy_total", "Requests the range refused (RangeBusy while offline, ServerBusy throttling)."),
}
GAUGES = {  # load report field -> (metric name, help)
    "entities": ("rangetable_range_entities", "Entities in the range, exact (as `rangetable ranges` shows)."),
    "bytes": ("rangetable_range_size_bytes", "Bytes of entity data in the range: keys and stored values, exact."),
    "reads_s": ("rangetable_range_reads_per_second", "Reads per second over the last load report (as `top` shows)."),
    "writes_s": ("rangetable_range_writes_per_second", "Writes per second over the last load report (as `top` shows)."),
    "busy_s": ("rangetable_range_busy_per_second", "Refusals per second over the last load report."),
    "pending_compaction_bytes": ("rangetable_range_pending_compaction_bytes", "RocksDB's estimate of bytes compaction must rewrite."),
}


@dataclass
class RangeTotal:
    """Everything a range has served since this server opened it."""

    table: str
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    lat_buckets: list[float] = field(default_factory=lambda: [0.0] * (len(LATENCY_BUCKETS) + 1))
    lat_sum: float = 0.0
    lat_count: int = 0
    report: dict[str, Any] = field(default_factory=dict)


class RangeTotals:
    """Per-range totals of one partition server, folded in at every load report."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ranges: dict[str, RangeTotal] = {}

    def add(self, rid: str, table: str, load: Any, report: dict[str, Any]) -> None:
        """Fold one interval's :class:`~partition_server.served.Load` and its report into the totals."""
        with self.lock:
            t = self.ranges.get(rid)
            if t is None:
                t = self.ranges[rid] = RangeTotal(table)
            for k in COUNTERS:
                t.counters[k] += getattr(load, k)
            for i, c in enumerate(bucket_counts(load.lats, load.timed)):
                t.lat_buckets[i] += c
            t.lat_sum += load.lat_sum
            t.lat_count += load.timed
            t.report = report

    def retain(self, open_ids: Iterable[str]) -> None:
        """Forget ranges no longer open here (moved, split, merged, dropped)."""
        keep = set(open_ids)
        with self.lock:
            for rid in [r for r in self.ranges if r not in keep]:
                del self.ranges[rid]

    def copy(self) -> dict[str, RangeTotal]:
        """A consistent copy for a scrape."""
        with self.lock:
            return {rid: RangeTotal(t.table, dict(t.counters), list(t.lat_buckets), t.lat_sum, t.lat_count,
                                    dict(t.report)) for rid, t in self.ranges.items()}


class ServedRanges(Protocol):
    """What a scrape reads of the ranges a server serves (a :class:`~partition_server.ranges.RangeSet`)."""

    # read-only members, so that a narrower type matches: a RangeSet's ``open`` is a dict
    @property
    def totals(self) -> RangeTotals: ...

    @property
    def open(self) -> Mapping[str, Any]: ...  # range id -> what serves it (``.store``: its RangeStore)


class ScrapedServer(Protocol):
    """What a scrape reads of a partition server (a :class:`~partition_server.server.PartitionServer`)."""

    server_id: str
    lease_until: float
    pending: int

    @property
    def ranges(self) -> ServedRanges: ...  # also read by :func:`~partition_server.memory.server_memory`


def tombstones(ranges: ServedRanges) -> int:
    """Tombstones held by the open stores (a store closed between the copy and the read counts 0)."""
    total = 0
    for served in list(ranges.open.values()):
        try:
            total += served.store.tombstones()
        except Exception:  # closed meanwhile (RangeBusy), or a DB error
            continue
    return total


def collect(ps: ScrapedServer) -> list:
    """The metric families of a partition server."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    server = ps.server_id
    totals = ps.ranges.totals.copy()
    labels = ["table", "range", "server"]
    fams: list = []
    for key, (name, doc) in COUNTERS.items():
        fam = CounterMetricFamily(name, doc, labels=labels)
        for rid, t in totals.items():
            fam.add_metric([t.table, rid, server], t.counters[key])
        fams.append(fam)
    for key, (name, doc) in GAUGES.items():
        gauge = GaugeMetricFamily(name, doc, labels=labels)
        for rid, t in totals.items():
            gauge.add_metric([t.table, rid, server], float(t.report.get(key, 0) or 0))
        fams.append(gauge)
    hist = HistogramMetricFamily("rangetable_range_request_seconds",
                                 "Time the partition server spent on the range's requests answered without an error "
                                 "(buckets estimated from 512 sampled latencies per 0.5 s when busier).", labels=labels)
    for rid, t in totals.items():
        hist.add_metric([t.table, rid, server], cumulative(t.lat_buckets), t.lat_sum)
    fams.append(hist)
    lease = GaugeMetricFamily("rangetable_server_lease", "1 while the server holds a lease from the coordinator.",
                              labels=["server"])
    lease.add_metric([server], 1.0 if time.monotonic() < ps.lease_until else 0.0)
    pending = GaugeMetricFamily("rangetable_server_pending_requests",
                                "Requests that were already queued when the loop took the last one (the backlog).",
                                labels=["server"])
    pending.add_metric([server], float(ps.pending))
    served = GaugeMetricFamily("rangetable_server_ranges", "Ranges open on this server.", labels=["server"])
    served.add_metric([server], float(len(ps.ranges.open)))
    rocksdb = GaugeMetricFamily("rangetable_server_rocksdb_memory_bytes",
                                "RocksDB memory of the process: the shared block cache and every store's memtables.",
                                labels=["server", "kind"])
    for kind, nbytes in storage.memory_usage().items():
        rocksdb.add_metric([server, kind], float(nbytes))
    mem = server_memory(ps.ranges)
    held = GaugeMetricFamily("rangetable_server_memory_bytes",
                             "Memory the server holds by kind: replica_logs (the rings of recent batches), memtables and "
                             "table_readers (RocksDB's, summed over the open ranges).", labels=["server", "kind"])
    for kind in ("replica_logs", "memtables", "table_readers"):
        held.add_metric([server, kind], float(mem[kind]))
    ring = GaugeMetricFamily("rangetable_server_replica_log_batches", "Batches held in the replica logs' rings.",
                             labels=["server"])
    ring.add_metric([server], float(mem["replica_log_batches"]))
    events = CounterMetricFamily("rangetable_server_rocksdb_events",
                                 "RocksDB's counters summed over every store the process opened (its statistics): "
                                 "seeks, nexts, iter_skips (keys iterators stepped over: tombstones and old versions), "
                                 "block_cache_hits/misses, stall_micros, compaction and flush bytes, keys_written.",
                                 labels=["server", "event"])
    for event, n in storage.rocksdb_tickers().items():
        events.add_metric([server, event], float(n))
    tomb = GaugeMetricFamily("rangetable_server_rocksdb_tombstones",
                             "Deletions (point and range tombstones) the open stores' files and memtables hold.",
                             labels=["server"])
    tomb.add_metric([server], float(tombstones(ps.ranges)))
    blocks = GaugeMetricFamily("rangetable_server_python_allocated_blocks",
                               "Memory blocks the Python allocator holds (sys.getallocatedblocks): grows with a leak of objects.",
                               labels=["server"])
    blocks.add_metric([server], float(sys.getallocatedblocks()))
    return [*fams, lease, pending, served, rocksdb, held, ring, events, tomb, blocks]
