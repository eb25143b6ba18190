"""``rangetable bench feed``: what a table's change feed costs (issue 33), the same load with the feed off and on.

Each setting gets a cluster of its own as ``rangetable up`` starts it by default (three partition servers, three
replicas; balancer off so ranges stay put), in a temporary directory. On it:

1. **point writes**: a table split into six ranges (:data:`cli.bench.replicas.RANGES`) whose primaries are spread over the servers
   (:func:`cli.workload.layout.spread_table`), its feed switched off or left on. ``threads`` threads, a native
   client each, upsert random rows of ``rows`` (each write a fresh ``Seq``) for ``seconds``; a row every
   ``interval`` gives ops/s, p50/p99 and the partition servers' CPU per write. With the feed on, one
   **following reader** (a process of its own, ``read_changes(start="now", follow=True)``, so its client CPU
   does not share the writers' GIL) reads the table's changes meanwhile: the writers note the wall time of each
   acknowledgement by (RowKey, Seq), the reader the wall time each record's page reached it, and a record's
   **lag** is the second less the first (:class:`LagBook`; 0 when the reader was first). After the writers stop,
   the reader gets :data:`DRAIN_S` seconds to see every acknowledged write; those it did not are counted.
2. **bulk writes and disk**: ``catchup`` entities (~400 bytes) through the native bulk path into a second table of
   the same layout and setting, no reader; once its ranges have no compaction pending (:func:`settle`), what the
   load added to its range directories on every replica (less their bytes when empty), per million changes.
3. **catch-up** (feed on): one reader reads the second table's feed from the beginning to the live edge, in pages
   of :data:`CATCHUP_PAGE`; its changes/s against the feed-on point-write rate and the bulk rate.

Steady figures are over the intervals after the first, taken together (the first is warm-up). All replicas
share this machine's cores: these are the feed's costs on one host.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cli.bench.aio import ClientThreads
from cli.bench.http import server_pids, stop_temp_cluster, wait_quiet
from cli.bench.proc import cpu_seconds
from cli.bench.replicas import SERVERS, LoadSampler, split_keys, start_cluster, table_partitions
from cli.bench.scale import parallel_load
from cli.workload.disk_loss_watch import dir_bytes
from cli.workload.layout import spread_table, table_ranges
from rangetable import TableClient
from rangetable.kernel.stats import percentile_ms

Echo = Callable[[str], None]
REPLICAS = 3  # ``rangetable up``'s default, as SERVERS is
PARTITIONS = 60  # PartitionKeys of the point-write table, RANGES ranges of them
CATCHUP_PAGE = 10_000  # records per page of the catch-up reader (the most a page may ask)
SETTLE_S = 120.0  # how long the bulk table's compactions may take before its directories are measured
DRAIN_S = 10.0  # after the writers stop, how long the following reader may take to see their last writes
GOAL_COST = 0.10  # the aims: the feed costs at most 10 % of write throughput and p99 …
GOAL_LAG_P99_MS = 100.0  # … a following reader sees a write within 100 ms of its acknowledgement (p99) …
GOAL_CATCHUP = 5.0  # … and a reader catches up at 5 times the write rate or more
Key = tuple[str, int]  # a write: (RowKey, Seq)


@dataclass
class Rows:
    """Upserts of random rows of ``rows`` in :data:`PARTITIONS` PartitionKeys, each with a ``Seq`` of its own
    (a counter shared by the threads), so every write is told apart by (RowKey, Seq)."""

    rows: int
    partitions: int = PARTITIONS
    _seq: Any = field(default_factory=itertools.count, repr=False)

    def next(self, rng: random.Random) -> dict[str, Any]:
        """The next entity to upsert: ~150 bytes of mixed types."""
        i, seq = rng.randrange(self.rows), next(self._seq)
        return {"PartitionKey": f"p{i % self.partitions:07d}", "RowKey": f"r{i:09d}", "Seq": seq,
                "Qty": rng.randrange(100), "Price": rng.random() * 100, "Active": rng.random() < 0.5,
                "Note": "lorem ipsum dolor sit amet " * 3}


class LagBook:
    """Acknowledgement and sighting times of writes (wall clock, seconds), matched by (RowKey, Seq) whichever
    comes second; :meth:`take` hands over the lags since the last call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked: dict[Key, float] = {}  # acknowledged, not yet seen
        self.early: dict[Key, float] = {}  # seen, not yet acknowledged (the reader was first)
        self._lags: list[float] = []
        self._read = 0

    def ack(self, key: Key, t: float) -> None:
        """A writer got the acknowledgement of write ``key`` at ``t``."""
        with self._lock:
            seen = self.early.pop(key, None)
            if seen is None:
                self.acked[key] = t
            else:
                self._lags.append(max(0.0, seen - t))

    def saw(self, keys: list[Key], t: float) -> None:
        """The reader got the records of writes ``keys`` at ``t``."""
        with self._lock:
            self._read += len(keys)
            for key in keys:
                acked = self.acked.pop(key, None)
                if acked is None:
                    self.early[key] = t
                else:
                    self._lags.append(max(0.0, t - acked))

    def take(self) -> tuple[list[float], int]:
        """The lags and the records read since the last call."""
        with self._lock:
            lags, read = self._lags, self._read
            self._lags, self._read = [], 0
        return lags, read

    def unseen(self) -> int:
        """Acknowledged writes the reader has not seen yet."""
        with self._lock:
            return len(self.acked)


