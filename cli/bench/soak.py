"""``rangetable bench soak``: a workload held for minutes, one row of figures per interval.

Worker threads, each with its own client (the native client, or with ``http`` the Azure SDK over
REST), run a mix of operations for ``minutes``. Every ``interval`` seconds one row is printed: ops/s,
p50/p99/max latency, the RSS and CPU of every cluster process and of this client (for a partition server
also what its metrics say it holds: block cache, memtables, replica-log rings, table readers), bytes on
disk under the data root, RocksDB's pending-compaction estimate summed over all ranges, what RocksDB's own
statistics counted in the interval over every partition server (keys iterators skipped per seek, block
cache hit rate, write stalls, bytes compaction wrote, tombstones held) and the machine's load average. The
last line is the verdict, as issue 36's goal reads: the last 10 minutes hold on average at least 90% of minute
2's ops/s (:func:`hold_rows`), and the cluster's RSS less its block caches, on average over those minutes, grew at
most 10% over its average in as many minutes after warm-up (:func:`memory_windows`).

Mixes (weights per operation):

* ``mixed`` — point inserts of fresh keys, upserts (replace), merges and gets of a preloaded key set,
  deletes of the thread's oldest inserted key (so the table stays about the same size, and deletes
  come in key order: RocksDB's queue pattern), 100-operation batches, PartitionKey queries of a
  100-entity partition and pages of a paged full scan (1000 entities, resumed by continuation token);
* ``hot-partition`` — upserts of new RowKeys into one PartitionKey (one range), the workload that
  exposed the request-record purge bug.
"""

from __future__ import annotations

import collections
import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cli.bench.proc import cpu_seconds, rss_bytes
from rangetable.kernel.stats import percentile_ms

MIXES: dict[str, dict[str, int]] = {
    "mixed": {"insert": 15, "upsert": 15, "merge": 10, "get": 30, "delete": 14, "batch": 3, "pk_query": 6,
              "scan_page": 1},
    "hot-partition": {"hot_upsert": 1},
}
PRELOAD_PARTITIONS = 32  # preloaded partitions of 100 entities: the keys upserts, merges, gets and queries use
HOLD_SHARE = 0.9  # the last minutes must hold this share of minute 2's ops/s (:func:`hold_rows`)
HOLD_WINDOW_S = 600.0  # the last minutes judged: 10
RSS_GROWTH = 0.10  # at most this growth of the cluster's RSS after warm-up


@dataclass
class Tally:
    """Operations finished in one interval: latencies and errors by code."""

    lat: list[float] = field(default_factory=list)
    by_kind: collections.Counter = field(default_factory=collections.Counter)
    errors: collections.Counter = field(default_factory=collections.Counter)