def _follow(native: str, table: str, poll: float, out: Any, stop: Any) -> None:
    """The following reader (a process of its own): puts ``(wall time, [(RowKey, Seq), …])`` on ``out`` per page
    that has records (and one empty one first: it is reading); ``("error", text)`` if reading fails; None at the
    end (``stop`` set)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked child: not the bench's unwinding handler
    client = TableClient(native, table)
    try:
        first = True
        for page in client.read_changes(start="now", follow=True, poll_interval=poll).by_page():
            t = time.time()
            if page.records or first:
                out.put((t, [(r.row_key, int(r.entity["Seq"])) for r in page.records if r.entity is not None]))
                first = False
            if stop.is_set():
                break
    except Exception as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        out.put(None)
        client.close()


class Follower:
    """The following reader's process and the thread of this one that hands its sightings to a :class:`LagBook`."""

    def __init__(self, native: str, table: str, poll: float, book: LagBook) -> None:
        ctx = multiprocessing.get_context("fork")  # the child makes its own ZeroMQ context (pyzmq checks the pid)
        self.book, self.out, self.stop = book, ctx.Queue(), ctx.Event()
        self.proc = ctx.Process(target=_follow, args=(native, table, poll, self.out, self.stop), daemon=True)
        self.ready = threading.Event()
        self.error: str | None = None
        self.drain = threading.Thread(target=self._drain, daemon=True)

    def start(self, timeout: float = 30.0) -> None:
        """Start reading; returns once the reader has its first page (the writes after it are all its)."""
        self.proc.start()
        self.drain.start()
        if not self.ready.wait(timeout) or self.error:
            raise RuntimeError(f"the following reader did not start: {self.error or 'no first page'}")

    def _drain(self) -> None:
        try:
            while True:
                try:
                    item = self.out.get(timeout=1.0)
                except queue.Empty:
                    if not self.proc.is_alive():
                        return
                    continue
                if item is None:
                    return
                if item[0] == "error":
                    self.error = item[1]
                    return
                self.book.saw(item[1], item[0])
                self.ready.set()
        finally:
            self.ready.set()

    def alive(self) -> bool:
        """The reader is still reading."""
        return self.proc.is_alive() and self.drain.is_alive()

    def close(self) -> None:
        """Stop the reader (killed if it does not stop within 10 s)."""
        self.stop.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.drain.join(5)


def _upsert(rows: Rows, book: LagBook | None) -> Callable[[TableClient, random.Random], None]:
    """A writer's operation: upsert the next row, noting its acknowledgement in ``book`` when given."""
    def op(client: TableClient, rng: random.Random) -> None:
        entity = rows.next(rng)
        client.upsert_entity(entity, mode="replace")
        if book is not None:
            book.ack((entity["RowKey"], entity["Seq"]), time.time())
    return op


def write_figures(lat: list[float], errors: int, cpu: float, seconds: float) -> dict[str, Any]:
    """Writes over ``seconds``: ops/s, p50/p99 and the partition servers' CPU (``cpu`` seconds) per write."""
    return {"ops_per_s": round(len(lat) / seconds, 1) if seconds > 0 else 0.0, "p50_ms": percentile_ms(lat, 0.5),
            "p99_ms": percentile_ms(lat, 0.99), "errors": errors,
            "server_cpu_us": round(cpu / max(1, len(lat)) * 1e6, 1)}


def lag_figures(lags: list[float], read: int, seconds: float) -> dict[str, Any]:
    """The following reader over ``seconds``: lag p50/p99/max and records read per second."""
    return {"lag_p50_ms": percentile_ms(lags, 0.5), "lag_p99_ms": percentile_ms(lags, 0.99),
            "lag_max_ms": percentile_ms(lags, 1.0), "read_per_s": round(read / seconds, 1) if seconds > 0 else 0.0}


def format_row(label: str, row: dict[str, Any]) -> str:
    """A printed interval row."""
    text = (f"{label:9} {row['t']:>5} s {row['ops_per_s']:>9,.0f} ops/s  p50 {row['p50_ms']:>6.2f} ms  "
            f"p99 {row['p99_ms']:>7.2f} ms  servers CPU {row['server_cpu_us']:>6,.0f} µs/write")
    if "lag_p50_ms" in row:
        text += (f"  lag p50 {row['lag_p50_ms']:>6.1f} ms p99 {row['lag_p99_ms']:>7.1f} ms "
                 f"max {row['lag_max_ms']:>7.1f} ms  read {row['read_per_s']:>8,.0f}/s")
    return text + (f"  errors {row['errors']}" if row["errors"] else "")


def run_writes(native: str, table: str, rows: Rows, threads: int, seconds: float, interval: float,
               pids: list[int], echo: Echo, label: str, book: LagBook | None = None,
               reader: Follower | None = None) -> dict[str, Any]:
    """``threads`` writers for ``seconds``, a row every ``interval``; returns the rows and the steady figures
    (the intervals after the first, together). With ``book`` the writers note their acknowledgements in it and
    the rows give the lags ``reader`` saw."""
    writers = ClientThreads(native, table, threads, _upsert(rows, book))
    tally = writers.tally
    n = max(1, int(seconds / interval))
    out: list[dict[str, Any]] = []
    lat_all: list[float] = []
    lags_all: list[float] = []
    secs_all, read_all, cpu_all = 0.0, 0, 0.0
    try:
        start = last = time.monotonic()
        cpu0 = cpu_seconds(pids)
        for k in range(1, n + 1):
            time.sleep(max(0.0, start + k * interval - time.monotonic()))
            if not writers.alive() or (reader is not None and not reader.alive()):
                why = reader.error if reader is not None and reader.error else "stopped early"
                raise RuntimeError(f"the {label} writers or reader: {why}")
            lat, errors = tally.take()
            lags, read = book.take() if book is not None else ([], 0)
            now, cpu = time.monotonic(), cpu_seconds(pids)
            row: dict[str, Any] = {"t": round(now - start), **write_figures(lat, errors, cpu - cpu0, now - last)}
            if book is not None:
                row.update(lag_figures(lags, read, now - last))
            out.append(row)
            echo(format_row(label, row))
            if k > 1 or n == 1:
                lat_all += lat
                lags_all += lags
                secs_all += now - last
                read_all += read
                cpu_all += cpu - cpu0
            last, cpu0 = now, cpu
    finally:
        writers.close()
    res: dict[str, Any] = {"rows": out,
                           "writes": write_figures(lat_all, sum(r["errors"] for r in out), cpu_all, secs_all)}
    if book is not None:
        res["lag"] = lag_figures(lags_all, read_all, secs_all)
    return res


def range_disk_bytes(root: str, ranges: list[dict]) -> int:
    """Bytes of the range directories of ``ranges`` on every server holding a copy."""
    return sum(dir_bytes(os.path.join(root, "servers", s, r["path"]))
               for r in ranges for s in (r.get("replicas") or [r["primary"]]))