class Recorder:
    """Thread-safe sink of finished operations; :meth:`take` hands over and resets the interval."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cur = Tally()

    def add(self, kind: str, seconds: float, error: str | None = None) -> None:
        """Record one operation of ``kind`` that took ``seconds`` (``error``: its error code)."""
        with self._lock:
            t = self._cur
            t.lat.append(seconds)
            t.by_kind[kind] += 1
            if error:
                t.errors[error] += 1

    def take(self) -> Tally:
        """The operations since the last call."""
        with self._lock:
            t, self._cur = self._cur, Tally()
        return t


def entity(pk: str, rk: str, i: int) -> dict[str, Any]:
    """A ~250-byte entity of mixed types."""
    return {"PartitionKey": pk, "RowKey": rk, "name": f"customer-{i:08d}", "qty": i % 1000,
            "price": i * 0.25 + 0.5, "active": i % 3 == 0, "note": "lorem ipsum dolor sit amet " * 4}


def error_code(exc: Exception) -> str:
    """Azure's error code of a native or SDK error, else the exception's class name."""
    code = getattr(exc, "error_code", None)
    return str(code) if code else type(exc).__name__


class Worker(threading.Thread):
    """One client running a weighted mix of operations until ``stop_at`` (monotonic seconds)."""

    def __init__(self, client: Any, idx: int, mix: dict[str, int], stop_at: float, rec: Recorder, seed: int) -> None:
        super().__init__(daemon=True, name=f"soak-{idx}")
        self.client, self.idx, self.stop_at, self.rec = client, idx, stop_at, rec
        self.rnd = random.Random(seed * 1000 + idx)
        self.kinds = list(mix)
        self.weights = [mix[k] for k in self.kinds]
        self.n = 0
        self.inserted: collections.deque[tuple[str, str]] = collections.deque()
        self.token: Any = None
        self.run_id = uuid.uuid4().hex[:6]

    def run(self) -> None:
        """Run operations until the deadline, recording each."""
        choices = self.rnd.choices
        while time.monotonic() < self.stop_at:
            kind = choices(self.kinds, self.weights)[0]
            t0 = time.perf_counter()
            err = None
            try:
                kind = self.op(kind)
            except Exception as exc:
                err = error_code(exc)
            self.rec.add(kind, time.perf_counter() - t0, err)
        self.client.close()

    def _preloaded(self) -> tuple[str, str]:
        r = self.rnd
        return f"k{r.randrange(PRELOAD_PARTITIONS):03d}", f"r{r.randrange(100):03d}"

    def op(self, kind: str) -> str:
        """Run one operation of ``kind``; returns the kind it really ran (a delete with nothing to
        delete inserts instead)."""
        self.n += 1
        n, t = self.n, self.client
        if kind == "delete" and not self.inserted:
            kind = "insert"
        if kind == "insert":
            key = (f"w{self.idx}p{n % 16:02d}", f"{self.run_id}-{n:010d}")
            t.create_entity(entity(*key, n))
            self.inserted.append(key)
        elif kind == "delete":
            t.delete_entity(*self.inserted.popleft())
        elif kind == "upsert":
            t.upsert_entity(entity(*self._preloaded(), n), mode="replace")
        elif kind == "merge":
            pk, rk = self._preloaded()
            t.update_entity({"PartitionKey": pk, "RowKey": rk, "qty": n}, mode="merge")
        elif kind == "get":
            t.get_entity(*self._preloaded())
        elif kind == "batch":
            pk = f"b{self.idx}-{n % 8}"
            t.submit_transaction([("upsert", entity(pk, f"r{j:03d}", n + j)) for j in range(100)])
        elif kind == "pk_query":
            pk = f"k{self.rnd.randrange(PRELOAD_PARTITIONS):03d}"
            for _ in t.query_entities(f"PartitionKey eq '{pk}'"):
                pass
        elif kind == "scan_page":
            pages = t.list_entities(results_per_page=1000).by_page(continuation_token=self.token)
            for _ in next(pages):
                pass
            self.token = pages.continuation_token
        elif kind == "hot_upsert":
            t.upsert_entity({"PartitionKey": "hot", "RowKey": f"{self.idx}-{self.run_id}-{n:010d}", "qty": n,
                             "note": "x" * 60}, mode="replace")
        else:
            raise ValueError(f"unknown operation {kind!r}")
        return kind


# --- what the cluster looks like --------------------------------------------------------------


def disk_bytes(path: str) -> int:
    """Bytes allocated on disk under ``path`` (hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def pending_compaction(status: dict) -> int:
    """RocksDB's pending-compaction estimate summed over the ranges of a coordinator status."""
    from cli.coordinator_client import range_loads

    return sum(int(ld.get("pending_compaction_bytes", 0) or 0) for ld in range_loads(status).values())


MEMORY_KINDS = {  # Prometheus (metric, kind) -> the letter a row prints it under
    ("rangetable_server_rocksdb_memory_bytes", "block_cache"): "c",
    ("rangetable_server_memory_bytes", "memtables"): "m",
    ("rangetable_server_memory_bytes", "replica_logs"): "r",
    ("rangetable_server_memory_bytes", "table_readers"): "t",
}


def parse_memory(text: str) -> dict[str, int]:
    """The memory figures of one partition server's Prometheus text, by row letter (:data:`MEMORY_KINDS`)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if not rest or 'kind="' not in rest:
            continue
        kind = rest.split('kind="', 1)[1].split('"', 1)[0]
        letter = MEMORY_KINDS.get((name, kind))
        if letter is not None:
            out[letter] = int(float(line.rsplit(" ", 1)[1]))
    return out


def parse_rocksdb(text: str) -> dict[str, float]:
    """One partition server's RocksDB figures from its Prometheus text: every event counter of
    ``rangetable_server_rocksdb_events_total`` by event, and ``tombstones`` (a gauge)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("rangetable_server_rocksdb_events_total{") and 'event="' in line:
            out[line.split('event="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("rangetable_server_rocksdb_tombstones{"):
            out["tombstones"] = float(line.rsplit(" ", 1)[1])
    return out


def growth(prev: float, cur: float) -> float:
    """How much a counter grew between two reads; one that went back (its process restarted) counts from 0."""
    return cur - prev if cur >= prev else cur


def rocksdb_interval(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, float]:
    """What RocksDB counted between two scrapes of every partition server (by server id, as
    :func:`parse_rocksdb` reads them), summed over the servers: ``skip_per_seek`` (internal keys iterators
    stepped over per seek: tombstones and old versions), ``cache_hit`` (block cache hits per lookup, 0..1),
    ``stall_ms``, ``compaction_mib`` (bytes compaction wrote) and ``tombstones`` (held at the end). A server
    that restarted (a counter went back) counts from 0."""
    def delta(event: str) -> float:
        return sum(growth(before.get(sid, {}).get(event, 0.0), now.get(event, 0.0)) for sid, now in after.items())

    seeks, hits, misses = delta("seeks"), delta("block_cache_hits"), delta("block_cache_misses")
    return {"skip_per_seek": round(delta("iter_skips") / seeks, 2) if seeks else 0.0,
            "cache_hit": round(hits / (hits + misses), 4) if hits + misses else 0.0,
            "stall_ms": round(delta("stall_micros") / 1000, 1),
            "compaction_mib": round(delta("compaction_write_bytes") / (1 << 20), 1),
            "tombstones": sum(m.get("tombstones", 0.0) for m in after.values())}


def scrape_servers(doc: dict) -> dict[str, str]:
    """Each partition server's Prometheus text by id (a server without metrics, or not answering, is left out)."""
    import urllib.request

    out: dict[str, str] = {}
    for p in doc.get("processes", []):
        if p.get("role") != "partition-server" or not p.get("metrics"):
            continue
        try:
            with urllib.request.urlopen(p["metrics"], timeout=5) as resp:
                out[p["id"]] = resp.read().decode()
        except OSError:
            continue
    return out


def cpu_shares(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Each process's CPU over an interval, in % of one core, from its CPU seconds at both ends (a process
    that restarted counts from 0)."""
    if seconds <= 0:
        return {}
    return {k: round(100 * growth(before.get(k, 0.0), v) / seconds, 1) for k, v in after.items()}


def process_ids(doc: dict) -> list[tuple[str, int]]:
    """(id, pid) of every process of a cluster.json."""
    return [(p["id"], p["pid"]) for p in doc.get("processes", []) if p.get("pid")]


# --- pure: rows and verdict -------------------------------------------------------------------


def make_row(t: float, seconds: float, tally: Tally, rss: dict[str, int], disk: int, pending: int,
             cache: dict[str, int] | None = None, held: dict[str, dict[str, int]] | None = None,
             load: float = 0.0, cpu: dict[str, float] | None = None,
             rocksdb: dict[str, float] | None = None) -> dict[str, Any]:
    """One interval's figures; ``cache`` is each partition server's block-cache charge (in its RSS),
    ``held`` its other memory figures by letter (:func:`parse_memory`), ``load`` the machine's load average,
    ``cpu`` each process's CPU in % of a core (:func:`cpu_shares`), ``rocksdb`` what RocksDB counted
    (:func:`rocksdb_interval`)."""
    lat = tally.lat
    cache = cache or {}
    held = {k: {x: n for x, n in v.items() if x != "c"} for k, v in (held or {}).items()}
    return {"t_s": round(t, 1), "ops": len(lat), "ops_s": round(len(lat) / seconds, 1) if seconds > 0 else 0.0,
            "p50_ms": percentile_ms(lat, 0.5), "p99_ms": percentile_ms(lat, 0.99), "max_ms": percentile_ms(lat, 1.0),
            "errors": dict(tally.errors), "by_kind": dict(tally.by_kind), "rss": rss,
            "rss_total": sum(rss.values()), "cache": cache, "cache_total": sum(cache.values()),
            "disk_bytes": disk, "pending_compaction_bytes": pending, "held": held, "load": round(load, 2),
            "cpu": cpu or {}, "rocksdb": rocksdb or {}}


def format_row(row: dict[str, Any]) -> str:
    """A row of the soak table: a partition server's RSS is followed by its block cache (``/c``), memtables
    (``/m``), replica-log rings (``/r``) and table readers (``/t``) when its metrics give them, and every
    process's by its CPU in % of a core (``@``)."""
    mib = 1 << 20
    cache, held, cpu = row.get("cache", {}), row.get("held", {}), row.get("cpu", {})

    def proc(k: str, v: int) -> str:
        parts = [f"c{cache[k] // mib}"] if k in cache else []
        mine = held.get(k, {})
        parts += [f"{x}{mine[x] // mib}" for x in "mrt" if x in mine]
        return f"{k} {v // mib}" + "".join("/" + p for p in parts) + (f"@{cpu[k]:.0f}%" if k in cpu else "")

    rss = " ".join(proc(k, v) for k, v in row["rss"].items())
    if "client" in cpu:
        rss += f" client @{cpu['client']:.0f}%"
    errs = sum(row["errors"].values())
    rk = row.get("rocksdb") or {}
    rocks = (f"{rk.get('skip_per_seek', 0.0):>9.1f} {rk.get('cache_hit', 0.0) * 100:>5.1f} "
             f"{rk.get('tombstones', 0.0) / 1000:>7.1f} {rk.get('stall_ms', 0.0):>6.0f} {rk.get('compaction_mib', 0.0):>7.1f}")
    return (f"{row['t_s']:>7.0f} {row['ops_s']:>9.1f} {row['p50_ms']:>7.2f} {row['p99_ms']:>7.2f} "
            f"{row['max_ms']:>8.1f} {errs:>6} {row['disk_bytes'] / mib:>9.1f} "
            f"{row['pending_compaction_bytes'] / mib:>8.1f} {rocks} {row.get('load', 0.0):>5.1f}  {rss}")


HEADER = f"{'t (s)':>7} {'ops/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>8} {'errors':>6} {'disk MiB':>9} " \
         f"{'pend MiB':>8} {'skip/seek':>9} {'hit %':>5} {'tomb k':>7} {'stall':>6} {'cmp MiB':>7} {'load':>5}  " \
         "RSS MiB per process (of it: /c RocksDB block cache, /m memtables, /r replica-log rings, /t table readers), " \
         "@ its CPU in % of a core"


def trend(rows: list[dict[str, Any]]) -> float:
    """The least-squares line of ops/s over time through every row: its value at the last row's time
    over its value at the first's (1.0: flat). Unlike the verdict's last-over-first, one noisy interval
    at either end moves it little; 0.0 for fewer than two rows or a line through zero."""
    if len(rows) < 2:
        return 0.0
    ts, ys = [r["t_s"] for r in rows], [r["ops_s"] for r in rows]
    try:
        slope, intercept = statistics.linear_regression(ts, ys)
    except statistics.StatisticsError:  # every row at one time: no slope
        return 1.0 if statistics.fmean(ys) > 0 else 0.0
    start, end = intercept + slope * ts[0], intercept + slope * ts[-1]
    return end / start if start > 0 else 0.0


def held_total(row: dict[str, Any]) -> int:
    """Bytes the partition servers' bounded pools other than the block cache hold in a row: memtables,
    replica-log rings and table readers."""
    return sum(sum(m.values()) for m in row.get("held", {}).values())


def hold_rows(rows: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """The row throughput is measured from and the rows judged against it: minute 2 (the second row; the first
    is the client's and the caches' warm-up) and the last :data:`HOLD_WINDOW_S` (at most the last third of the
    rows, at least the last one), as issue 36's goal reads ("the last 10 minutes hold >= 90% of minute 2's
    ops/s"). A run of fewer than 4 rows is measured from its first. One lucky or unlucky minute at either end
    does not decide it. Returns the first row's index and the rows judged."""
    ref = 1 if len(rows) >= 4 else 0
    window = sum(1 for r in rows if r["t_s"] > rows[-1]["t_s"] - HOLD_WINDOW_S)
    return ref, rows[-max(1, min(window, len(rows) // 3)):]


def memory_windows(n_rows: int, warmup_rows: int, judged: int) -> tuple[range, range]:
    """The indexes of the rows whose memory is compared: the last ``judged`` rows (as many as throughput
    judges) against as many from the end of warm-up on (the last warm-up row first), never overlapping
    them unless the run is too short for both, at least one row each. Means over windows, not two single rows: memtables fill and flush in
    cycles of minutes (99–203 MiB over three servers from one minute to the next), so two single rows
    would measure where each stood in its cycle, not growth."""
    start = min(max(warmup_rows, 1), n_rows - 1) - 1
    return range(start, max(start + 1, min(start + judged, n_rows - judged))), range(n_rows - judged, n_rows)


def verdict(rows: list[dict[str, Any]], warmup_rows: int) -> dict[str, Any]:
    """Did throughput hold and memory stay flat? Compares the mean ops/s of the last minutes with minute 2's
    (:func:`hold_rows`) and the cluster's mean memory over the same last minutes with its mean over as many
    minutes from the end of warm-up (:func:`memory_windows`).

    The memory judged is RSS less the block caches: a block cache fills up to its fixed capacity
    (``--block-cache-mb``) as reads touch more of the data, which is warm-up however long it takes;
    what must not grow is everything else. ``rss_growth_raw`` is the growth of plain RSS; ``rest_growth``
    that of RSS less every bounded pool the servers report (block cache, memtables, replica-log rings,
    table readers: what is left is the processes' heaps); ``trend`` is :func:`trend`. Those three are
    printed beside the verdict, not judged."""
    if len(rows) < 2:
        return {"ok": False, "reason": "fewer than two intervals: run longer"}
    at, tail = hold_rows(rows)
    ref = rows[at]
    held = sum(r["ops_s"] for r in tail) / len(tail)
    hold = held / ref["ops_s"] if ref["ops_s"] else 0.0
    windows = memory_windows(len(rows), warmup_rows, len(tail))
    before, after = ([rows[i] for i in w] for w in windows)

    def mean(window: list[dict[str, Any]], key: Callable[[dict[str, Any]], int]) -> float:
        return sum(key(r) for r in window) / len(window)

    def growth(key: Callable[[dict[str, Any]], int]) -> float:
        base = mean(before, key)
        return mean(after, key) / base - 1 if base else 0.0

    heap = growth(lambda r: r["rss_total"] - r.get("cache_total", 0))
    ok = hold >= HOLD_SHARE and heap <= RSS_GROWTH
    pools = growth(lambda r: r["rss_total"] - r.get("cache_total", 0) - held_total(r))
    return {"ok": ok, "hold": round(hold, 3), "rss_growth": round(heap, 3), "rest_growth": round(pools, 3),
            "held_mib": [round(mean(w, held_total) / (1 << 20)) for w in (before, after)],
            "rss_growth_raw": round(growth(lambda r: r["rss_total"]), 3),
            "block_cache_mib": [round(mean(w, lambda r: r.get("cache_total", 0)) / (1 << 20)) for w in (before, after)],
            "memory_rows": [[w[0] + 1, w[-1] + 1] for w in windows],
            "from_row": at + 1, "from_ops_s": ref["ops_s"], "held_rows": len(tail),
            "held_ops_s": round(held, 1), "trend": round(trend(rows), 3)}


def format_verdict(v: dict[str, Any]) -> str:
    """The verdict line."""
    if "hold" not in v:
        return f"FAIL  {v['reason']}"
    word = "PASS" if v["ok"] else "FAIL"
    c0, c1 = v.get("block_cache_mib", (0, 0))
    h0, h1 = v.get("held_mib", (0, 0))
    (a0, a1), (b0, b1) = v.get("memory_rows", ((0, 0), (0, 0)))
    rest = (f"; less memtables, replica-log rings and table readers too ({h0} -> {h1} MiB), RSS grew "
            f"{v.get('rest_growth', 0) * 100:+.1f}%") if h0 or h1 else ""
    return (f"{word}  last {v['held_rows']} intervals {v['held_ops_s']:.1f} ops/s on average = "
            f"{v['hold'] * 100:.1f}% of interval {v['from_row']}'s ({v['from_ops_s']:.1f}; needs >= "
            f"{HOLD_SHARE * 100:.0f}%), RSS less block caches grew "
            f"{v['rss_growth'] * 100:+.1f}% after warm-up, intervals {b0}-{b1} against {a0}-{a1} on average (needs <= {RSS_GROWTH * 100:.0f}%; RSS "
            f"{v.get('rss_growth_raw', 0) * 100:+.1f}%, block caches {c0} -> {c1} MiB); fitted over every "
            f"interval, ops/s ended at {v.get('trend', 0) * 100:.1f}% of their start" + rest)


# --- the run ----------------------------------------------------------------------------------


def make_clients(doc: dict, table: str, http: bool) -> Callable[[], Any]:
    """A factory of table clients: the native client, or the Azure SDK's over REST."""
    if http:
        from azure.data.tables import TableClient

        return lambda: TableClient.from_connection_string(doc["connection_string"], table)
    from rangetable.client import TableServiceClient

    return lambda: TableServiceClient(doc["native"]).get_table_client(table)


def preload(client: Any) -> None:
    """The key set upserts, merges, gets and queries use: PRELOAD_PARTITIONS partitions of 100."""
    for p in range(PRELOAD_PARTITIONS):
        pk = f"k{p:03d}"
        client.submit_transaction([("upsert", entity(pk, f"r{j:03d}", j)) for j in range(100)])


def run_soak(doc: dict, data_dir: str, *, minutes: float = 10.0, threads: int = 6, mix: str = "mixed",
             interval: float = 60.0, http: bool = False, seed: int = 0, warmup: float | None = None,
             background: int = 0, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the soak against the cluster of ``doc`` (its cluster.json) whose data root is ``data_dir``.

    ``background`` entities (partitions ``d…`` of 1000 that only scans read) are bulk-loaded first, so
    the first interval does not run on an empty table. ``warmup`` (seconds, default a fifth of the
    run, at least one interval) is excluded from the RSS comparison. Returns ``{"rows", "verdict", ...}``.
    """
    from cli.cluster_file import read_cluster
    from cli.coordinator_client import call
    from rangetable.client.bulk import bulk_upsert

    table = "soak" + uuid.uuid4().hex[:8]
    new_client = make_clients(doc, table, http)
    setup = new_client()
    setup.create_table()
    if mix == "mixed":
        preload(setup)
    if background:
        bulk_upsert(doc["native"], table, (entity(f"d{i // 1000:05d}", f"r{i % 1000:04d}", i)
                                           for i in range(background)), window=32)
    duration = minutes * 60.0
    warmup_rows = max(1, round((duration / 5 if warmup is None else warmup) / interval))
    rec = Recorder()
    stop_at = time.monotonic() + duration
    workers = [Worker(new_client(), i, MIXES[mix], stop_at, rec, seed) for i in range(threads)]
    echo(f"soak: {mix} mix, {threads} threads, {'REST (Azure SDK)' if http else 'native client'}, "
         f"{minutes:g} min, a row every {interval:g} s")
    echo(HEADER)
    def cpu_now(cur: dict) -> dict[str, float]:
        return {**{pid_id: cpu_seconds([pid]) for pid_id, pid in process_ids(cur)}, "client": cpu_seconds([os.getpid()])}

    rocks_before = {sid: parse_rocksdb(text) for sid, text in scrape_servers(doc).items()}
    cpu_before = cpu_now(doc)
    start = last = time.monotonic()
    for w in workers:
        w.start()
    rows: list[dict[str, Any]] = []
    k = 0
    while last < stop_at:
        k += 1
        boundary = min(start + k * interval, stop_at)
        while (now := time.monotonic()) < boundary:
            time.sleep(min(1.0, boundary - now))
        tally = rec.take()
        cur = read_cluster(data_dir) or doc  # a restarted process has a new pid
        cpu_after = cpu_now(cur)
        try:
            pending = pending_compaction(call(doc["coordinator"], {"op": "status"}, timeout=5))
        except Exception:
            pending = -1
        texts = scrape_servers(cur)
        mem = {sid: parse_memory(text) for sid, text in texts.items()}
        rocks_after = {sid: parse_rocksdb(text) for sid, text in texts.items()}
        row = make_row(now - start, now - last, tally, {pid_id: rss_bytes(pid) for pid_id, pid in process_ids(cur)},
                       disk_bytes(data_dir), pending, {k: m["c"] for k, m in mem.items() if "c" in m}, mem,
                       os.getloadavg()[0], cpu_shares(cpu_before, cpu_after, now - last),
                       rocksdb_interval(rocks_before, rocks_after))
        rows.append(row)
        echo(format_row(row))
        last, cpu_before, rocks_before = now, cpu_after, rocks_after
    for w in workers:
        w.join(timeout=30)
    try:
        setup.delete_table()
    finally:
        setup.close()
    v = verdict(rows, warmup_rows)
    echo(format_verdict(v))
    return {"mix": mix, "threads": threads, "http": http, "minutes": minutes, "interval_s": interval,
            "background_entities": background, "rows": rows, "verdict": v}