def catch_up(native: str, table: str, interval: float, echo: Echo) -> dict[str, Any]:
    """Read ``table``'s feed from the beginning to the live edge; a line every ``interval``."""
    read, t0 = 0, time.monotonic()
    last = t0
    with TableClient(native, table) as client:
        for page in client.read_changes(start="beginning", results_per_page=CATCHUP_PAGE).by_page():
            read += len(page.records)
            now = time.monotonic()
            if now - last >= interval:
                echo(f"catch-up  {now - t0:>5.0f} s {read:>11,} changes read ({read / (now - t0):,.0f}/s)")
                last = now
    secs = time.monotonic() - t0
    echo(f"catch-up: {read:,} changes from the beginning in {secs:.1f} s = {read / secs:,.0f} changes/s")
    return {"changes": read, "seconds": round(secs, 2), "changes_s": round(read / secs, 1)}


def bulk_and_disk(doc: dict, root: str, on: bool, count: int, loaders: int, interval: float,
                  echo: Echo) -> dict[str, Any]:
    """Bulk-load ``count`` entities into a fresh table of the point-write layout and setting; once its compactions
    are done, what the load added to its range directories (every replica) and, feed on, the catch-up of its
    changes."""
    native, coord = doc["native"], doc["coordinator"]
    table = f"benchfeedbulk{uuid.uuid4().hex[:8]}"
    spread_table(coord, native, table, split_keys(table_partitions(count)))
    if not on:
        with TableClient(native, table) as t:
            t.set_table_settings(feed="off")
    empty = range_disk_bytes(root, table_ranges(coord, table))
    t0 = last = time.monotonic()
    done = [0]

    def progress(n: int) -> None:
        nonlocal last
        done[0] += n
        if (now := time.monotonic()) - last >= interval:
            echo(f"bulk      {now - t0:>5.0f} s {done[0]:>11,} entities ({done[0] / (now - t0):,.0f}/s)")
            last = now

    secs = parallel_load(native, table, 0, count, loaders, window=32, progress=progress)
    out: dict[str, Any] = {"entities": count, "seconds": round(secs, 2), "entities_s": round(count / secs, 1)}
    echo(f"feed {'on ' if on else 'off'}: bulk ingest of {count:,} entities in {secs:.1f} s = {count / secs:,.0f}/s")
    out["settle_s"] = round(wait_quiet({"coordinator": coord}, echo, SETTLE_S, table=table, still_s=3.0), 1)
    size = range_disk_bytes(root, table_ranges(coord, table))
    out.update(disk_bytes=size, disk_empty_bytes=empty, disk_mb_per_million=round((size - empty) / count, 1))
    echo(f"feed {'on ' if on else 'off'}: {size / 1e6:,.1f} MB in the table's range directories (all {REPLICAS} "
         f"replicas; {empty / 1e6:,.1f} MB empty) = {out['disk_mb_per_million']:,.1f} MB per million changes")
    if on:
        out["catchup"] = catch_up(native, table, interval, echo)
    return out


def run_setting(on: bool, *, seconds: float, interval: float, threads: int, rows: int, catchup: int, loaders: int,
                poll: float, echo: Echo) -> dict[str, Any]:
    """Point writes (with the following reader when ``on``), then the bulk load, disk and catch-up, on a fresh
    cluster."""
    name = "feed on" if on else "feed off"
    temp, doc = start_cluster(REPLICAS)
    try:
        native, coord = doc["native"], doc["coordinator"]
        root = doc.get("data_dir") or temp
        table = f"benchfeed{uuid.uuid4().hex[:8]}"
        ranges = spread_table(coord, native, table, split_keys(PARTITIONS))
        if not on:
            with TableClient(native, table) as t:
                t.set_table_settings(feed="off")
        primaries = sorted({r["primary"] for r in ranges})
        echo(f"{name}: table {table}, {len(ranges)} ranges on {', '.join(primaries)}, {REPLICAS} replicas; "
             f"{threads} threads upserting random rows of {rows:,} for {seconds:g} s"
             + (", one reader following the feed" if on else ""))
        pids = server_pids(doc, ("partition-server",))
        book = LagBook() if on else None
        reader = Follower(native, table, poll, book) if book is not None else None
        try:
            if reader is not None:
                reader.start()
            res = run_writes(native, table, Rows(rows), threads, seconds, interval, pids, echo, name, book, reader)
            if book is not None and reader is not None:
                t0 = time.monotonic()
                while book.unseen() and time.monotonic() - t0 < DRAIN_S and reader.alive():
                    time.sleep(0.05)
                res["lag"]["unseen"] = book.unseen()
                res["lag"]["drain_s"] = round(time.monotonic() - t0, 2)
                echo(f"{name}: " + ("every acknowledged write reached the reader" if not res["lag"]["unseen"] else
                                    f"{res['lag']['unseen']:,} acknowledged writes NOT read within {DRAIN_S:g} s")
                     + f" ({res['lag']['drain_s']} s after the writers stopped)")
        finally:
            if reader is not None:
                reader.close()
        out: dict[str, Any] = {"feed": on, "ranges": len(ranges), "primaries": primaries, **res}
        if catchup:
            out["bulk"] = bulk_and_disk(doc, root, on, catchup, loaders, interval, echo)
        return out
    finally:
        stop_temp_cluster(temp)


def summarize(off: dict[str, Any], on: dict[str, Any]) -> dict[str, Any]:
    """The feed's costs: throughput and p99 on against off, the lag, the catch-up against the write rates, disk
    per million changes, and whether each meets the issue's aim."""
    w0, w1 = off["writes"], on["writes"]
    share = w1["ops_per_s"] / w0["ops_per_s"] if w0["ops_per_s"] else 0.0
    p99 = w1["p99_ms"] / w0["p99_ms"] if w0["p99_ms"] else 0.0
    out: dict[str, Any] = {"throughput_cost": round(1 - share, 3), "p99_cost": round(p99 - 1, 3)}
    out["cost_met"] = out["throughput_cost"] <= GOAL_COST and out["p99_cost"] <= GOAL_COST
    lag = on.get("lag") or {}
    if lag:
        out["lag_met"] = lag["lag_p99_ms"] <= GOAL_LAG_P99_MS and not lag.get("unseen")
    b0, b1 = off.get("bulk"), on.get("bulk")
    if b1 and "catchup" in b1:
        rate = b1["catchup"]["changes_s"]
        out["catchup_x_writes"] = round(rate / w1["ops_per_s"], 2) if w1["ops_per_s"] else 0.0
        out["catchup_x_bulk"] = round(rate / b1["entities_s"], 2) if b1["entities_s"] else 0.0
        out["catchup_met"] = out["catchup_x_writes"] >= GOAL_CATCHUP and b1["catchup"]["changes"] >= b1["entities"]
    if b0 and b1:
        out["bulk_cost"] = round(1 - b1["entities_s"] / b0["entities_s"], 3) if b0["entities_s"] else 0.0
        out["disk_feed_mb_per_million"] = round(b1["disk_mb_per_million"] - b0["disk_mb_per_million"], 1)
        out["disk_growth"] = round(b1["disk_mb_per_million"] / b0["disk_mb_per_million"] - 1, 3) \
            if b0["disk_mb_per_million"] > 0 else 0.0
    return out


def _met(ok: bool) -> str:
    return "aim met" if ok else "aim MISSED"


def format_table(res: dict[str, Any]) -> str:
    """The final table of a run (``res``: :func:`run_feed_bench`'s result) and how figures moved per interval."""
    by = {s["feed"]: s for s in res["settings"]}
    cols = [c for c in (False, True) if c in by]
    lines = [f"cost of the change feed ({res['servers']} partition servers, {res['replicas']} replicas, on "
             f"{res['cpus']} cores; {res['threads']} client threads, {res['seconds']:g} s of point writes per setting)"]
    if "load_average" in res:
        la = res["load_average"]
        lines.append(f"machine load average (1 min) during the run: {la['min']} to {la['max']}, median {la['median']}")
    lines.append(f"{'':38}" + "".join(f"{'feed on' if c else 'feed off':>12}" for c in cols))

    def line(label: str, fn: Callable[[dict[str, Any]], str], need: str = "writes") -> None:
        if all(need in by[c] for c in cols):
            lines.append(f"{label:38}" + "".join(f"{fn(by[c]):>12}" for c in cols))

    line("write ops/s (steady)", lambda s: f"{s['writes']['ops_per_s']:,.0f}")
    line("write p50 ms", lambda s: f"{s['writes']['p50_ms']:.2f}")
    line("write p99 ms", lambda s: f"{s['writes']['p99_ms']:.2f}")
    line("partition-server CPU µs/write", lambda s: f"{s['writes']['server_cpu_us']:,.0f}")
    line("bulk ingest entities/s", lambda s: f"{s['bulk']['entities_s']:,.0f}", "bulk")
    line(f"disk MB per 1M changes ({res['replicas']} replicas)", lambda s: f"{s['bulk']['disk_mb_per_million']:,.1f}",
         "bulk")
    c = res.get("cost") or {}
    if "throughput_cost" in c:
        lines.append(f"feed on against off: write throughput {-c['throughput_cost'] * 100:+.1f}%, write p99 "
                     f"{c['p99_cost'] * 100:+.1f}% (aim: a cost of at most {GOAL_COST * 100:.0f}% each): "
                     f"{_met(c['cost_met'])}" + (f"; bulk ingest {-c['bulk_cost'] * 100:+.1f}%" if "bulk_cost" in c
                                                 else ""))
    lag = by[True].get("lag") if True in by else None
    if lag:
        unseen = f"{lag['unseen']:,} acknowledged writes never read" if lag.get("unseen") else \
            "every acknowledged write read"
        lines.append(f"lag from acknowledgement to a following reader: p50 {lag['lag_p50_ms']:.1f} ms, p99 "
                     f"{lag['lag_p99_ms']:.1f} ms, max {lag['lag_max_ms']:.1f} ms (aim p99 <= {GOAL_LAG_P99_MS:g} ms): "
                     f"{_met(c.get('lag_met', False))}; {unseen}")
    bulk = by[True].get("bulk") if True in by else None
    if bulk and "catchup" in bulk and "catchup_x_writes" in c:
        cu = bulk["catchup"]
        lines.append(f"catch-up of {cu['changes']:,} changes from the beginning: {cu['seconds']:.1f} s = "
                     f"{cu['changes_s']:,.0f} changes/s = {c['catchup_x_writes']:.1f}x the feed-on write rate "
                     f"(aim >= {GOAL_CATCHUP:g}x): {_met(c['catchup_met'])}; {c['catchup_x_bulk']:.1f}x the bulk "
                     "ingest rate")
    if "disk_feed_mb_per_million" in c:
        lines.append(f"disk per 1M changes: feed off {by[False]['bulk']['disk_mb_per_million']:,.1f} MB, on "
                     f"{by[True]['bulk']['disk_mb_per_million']:,.1f} MB: the feed {c['disk_feed_mb_per_million']:+,.1f}"
                     f" MB ({c['disk_growth'] * 100:+.0f}%)")
    lines.append("per interval:")
    series = [("write ops/s", "ops_per_s", "{:,.0f}"), ("write p99 ms", "p99_ms", "{:.1f}"),
              ("lag p50 ms", "lag_p50_ms", "{:.1f}"), ("lag p99 ms", "lag_p99_ms", "{:.1f}")]
    for label, key, fmt in series:
        for col in cols:
            vals = [fmt.format(r[key]) for r in by[col]["rows"] if key in r]
            if vals:
                lines.append(f"  {label:13} {'feed on' if col else 'feed off':9} " + " ".join(vals))
    return "\n".join(lines)


def run_feed_bench(*, seconds: float = 120.0, interval: float = 10.0, threads: int = 8, rows: int = 100_000,
                   catchup: int = 1_000_000, loaders: int = 2, poll: float = 0.05,
                   echo: Echo = print) -> dict[str, Any]:
    """Both settings, feed off then on (see the module docstring); returns the figures, with the machine's
    1-minute ``load_average`` over the run (other work on this machine skews them)."""
    res: dict[str, Any] = {"servers": SERVERS, "replicas": REPLICAS, "cpus": os.cpu_count(), "threads": threads,
                           "seconds": seconds, "interval_s": interval, "rows": rows, "catchup": catchup,
                           "poll_interval_s": poll}
    sampler = LoadSampler()
    sampler.start()
    try:
        res["settings"] = [run_setting(on, seconds=seconds, interval=interval, threads=threads, rows=rows,
                                       catchup=catchup, loaders=loaders, poll=poll, echo=echo) for on in (False, True)]
        res["cost"] = summarize(*res["settings"])
    finally:
        sampler.stop.set()
    res["load_average"] = sampler.summary()
    return res
