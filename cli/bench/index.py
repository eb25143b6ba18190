"""``rangetable bench index``: what secondary indexes cost (issue 34, item 7): queries through an index at size,
writes with 0, 1 and 3 indexes, the index's lag, and an online build at size through a split and a failover.

Every cluster is one as ``rangetable up`` starts it by default (three partition servers, three replicas, one
native and one HTTP frontend; balancer off so ranges stay put), in a temporary directory. A row every
``interval`` (10 s); the **steady** figures are the rows after the first, taken together (the first is warm-up).
CPU is user+system time from ``/proc`` of the partition servers and, apart, of the frontends (the native one
and the HTTP one, where the index's applier runs), over the row, divided by its operations.

1. **queries at size** (one cluster): a table of ``rows`` entities (~300 bytes each, :func:`loaded_entity`),
   bulk-loaded in six ranges spread over the servers, :data:`MATCH` per PartitionKey and ``Cat`` taking
   ``rows / MATCH`` values, each on :data:`MATCH` rows scattered over the whole table. An index ``ByCat`` on
   ``Cat`` is declared and timed until ``ready`` (**build time and rate**). Then, each for ``query_seconds``,
   one client thread runs back to back: (a) ``Cat eq 'c…'`` through the native client (every answer's ``plan``
   must name the index, without a fallback), (b) the same filter ``and PartitionKey ge ''`` (a key constraint:
   the planner scans the base table; the answers must carry no index plan; a scan of the whole table is slow,
   so it runs as often as ``query_seconds`` allows but at least :data:`MIN_SCANS` times: see ``queries``),
   (c) ``PartitionKey eq 'p…'`` (:data:`MATCH` rows of one partition), (d) query (a) through the unchanged
   Azure SDK (``azure.data.tables``, the cluster's connection string) over REST, (e) query (b) through the Azure
   SDK (a base scan over REST; with (b), the server CPU per row scanned). Each: queries/s, p50/p99 and
   the CPU per query; every answer must have :data:`MATCH` rows (``wrong`` counts those that did not). The
   servers' CPU while idle (the applier polls the feed) is measured first, and the ``net`` CPU per query is the
   steady CPU less that rate. The ratios the issue aims at: index CPU / scan CPU (net; aim <= 1/100) and index
   latency / PartitionKey-query latency (p50; aim <= 2).
2. **writes with 0, 1 and 3 indexes** (a cluster each): the point-write table of ``bench feed`` (six ranges of
   :data:`PARTITIONS` PartitionKeys), with none, ``Cat``, or ``Cat``, ``Tag`` and ``Qty`` indexed (each
   ``ready`` before the writes start). ``threads`` native clients upsert random rows of ``write_rows`` with
   random values of the indexed properties (so every write of an indexed row moves its entries) for
   ``seconds``: ops/s, p50/p99, partition-server and frontend CPU per write.
3. **index lag** (with 1 index, during 2.): a prober thread writes, every :data:`PROBE_EVERY_S`, a row with a
   value of ``Cat`` never used before and polls, every :data:`PROBE_POLL_S`, the query ``Cat eq <it>`` that
   accepts an old answer (``"staleness": 1e9``: no read-your-writes wait) until the row is in the answer: the
   **lag** from the write's acknowledgement. Every :data:`RYW_EVERY_S` it also writes a fresh value and at once
   queries it without staleness (read-your-writes): that query's latency, the wait its answer reports
   (``plan["fresh_wait_ms"]``), whether it had the row, and how many fell back to scanning the base table
   (``plan["fallback"]``: the index did not catch up within the frontend's wait). The prober's queries (and
   such fallback scans) add to that setting's CPU per write.
4. **online build at size** (on the cluster of 1., after it): ``threads`` writers merge a random ``Tag`` (of
   ``rows / MATCH`` values) into random rows of the loaded table while an index ``ByTag`` on ``Tag`` is
   declared. Once its entries table holds about :data:`SPLIT_AT` of the rows, the base table's largest range
   is split at its data median; at :data:`KILL_AT`, the partition server leading the index table's range is
   killed (SIGKILL; the supervisor restarts it) and the time until every range of both tables is served by a
   live primary again is noted. (A build that ends before either still gets it, flagged ``during_build``
   false.) **Build time and rate** are to ``ready``; then the writers stop and ``verify`` random values of
   ``Tag`` are queried through the index (read-your-writes) and compared with one scan of the whole base
   table (``$select=Tag``, grouped by value), and the first ones, for at most :data:`VERIFY_SCAN_S`, also with
   the same filter scanning the base table (``and PartitionKey ge ''``): **mismatches** must be 0.

All replicas and clients share this machine's cores: these are an index's costs on one host.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from cli.bench.aio import ClientThreads
from cli.bench.feed import PARTITIONS, REPLICAS, Rows, write_figures
from cli.bench.http import server_pids, stop_temp_cluster, wait_quiet
from cli.bench.proc import cpu_seconds
from cli.bench.replicas import SERVERS, LoadSampler, split_keys, start_cluster
from cli.bench.scale import parallel_load
from cli.cluster_file import read_cluster
from cli.coordinator_client import call, range_loads
from cli.workload.layout import spread_table
from rangetable import TableClient
from rangetable.edm import BOOLEAN, DATETIME, DOUBLE, INT32, INT64, STRING, UNIX_EPOCH_TICKS
from rangetable.index_def import index_table
from rangetable.kernel.stats import percentile_ms

if TYPE_CHECKING:
    from rangetable.messages import QueryRequest

Echo = Callable[[str], None]
MATCH = 100  # rows per PartitionKey and per value of Cat (and Tag): what every measured query returns
MIN_SCANS = 3  # scans of the whole table per query phase at least, however long they take
PAGE = 1000  # top of every native query page
IDLE_S = 5.0  # how long the servers' idle CPU is measured
PROBE_EVERY_S = 0.25  # between the prober's writes
PROBE_POLL_S = 0.005  # between its polls of the index
PROBE_TIMEOUT_S = 30.0  # a probe not seen by then counts as unseen
RYW_EVERY_S = 5.0  # between the prober's read-your-writes queries (one that falls back scans the base table)
SPLIT_AT = 0.25  # share of the rows in the new index when the base table's largest range is split …
KILL_AT = 0.5  # … and when the index table's primary server is killed
BUILD_TIMEOUT_S = 3600.0
VERIFY_SCAN_S = 60.0  # at most this long comparing against literal scans of the base table (MIN_SCANS at least)
SETTLE_S = 60.0  # after the bulk load, how long compactions may take before the build
GOAL_CPU_RATIO = 0.01  # the aims: a query through an index costs at most 1/100 of the scan's CPU …
GOAL_LATENCY_RATIO = 2.0  # … and at most twice a PartitionKey query's latency
SETTINGS = ((), ("Cat",), ("Cat", "Tag", "Qty"))  # indexed properties of the write settings
FRONTENDS = ("frontend", "http-frontend")


def values(rows: int) -> int:
    """Distinct values of ``Cat`` (and ``Tag``) in a table of ``rows``: one per :data:`MATCH` rows."""
    return max(1, rows // MATCH)


def cat_of(i: int, rows: int) -> str:
    """``Cat`` of loaded row ``i``: rows ``c, c + n, c + 2n, …`` share value ``c`` (``n`` = :func:`values`), so
    a value's rows are spread over the whole table, :data:`MATCH` of them."""
    return f"c{i % values(rows):07d}"


def tag_of(i: int, rows: int) -> str:
    """``Tag`` of loaded row ``i`` as loaded (writers change it): another spread of :func:`values` values."""
    return f"t{(i * 7919) % values(rows):07d}"


def pk_of(i: int) -> str:
    """PartitionKey of loaded row ``i``: :data:`MATCH` rows each (``p0000000`` on)."""
    return f"p{i // MATCH:07d}"


def loaded_entity(i: int, rows: int) -> tuple[str, str, dict[str, list]]:
    """Loaded row ``i`` as (PartitionKey, RowKey, typed props): ~300 bytes of nine properties."""
    return pk_of(i), f"r{i % MATCH:04d}", {
        "Cat": [STRING, cat_of(i, rows)],
        "Tag": [STRING, tag_of(i, rows)],
        "Qty": [INT32, i % 1000],
        "name": [STRING, f"customer-{i:08d}"],
        "note": [STRING, "lorem ipsum dolor sit amet " * 5],
        "total": [INT64, i * 1_000_003],
        "price": [DOUBLE, i * 0.25],
        "active": [BOOLEAN, i % 3 == 0],
        "created": [DATETIME, UNIX_EPOCH_TICKS + i * 10_000_000],
    }


def load_split_keys(rows: int, ranges: int = 6) -> list[str]:
    """Split keys of the loaded table into ``ranges`` ranges of whole partitions."""
    return split_keys(max(ranges, -(-rows // MATCH)), ranges)


@dataclass
class IndexedRows(Rows):
    """The writes of part 2: upserts of random rows of ``rows`` (as :class:`cli.bench.feed.Rows`) with random
    values of every property an index of :data:`SETTINGS` may be on (``Cat``/``Tag``: ``rows / MATCH`` values,
    ``Qty``: 1000)."""

    def next(self, rng: random.Random) -> dict[str, Any]:
        """The next entity to upsert (~200 bytes)."""
        e = super().next(rng)
        n = values(self.rows)
        e.update(Cat=f"c{rng.randrange(n):07d}", Tag=f"t{rng.randrange(n):07d}", Qty=rng.randrange(1000))
        return e


# --- figures ------------------------------------------------------------------------------------


def query_figures(lat: list[float], wrong: int, server_cpu: float, frontend_cpu: float, seconds: float,
                  via_index: int) -> dict[str, Any]:
    """Queries over ``seconds``: how many, queries/s, p50/p99, the CPU (seconds) per query of the partition
    servers and the frontends in ms, answers without :data:`MATCH` rows, answers through an index."""
    n = len(lat)
    return {"queries": n, "qps": round(n / seconds, 2) if seconds > 0 else 0.0,
            "p50_ms": percentile_ms(lat, 0.5, 3), "p99_ms": percentile_ms(lat, 0.99, 3),
            "server_cpu_ms": round(server_cpu / n * 1000, 3) if n else 0.0,
            "frontend_cpu_ms": round(frontend_cpu / n * 1000, 3) if n else 0.0, "wrong": wrong, "via_index": via_index}


def net_cpu_ms(total_cpu_s: float, idle_cpu_per_s: float, seconds: float, n: int) -> float:
    """CPU per operation (ms) less what the processes burn idle over the same time (never below 0)."""
    return round(max(0.0, total_cpu_s - idle_cpu_per_s * seconds) / n * 1000, 3) if n else 0.0


def lag_figures(lags: list[float], fresh_waits: list[float], ryw: list[float], unseen: int, missed: int,
                fallbacks: int = 0) -> dict[str, Any]:
    """The prober's figures: lag p50/p99/max (s in, ms out), the read-your-writes queries' reported wait
    (``fresh_waits``, ms, of those answered through the index) and latency (``ryw``, s) p50/p99, probes never
    seen, read-your-writes answers without the probe's row, and those that fell back to scanning the base
    table (the index did not catch up within the frontend's wait)."""
    return {"probes": len(lags), "lag_p50_ms": percentile_ms(lags, 0.5), "lag_p99_ms": percentile_ms(lags, 0.99),
            "lag_max_ms": percentile_ms(lags, 1.0),
            "fresh_wait_p50_ms": round(percentile_ms([w / 1000 for w in fresh_waits], 0.5), 2),
            "fresh_wait_p99_ms": round(percentile_ms([w / 1000 for w in fresh_waits], 0.99), 2),
            "ryw_p50_ms": percentile_ms(ryw, 0.5), "ryw_p99_ms": percentile_ms(ryw, 0.99),
            "ryw_queries": len(ryw), "ryw_through": len(fresh_waits), "ryw_fallbacks": fallbacks,
            "unseen": unseen, "ryw_missed": missed}


def ratio(a: float, b: float) -> float:
    """``a / b`` rounded (0.0 when ``b`` is 0)."""
    return round(a / b, 4) if b else 0.0


def compare(through: dict[str, set], expected: dict[str, set]) -> int:
    """Values whose answer through the index is not the expected set of keys."""
    return sum(1 for v, got in through.items() if got != expected.get(v, set()))


def verdict_lines(q: dict[str, Any]) -> list[str]:
    """The ratios of part 1 against the issue's aims, as printed."""
    out = []
    if "cpu_ratio" in q:
        ok = 0 < q["cpu_ratio"] <= GOAL_CPU_RATIO
        out.append(f"index / scan partition-server CPU per query: {q['cpu_ratio']:.4f} net (raw "
                   f"{q['cpu_ratio_raw']:.4f}; aim <= {GOAL_CPU_RATIO:g}): {'aim met' if ok else 'aim MISSED'}")
    if "latency_ratio" in q:
        ok = 0 < q["latency_ratio"] <= GOAL_LATENCY_RATIO
        out.append(f"index / PartitionKey query latency: p50 {q['latency_ratio']:.2f}, p99 "
                   f"{q['latency_ratio_p99']:.2f} (aim p50 <= {GOAL_LATENCY_RATIO:g}): "
                   f"{'aim met' if ok else 'aim MISSED'}")
    return out


def format_query_row(label: str, row: dict[str, Any]) -> str:
    """A printed query interval row."""
    text = (f"{label:10} {row['t']:>5} s {row['queries']:>7,} q {row['qps']:>9,.1f} q/s  p50 {row['p50_ms']:>8.2f} ms  "
            f"p99 {row['p99_ms']:>8.2f} ms  CPU servers {row['server_cpu_ms']:>8.2f} ms/q  frontends "
            f"{row['frontend_cpu_ms']:>7.2f} ms/q")
    return text + (f"  WRONG {row['wrong']}" if row["wrong"] else "")


def format_write_row(label: str, row: dict[str, Any]) -> str:
    """A printed write interval row (with the prober's lag when it ran)."""
    text = (f"{label:10} {row['t']:>5} s {row['ops_per_s']:>9,.0f} ops/s  p50 {row['p50_ms']:>6.2f} ms  "
            f"p99 {row['p99_ms']:>7.2f} ms  CPU servers {row['server_cpu_us']:>6,.0f} µs/write  frontends "
            f"{row.get('frontend_cpu_us', 0):>5,.0f} µs/write")
    if "lag_p50_ms" in row:
        text += (f"  lag p50 {row['lag_p50_ms']:>6.1f} p99 {row['lag_p99_ms']:>6.1f} ms ({row['probes']})  ryw "
                 f"{row['ryw_p50_ms']:>7.1f} ms, fallbacks {row['ryw_fallbacks']}/{row['ryw_queries']}")
    return text + (f"  errors {row['errors']}" if row.get("errors") else "")


# --- 1. queries at size -------------------------------------------------------------------------


def native_query(client: TableClient, table: str, filt: str, staleness: float | None = None
                 ) -> tuple[list[list], dict | None]:
    """Every row of a native query (all its pages) and the first page's ``plan`` (None: none)."""
    body: dict[str, Any] = {"op": "query", "table": table, "filter": filt, "top": PAGE, "next": None}
    if staleness is not None:
        body["staleness"] = staleness
    rows: list[list] = []
    plan = None
    first = True
    while True:
        page = client._transport.request(cast("QueryRequest", body))
        if first:
            plan, first = page.get("plan"), False
        rows += page["entities"]
        if page.get("next") is None:
            return rows, plan
        body = {**body, "next": page["next"]}


def through(plan: dict | None, index: str) -> bool:
    """The answer came through ``index``, without falling back to a scan."""
    return plan is not None and str(plan.get("index", "")).lower() == index.lower() and plan.get("fallback") is None


def run_queries(label: str, fn: Callable[[random.Random], tuple[int, bool]], seconds: float, interval: float,
                doc: dict, echo: Echo, min_n: int = 1, seed: int = 1) -> dict[str, Any]:
    """``fn`` back to back for ``seconds`` (and at least ``min_n`` times), a row every ``interval``; ``fn`` answers
    (rows, through an index). Returns the rows and the steady figures (rows after the first, or all of them when
    those hold no query), with the raw CPU seconds and time behind them."""
    ps, fe = server_pids(doc, ("partition-server",)), server_pids(doc, FRONTENDS)
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    per_row: list[tuple[list[float], int, float, float, float, int]] = []
    lat: list[float] = []
    wrong = via = 0
    start = last = time.monotonic()
    c0, f0 = cpu_seconds(ps), cpu_seconds(fe)
    done = 0
    while True:
        t0 = time.perf_counter()
        n, idx = fn(rng)
        lat.append(time.perf_counter() - t0)
        wrong += n != MATCH
        via += idx
        done += 1
        now = time.monotonic()
        over = now - start >= seconds and done >= min_n
        if now - last >= interval or over:
            c1, f1 = cpu_seconds(ps), cpu_seconds(fe)
            row = {"t": round(now - start), **query_figures(lat, wrong, c1 - c0, f1 - f0, now - last, via)}
            out.append(row)
            per_row.append((lat, wrong, c1 - c0, f1 - f0, now - last, via))
            echo(format_query_row(label, row))
            lat, wrong, via, last, c0, f0 = [], 0, 0, now, c1, f1
        if over:
            break
    settled = per_row[1:] if sum(len(r[0]) for r in per_row[1:]) else per_row
    lat_s = [x for r in settled for x in r[0]]
    cpu_s, fcpu_s, secs = sum(r[2] for r in settled), sum(r[3] for r in settled), sum(r[4] for r in settled)
    steady = query_figures(lat_s, sum(r[1] for r in settled), cpu_s, fcpu_s, secs, sum(r[5] for r in settled))
    return {"rows": out, "steady": steady, "cpu_s": cpu_s, "frontend_cpu_s": fcpu_s, "seconds": secs,
            "total_queries": done}


def idle_cpu(doc: dict, seconds: float = IDLE_S) -> tuple[float, float]:
    """CPU seconds per second the partition servers and the frontends burn with no client."""
    ps, fe = server_pids(doc, ("partition-server",)), server_pids(doc, FRONTENDS)
    c0, f0, t0 = cpu_seconds(ps), cpu_seconds(fe), time.monotonic()
    time.sleep(seconds)
    secs = time.monotonic() - t0
    return (cpu_seconds(ps) - c0) / secs, (cpu_seconds(fe) - f0) / secs


def table_entities(status: dict, table: str) -> dict[str, int]:
    """Entities of each range of ``table`` as its primary last reported them in a coordinator ``status``
    (approximate while they change)."""
    loads = range_loads(status)
    return {r["id"]: int(loads.get(r["id"], {}).get("entities") or 0) for r in status["ranges"] if r["table"] == table}


def index_entries(coord: str, table: str, name: str) -> int:
    """Entries in an index's table as the coordinator's status last heard."""
    return sum(table_entities(call(coord, {"op": "status"}, timeout=5), index_table(table, name)).values())


def index_state(client: TableClient, name: str) -> str:
    """The state of ``client``'s table's index ``name`` ("missing" when it has none)."""
    return next((d["state"] for d in client.list_indexes() if d["name"].lower() == name.lower()), "missing")


def build_index(doc: dict, table: str, name: str, prop: str, rows: int, interval: float, echo: Echo,
                tick: Callable[[float, int, bool], bool] | None = None) -> dict[str, Any]:
    """Declare index ``name`` on ``prop`` and wait until it is ready; a line every ``interval``. ``tick(elapsed,
    entries so far, ready)`` is called every poll (part 4's faults). Returns the build time and rate."""
    native, coord = doc["native"], doc["coordinator"]
    with TableClient(native, table) as t:
        t0 = time.monotonic()
        t.create_index(name, prop)
        last, ready_s = t0, None
        while True:
            now = time.monotonic()
            if now - t0 > BUILD_TIMEOUT_S:
                raise RuntimeError(f"index {name} not ready after {BUILD_TIMEOUT_S:g} s")
            ready = ready_s is not None or index_state(t, name) == "ready"
            if ready and ready_s is None:
                ready_s = now - t0
            entries = index_entries(coord, table, name) if tick is not None or now - last >= interval else 0
            if now - last >= interval:
                echo(f"build {name:6} {now - t0:>5.0f} s  ~{entries:>11,} entries ({entries / (now - t0):,.0f}/s as "
                     "the coordinator last heard)")
                last = now
            if tick is not None:
                if tick(now - t0, entries, ready):
                    break
            elif ready:
                break
            time.sleep(0.25)
    assert ready_s is not None
    out = {"index": name, "on": prop, "rows": rows, "seconds": round(ready_s, 2), "rows_s": round(rows / ready_s, 1)}
    echo(f"index {name} on {prop} built over {rows:,} rows in {ready_s:.1f} s = {rows / ready_s:,.0f} rows/s")
    return out


def run_query_phases(doc: dict, table: str, rows: int, seconds: float, interval: float, echo: Echo
                     ) -> dict[str, Any]:
    """Part 1's four query kinds on the loaded, indexed table."""
    native, n, parts = doc["native"], values(rows), -(-rows // MATCH)
    from azure.data.tables import TableClient as AzureTableClient

    client = TableClient(native, table)
    az = AzureTableClient.from_connection_string(doc["connection_string"], table_name=table)
    try:
        idle_ps, idle_fe = idle_cpu(doc)
        echo(f"idle: partition servers {idle_ps * 1000:,.1f} ms CPU/s, frontends {idle_fe * 1000:,.1f} ms CPU/s "
             "(the index's applier following the feed)")

        def by_index(rng: random.Random) -> tuple[int, bool]:
            got, plan = native_query(client, table, f"Cat eq 'c{rng.randrange(n):07d}'")
            return len(got), through(plan, "ByCat")

        def by_scan(rng: random.Random) -> tuple[int, bool]:
            got, plan = native_query(client, table, f"Cat eq 'c{rng.randrange(n):07d}' and PartitionKey ge ''")
            return len(got), plan is not None and plan.get("index") is not None

        def by_pk(rng: random.Random) -> tuple[int, bool]:
            got, plan = native_query(client, table, f"PartitionKey eq 'p{rng.randrange(parts):07d}'")
            return len(got), plan is not None and plan.get("index") is not None

        def by_sdk(rng: random.Random) -> tuple[int, bool]:
            return sum(1 for _ in az.query_entities(f"Cat eq 'c{rng.randrange(n):07d}'")), False

        def by_sdk_scan(rng: random.Random) -> tuple[int, bool]:
            return sum(1 for _ in az.query_entities(f"Cat eq 'c{rng.randrange(n):07d}' and PartitionKey ge ''")), False

        out: dict[str, Any] = {"idle_server_cpu_ms_s": round(idle_ps * 1000, 2),
                               "idle_frontend_cpu_ms_s": round(idle_fe * 1000, 2)}
        for seed, (key, label, fn, min_n) in enumerate((("index", "index", by_index, 1),
                                                        ("scan", "scan", by_scan, MIN_SCANS),
                                                        ("pk", "pk query", by_pk, 1), ("sdk", "sdk index", by_sdk, 1),
                                                        ("sdk_scan", "sdk scan", by_sdk_scan, MIN_SCANS))):
            res = run_queries(label, fn, seconds, interval, doc, echo, min_n, seed)
            st = res["steady"]
            st["server_cpu_net_ms"] = net_cpu_ms(res["cpu_s"], idle_ps, res["seconds"], st["queries"])
            st["frontend_cpu_net_ms"] = net_cpu_ms(res["frontend_cpu_s"], idle_fe, res["seconds"], st["queries"])
            st["total_queries"] = res["total_queries"]
            out[key] = {"rows": res["rows"], "steady": st}
            echo(f"{label}: steady {st['queries']:,} queries, {st['qps']:,.1f}/s, p50 {st['p50_ms']:.2f} ms, p99 "
                 f"{st['p99_ms']:.2f} ms, partition servers {st['server_cpu_ms']:.3f} ms CPU/query "
                 f"(net {st['server_cpu_net_ms']:.3f}), frontends {st['frontend_cpu_ms']:.3f} ms"
                 + (f"; {st['via_index']} of {st['queries']} through the index" if key in ("index", "scan") else ""))
        i, s, p = out["index"]["steady"], out["scan"]["steady"], out["pk"]["steady"]
        out["index_plan_ok"] = i["via_index"] == i["queries"] and not i["wrong"]
        out["scan_plan_ok"] = s["via_index"] == 0 and not s["wrong"]
        out["cpu_ratio"] = ratio(i["server_cpu_net_ms"], s["server_cpu_net_ms"])
        out["cpu_ratio_raw"] = ratio(i["server_cpu_ms"], s["server_cpu_ms"])
        out["latency_ratio"] = ratio(i["p50_ms"], p["p50_ms"])
        out["latency_ratio_p99"] = ratio(i["p99_ms"], p["p99_ms"])
        for key in ("scan", "sdk_scan"):  # a base scan reads every row: its server CPU per row scanned
            out[key]["steady"]["server_us_per_row"] = round(out[key]["steady"]["server_cpu_net_ms"] * 1000 / rows, 3)
        for line in verdict_lines(out):
            echo(line)
        return out
    finally:
        client.close()
        az.close()


# --- 2./3. writes and lag -----------------------------------------------------------------------


@dataclass
class ProbeTally:
    """Probes' findings: lags (s), read-your-writes waits (ms, as answered) and latencies (s), probes never seen,
    read-your-writes answers without their row."""

    lags: list[float] = field(default_factory=list)
    fresh: list[float] = field(default_factory=list)
    ryw: list[float] = field(default_factory=list)
    unseen: int = 0
    missed: int = 0
    fallbacks: int = 0

    def add(self, other: ProbeTally) -> None:
        """Count ``other``'s findings in too."""
        self.lags += other.lags
        self.fresh += other.fresh
        self.ryw += other.ryw
        self.unseen += other.unseen
        self.missed += other.missed
        self.fallbacks += other.fallbacks

    def figures(self) -> dict[str, Any]:
        """:func:`lag_figures` of these."""
        return lag_figures(self.lags, self.fresh, self.ryw, self.unseen, self.missed, self.fallbacks)


class Prober(threading.Thread):
    """Part 3's prober (see the module docstring): probes one after another until stopped."""

    def __init__(self, native: str, table: str, index: str) -> None:
        super().__init__(daemon=True)
        self.client = TableClient(native, table)
        self.table, self.index = table, index
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.lags: list[float] = []
        self.fresh: list[float] = []
        self.ryw: list[float] = []
        self.unseen = self.missed = self.fallbacks = 0
        self.error: str | None = None
        self.tag = uuid.uuid4().hex[:6]

    def run(self) -> None:
        """Probe every :data:`PROBE_EVERY_S` until :attr:`stop`; a read-your-writes query every
        :data:`RYW_EVERY_S` of them."""
        rng = random.Random(7)
        k = 0
        last_ryw = time.monotonic()
        try:
            while not self.stop.wait(PROBE_EVERY_S):
                k += 1
                value = f"probe-{self.tag}-{k:07d}"
                filt = f"Cat eq '{value}'"
                self.client.upsert_entity({"PartitionKey": f"p{rng.randrange(PARTITIONS):07d}", "RowKey": f"probe{k}",
                                           "Cat": value})
                acked = time.perf_counter()
                lag = None
                while time.perf_counter() - acked < PROBE_TIMEOUT_S and not self.stop.is_set():
                    got, _ = native_query(self.client, self.table, filt, staleness=1e9)
                    if got:
                        lag = time.perf_counter() - acked
                        break
                    time.sleep(PROBE_POLL_S)
                with self.lock:
                    if lag is not None:
                        self.lags.append(lag)
                    elif not self.stop.is_set():
                        self.unseen += 1
                if time.monotonic() - last_ryw < RYW_EVERY_S or self.stop.is_set():
                    continue
                last_ryw = time.monotonic()
                value = f"probe-{self.tag}-{k:07d}-ryw"
                filt = f"Cat eq '{value}'"
                self.client.upsert_entity({"PartitionKey": f"p{rng.randrange(PARTITIONS):07d}", "RowKey": f"ryw{k}",
                                           "Cat": value})
                t0 = time.perf_counter()
                got, plan = native_query(self.client, self.table, filt)
                dt = time.perf_counter() - t0
                with self.lock:
                    self.ryw.append(dt)
                    self.missed += not got
                    if plan is not None and plan.get("fallback") is not None:
                        self.fallbacks += 1
                    elif plan is not None and plan.get("fresh_wait_ms") is not None:
                        self.fresh.append(float(plan["fresh_wait_ms"]))
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.client.close()

    def take(self) -> ProbeTally:
        """What the probes found since the last call."""
        with self.lock:
            res = ProbeTally(self.lags, self.fresh, self.ryw, self.unseen, self.missed, self.fallbacks)
            self.lags, self.fresh, self.ryw, self.unseen, self.missed, self.fallbacks = [], [], [], 0, 0, 0
        return res


def run_writes(doc: dict, table: str, rows: Rows, threads: int, seconds: float, interval: float, echo: Echo,
               label: str, prober: Prober | None = None) -> dict[str, Any]:
    """``threads`` writers upserting ``rows`` for ``seconds``, a row every ``interval`` (with the prober's figures
    when given); returns the rows and the steady figures."""
    ps, fe = server_pids(doc, ("partition-server",)), server_pids(doc, FRONTENDS)
    writers = ClientThreads(doc["native"], table, threads, lambda c, rng: c.upsert_entity(rows.next(rng), mode="replace"))
    n = max(1, int(seconds / interval))
    out: list[dict[str, Any]] = []
    lat_all: list[float] = []
    secs = cpu = fcpu = 0.0
    errors = 0
    probe_all = ProbeTally()
    try:
        if prober is not None:
            prober.start()
        start = last = time.monotonic()
        c0, f0 = cpu_seconds(ps), cpu_seconds(fe)
        for k in range(1, n + 1):
            time.sleep(max(0.0, start + k * interval - time.monotonic()))
            if not writers.alive() or (prober is not None and prober.error):
                raise RuntimeError(f"the {label} writers or prober stopped: {prober.error if prober else ''}")
            lat, errs = writers.tally.take()
            now, c1, f1 = time.monotonic(), cpu_seconds(ps), cpu_seconds(fe)
            row: dict[str, Any] = {"t": round(now - start), **write_figures(lat, errs, c1 - c0, now - last),
                                   "frontend_cpu_us": round((f1 - f0) / max(1, len(lat)) * 1e6, 1)}
            if prober is not None:
                probes = prober.take()
                row.update(probes.figures())
                if k > 1 or n == 1:
                    probe_all.add(probes)
            out.append(row)
            echo(format_write_row(label, row))
            if k > 1 or n == 1:
                lat_all += lat
                secs += now - last
                cpu += c1 - c0
                fcpu += f1 - f0
                errors += errs
            last, c0, f0 = now, c1, f1
    finally:
        if prober is not None:
            prober.stop.set()
            prober.join(PROBE_TIMEOUT_S + 5)
        writers.close()
    res: dict[str, Any] = {"rows": out, "writes": {**write_figures(lat_all, errors, cpu, secs),
                                                   "frontend_cpu_us": round(fcpu / max(1, len(lat_all)) * 1e6, 1)}}
    if prober is not None:
        res["lag"] = probe_all.figures()
    return res


def wait_ready(client: TableClient, names: list[str], timeout: float = 120.0) -> None:
    """Wait until every index of ``names`` is ready."""
    end = time.monotonic() + timeout
    while any(index_state(client, n) != "ready" for n in names):
        if time.monotonic() > end:
            raise RuntimeError(f"indexes {names} not ready after {timeout:g} s")
        time.sleep(0.2)


def run_write_setting(props: tuple[str, ...], *, seconds: float, interval: float, threads: int, write_rows: int,
                      echo: Echo) -> dict[str, Any]:
    """Part 2 (and, with one index, part 3) on a fresh cluster."""
    label = f"{len(props)} index" + ("" if len(props) == 1 else "es")
    temp, doc = start_cluster(REPLICAS)
    try:
        native, coord = doc["native"], doc["coordinator"]
        table = f"benchixw{uuid.uuid4().hex[:8]}"
        ranges = spread_table(coord, native, table, split_keys(PARTITIONS))
        names = [f"By{p}" for p in props]
        with TableClient(native, table) as t:
            for name, p in zip(names, props, strict=True):
                t.create_index(name, p)
            wait_ready(t, names)
        primaries = sorted({r["primary"] for r in ranges})
        echo(f"{label}: table {table}, {len(ranges)} ranges on {', '.join(primaries)}, {REPLICAS} replicas, indexes "
             f"on {', '.join(props) or 'nothing'}; {threads} threads upserting random rows of {write_rows:,} for "
             f"{seconds:g} s" + (", a prober measuring the index's lag" if len(props) == 1 else ""))
        prober = Prober(native, table, names[0]) if len(props) == 1 else None
        res = run_writes(doc, table, IndexedRows(write_rows), threads, seconds, interval, echo, label, prober)
        if "lag" in res:
            lag = res["lag"]
            echo(f"{label}: lag to a stale-ok query through the index over {lag['probes']} probes: p50 "
                 f"{lag['lag_p50_ms']:.1f} ms, p99 {lag['lag_p99_ms']:.1f} ms, max {lag['lag_max_ms']:.1f} ms; "
                 f"read-your-writes query: wait p50 {lag['fresh_wait_p50_ms']:.1f} ms, p99 "
                 f"{lag['fresh_wait_p99_ms']:.1f} ms (of {lag['ryw_through']} through the index), latency p50 "
                 f"{lag['ryw_p50_ms']:.1f} ms, p99 {lag['ryw_p99_ms']:.1f} ms, {lag['ryw_fallbacks']} of "
                 f"{lag['ryw_queries']} fell back to a base scan; "
                 f"{lag['unseen']} unseen, {lag['ryw_missed']} read-your-writes misses")
        return {"indexes": list(props), "ranges": len(ranges), "primaries": primaries, **res}
    finally:
        stop_temp_cluster(temp)


# --- 4. online build under writes, a split and a failover ---------------------------------------


class Faults:
    """Part 4's split and kill, driven by the build's progress (:meth:`tick`, as :func:`build_index` polls)."""

    def __init__(self, doc: dict, temp: str, table: str, index: str, rows: int, echo: Echo,
                 expect_s: float | None = None) -> None:
        self.doc, self.temp, self.table, self.index, self.rows, self.echo = doc, temp, table, index, rows, echo
        self.expect_s = expect_s  # the build's expected time (the first index's, without writes), if known
        self.coord = doc["coordinator"]
        self.split: dict[str, Any] | None = None
        self.kill: dict[str, Any] | None = None
        self.victim: tuple[str, int] | None = None  # (server, incarnation)
        self.killed_at = 0.0
        self.ready_at: float | None = None

    def _split(self, t: float, ready: bool) -> None:
        sizes = table_entities(call(self.coord, {"op": "status"}, timeout=5), self.table)
        big = max(sorted(sizes), key=lambda rid: sizes[rid])
        res = call(self.coord, {"op": "split", "range": big, "key": None}, timeout=60)
        self.split = {"at_s": round(t, 2), "during_build": not ready, "range": big, "key": res.get("key"),
                      "into": [res.get("left"), res.get("right")], "offline_ms": res.get("offline_ms")}
        self.echo(f"online build: split {big} of {self.table} at {res.get('key')!r} at {t:.1f} s "
                  f"({'during' if not ready else 'after'} the build), offline {res.get('offline_ms')} ms")

    def _kill(self, t: float, ready: bool) -> None:
        st = call(self.coord, {"op": "status"})
        ixr = [r for r in st["ranges"] if r["table"] == index_table(self.table, self.index)]
        victim = ixr[0]["primary"]
        info = next(s for s in st["servers"] if s["id"] == victim)
        led = [r["id"] for r in st["ranges"] if r["primary"] == victim
               and r["table"] in (self.table, index_table(self.table, self.index))]
        os.kill(info["pid"], signal.SIGKILL)
        self.victim, self.killed_at = (victim, info.get("incarnation")), time.monotonic()
        self.kill = {"at_s": round(t, 2), "during_build": not ready, "server": victim, "pid": info["pid"],
                     "led": led, "served_again_s": None}
        self.echo(f"online build: killed {victim} (pid {info['pid']}, SIGKILL), primary of {', '.join(led)}, at "
                  f"{t:.1f} s ({'during' if not ready else 'after'} the build)")

    def _served(self) -> bool:
        assert self.victim is not None and self.kill is not None
        st = call(self.coord, {"op": "status"}, timeout=2)
        alive = {s["id"]: s for s in st["servers"] if s["alive"]}
        tables = (self.table, index_table(self.table, self.index))
        for r in st["ranges"]:
            if r["table"] not in tables:
                continue
            s = alive.get(r["primary"])
            if s is None or r.get("state") != "serving" or (
                    r["primary"] == self.victim[0] and s.get("incarnation") == self.victim[1]):
                return False
        self.kill["served_again_s"] = round(time.monotonic() - self.killed_at, 2)
        self.echo(f"online build: every range of {self.table} and its index served again "
                  f"{self.kill['served_again_s']:.1f} s after the kill")
        return True

    def _due(self, share: float, t: float, entries: int) -> bool:
        """The build is ``share`` through: by its entries, or by the time it is expected to take."""
        return entries >= share * self.rows or (self.expect_s is not None and t >= share * self.expect_s)

    def tick(self, t: float, entries: int, ready: bool) -> bool:
        """One poll of the build: do what is due; True once the build is ready and both faults are over."""
        if ready and self.ready_at is None:
            self.ready_at = t
        if self.split is None and (self._due(SPLIT_AT, t, entries) or ready):
            self._split(t, ready)
        elif self.split is not None and self.kill is None and (self._due(KILL_AT, t, entries) or ready):
            self._kill(t, ready)
        elif self.kill is not None and self.kill["served_again_s"] is None:
            try:
                if self._served():
                    return ready
            except Exception:  # the coordinator busy: ask again at the next poll
                return False
        elif self.kill is not None:
            return ready
        return False


def verify_index(doc: dict, table: str, index: str, prop: str, rows: int, count: int, echo: Echo
                 ) -> dict[str, Any]:
    """``count`` random values of ``prop`` through the index against one scan of the base table, then the first
    ones against the same filter scanning it (at most :data:`VERIFY_SCAN_S`)."""
    native = doc["native"]
    n = values(rows)
    with TableClient(native, table) as t:
        t0 = time.monotonic()
        expected: dict[str, set] = {}
        scanned = 0
        for e in t.query_entities("PartitionKey ge ''", select=["PartitionKey", "RowKey", prop], results_per_page=PAGE):
            scanned += 1
            if prop in e:
                expected.setdefault(e[prop], set()).add((e["PartitionKey"], e["RowKey"]))
        scan_s = time.monotonic() - t0
        rng = random.Random(11)
        picked = [f"t{rng.randrange(n):07d}" for _ in range(count)]
        got: dict[str, set] = {}
        fallbacks = 0
        t1 = time.monotonic()
        for v in picked:
            ents, plan = native_query(t, table, f"{prop} eq '{v}'")
            fallbacks += not through(plan, index)
            got[v] = {(e[0], e[1]) for e in ents}
        through_s = time.monotonic() - t1
        mismatches = compare(got, expected)
        literal, literal_bad, t2 = 0, 0, time.monotonic()
        for v in picked:
            if literal >= MIN_SCANS and time.monotonic() - t2 > VERIFY_SCAN_S:
                break
            ents, _ = native_query(t, table, f"{prop} eq '{v}' and PartitionKey ge ''")
            literal += 1
            literal_bad += {(e[0], e[1]) for e in ents} != got[v]
    res = {"queries": count, "distinct_values": len(set(picked)), "rows_matched": sum(len(s) for s in got.values()),
           "mismatches": mismatches, "fallbacks": fallbacks, "base_rows_scanned": scanned,
           "base_scan_s": round(scan_s, 1), "through_index_s": round(through_s, 1), "literal_scans": literal,
           "literal_mismatches": literal_bad}
    echo(f"verify {index}: {count} random equality queries through the index ({res['rows_matched']:,} rows, "
         f"{fallbacks} not through the index) against a scan of all {scanned:,} base rows: {mismatches} mismatches; "
         f"the first {literal} against the same filter scanning the base table: {literal_bad} mismatches")
    return res


def online_build(doc: dict, temp: str, table: str, rows: int, threads: int, interval: float, verify: int,
                 echo: Echo, expect_s: float | None = None) -> dict[str, Any]:
    """Part 4 on the loaded table (``expect_s``: how long the first build took)."""
    n = values(rows)

    def merge_tag(c: TableClient, rng: random.Random) -> None:
        i = rng.randrange(rows)
        c.upsert_entity({"PartitionKey": pk_of(i), "RowKey": f"r{i % MATCH:04d}", "Tag": f"t{rng.randrange(n):07d}"},
                        mode="merge")

    faults = Faults(doc, temp, table, "ByTag", rows, echo, expect_s)
    writers = ClientThreads(doc["native"], table, threads, merge_tag)
    write_rows: list[dict[str, Any]] = []
    t0 = last = time.monotonic()

    def tick(t: float, entries: int, ready: bool) -> bool:
        nonlocal last
        now = time.monotonic()
        if now - last >= interval:
            lat, errs = writers.tally.take()
            row = {"t": round(now - t0), **write_figures(lat, errs, 0.0, now - last)}
            del row["server_cpu_us"]
            write_rows.append(row)
            echo(f"writers    {row['t']:>5} s {row['ops_per_s']:>9,.0f} ops/s  p50 {row['p50_ms']:>6.2f} ms  p99 "
                 f"{row['p99_ms']:>8.2f} ms" + (f"  errors {errs}" if errs else ""))
            last = now
        return faults.tick(t, entries, ready)

    try:
        echo(f"online build: {threads} threads merging a random Tag into random rows of {table} while index ByTag "
             f"on Tag is built; a split at ~{SPLIT_AT:.0%} and a kill -9 at ~{KILL_AT:.0%} of its entries")
        build = build_index(doc, table, "ByTag", "Tag", rows, interval, echo, tick)
    finally:
        writers.close()
    fresh = read_cluster(temp)
    doc = fresh if fresh is not None else doc
    out = {"build": build, "split": faults.split, "kill": faults.kill, "writes": write_rows,
           "verify": verify_index(doc, table, "ByTag", "Tag", rows, verify, echo)}
    return out


# --- the whole bench ----------------------------------------------------------------------------


def run_loaded(*, rows: int, query_seconds: float, interval: float, threads: int, loaders: int, verify: int,
               parts: tuple[str, ...], echo: Echo) -> dict[str, Any]:
    """Parts 1 and 4 on one cluster: load, build ``ByCat``, the queries, then the online build of ``ByTag``."""
    temp, doc = start_cluster(REPLICAS)
    try:
        native, coord = doc["native"], doc["coordinator"]
        table = f"benchix{uuid.uuid4().hex[:8]}"
        ranges = spread_table(coord, native, table, load_split_keys(rows))
        echo(f"loaded table {table}: {len(ranges)} ranges on {', '.join(sorted({r['primary'] for r in ranges}))}, "
             f"{REPLICAS} replicas; bulk-loading {rows:,} entities ({loaders} loaders)")
        secs = parallel_load(native, table, 0, rows, loaders, window=32,
                             make=functools.partial(loaded_entity, rows=rows))
        out: dict[str, Any] = {"table": table, "load": {"rows": rows, "seconds": round(secs, 2),
                                                        "rows_s": round(rows / secs, 1)}}
        echo(f"loaded {rows:,} entities in {secs:.1f} s = {rows / secs:,.0f}/s")
        out["load"]["settle_s"] = round(wait_quiet({"coordinator": coord}, echo, SETTLE_S, table=table, still_s=3.0), 1)
        out["build"] = build_index(doc, table, "ByCat", "Cat", rows, interval, echo)
        if "queries" in parts:
            out["queries"] = run_query_phases(doc, table, rows, query_seconds, interval, echo)
        if "online" in parts:
            out["online"] = online_build(doc, temp, table, rows, threads, interval, verify, echo,
                                         out["build"]["seconds"])
        return out
    finally:
        stop_temp_cluster(temp)


def summarize_writes(settings: list[dict[str, Any]]) -> dict[str, Any]:
    """Each setting's write ops/s and CPU per write against no index."""
    base = next((s["writes"] for s in settings if not s["indexes"]), None)
    out: dict[str, Any] = {}
    for s in settings:
        w = s["writes"]
        k = str(len(s["indexes"]))
        out[k] = {"ops_share": ratio(w["ops_per_s"], base["ops_per_s"]) if base else 0.0,
                  "cpu_x": ratio(w["server_cpu_us"], base["server_cpu_us"]) if base else 0.0}
    return out


def format_table(res: dict[str, Any]) -> str:
    """The final summary of a run (``res``: :func:`run_index_bench`'s result)."""
    lines = [f"cost of secondary indexes ({res['servers']} partition servers, {res['replicas']} replicas, on "
             f"{res['cpus']} cores; {res['rows']:,} rows loaded, {res['threads']} writer threads)"]
    if "load_average" in res:
        la = res["load_average"]
        lines.append(f"machine load average (1 min) during the run: {la['min']} to {la['max']}, median {la['median']}")
    ld = res.get("loaded") or {}
    if "build" in ld:
        b = ld["build"]
        lines.append(f"build of ByCat over {b['rows']:,} rows (no writes): {b['seconds']:.1f} s = {b['rows_s']:,.0f} "
                     "rows/s")
    q = ld.get("queries")
    if q:
        lines.append(f"queries (steady; idle CPU partition servers {q['idle_server_cpu_ms_s']:.1f} ms/s, frontends "
                     f"{q['idle_frontend_cpu_ms_s']:.1f} ms/s)")
        lines.append(f"  {'':26}{'n':>7}{'q/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'PS ms/q':>10}{'net':>9}{'FE ms/q':>9}")
        for key, label in (("index", "(a) Cat eq, index"), ("scan", "(b) Cat eq, base scan"),
                           ("pk", "(c) PartitionKey eq"), ("sdk", "(d) Cat eq, Azure SDK"),
                           ("sdk_scan", "(e) Cat eq, SDK base scan")):
            if key not in q:
                continue
            s = q[key]["steady"]
            lines.append(f"  {label:26}{s['queries']:>7,}{s['qps']:>9,.1f}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}"
                         f"{s['server_cpu_ms']:>10.3f}{s['server_cpu_net_ms']:>9.3f}{s['frontend_cpu_ms']:>9.3f}")
        per_row = [f"{label} {q[key]['steady']['server_us_per_row']:.2f} µs" for key, label in
                   (("scan", "(b) native"), ("sdk_scan", "(e) REST"))
                   if "server_us_per_row" in q.get(key, {}).get("steady", {})]
        if per_row:
            lines.append("  server CPU per row scanned (net): " + ", ".join(per_row))
        lines.append(f"  plans: (a) {q['index']['steady']['via_index']} of {q['index']['steady']['queries']} through "
                     f"ByCat, (b) {q['scan']['steady']['via_index']} through an index: "
                     + ("as intended" if q["index_plan_ok"] and q["scan_plan_ok"] else "NOT as intended"))
        lines += ["  " + x for x in verdict_lines(q)]
    settings = res.get("writes") or []
    if settings:
        lines.append(f"point writes ({res['seconds']:g} s each, steady)")
        lines.append(f"  {'':26}{'ops/s':>9}{'share':>7}{'p50 ms':>9}{'p99 ms':>9}{'PS µs/w':>9}{'FE µs/w':>9}")
        shares = res.get("write_costs") or {}
        for s in settings:
            w = s["writes"]
            k = str(len(s["indexes"]))
            label = f"{k} index{'es' if k != '1' else ''} ({','.join(s['indexes']) or '-'})"
            lines.append(f"  {label:26}{w['ops_per_s']:>9,.0f}{shares.get(k, {}).get('ops_share', 0):>7.2f}"
                         f"{w['p50_ms']:>9.2f}{w['p99_ms']:>9.2f}{w['server_cpu_us']:>9,.0f}"
                         f"{w['frontend_cpu_us']:>9,.0f}")
        for s in settings:
            if "lag" in s:
                lag = s["lag"]
                lines.append(f"  index lag (1 index, {lag['probes']} probes): p50 {lag['lag_p50_ms']:.1f} ms, p99 "
                             f"{lag['lag_p99_ms']:.1f} ms, max {lag['lag_max_ms']:.1f} ms; unseen {lag['unseen']}")
                wait = (f"wait p50 {lag['fresh_wait_p50_ms']:.1f} ms, p99 {lag['fresh_wait_p99_ms']:.1f} ms (of "
                        f"{lag['ryw_through']} through the index)" if lag["ryw_through"]
                        else "no answer through the index")
                lines.append(f"  read-your-writes query ({lag['ryw_queries']}): {wait}; latency p50 "
                             f"{lag['ryw_p50_ms']:.1f} ms, p99 "
                             f"{lag['ryw_p99_ms']:.1f} ms; {lag['ryw_fallbacks']} fell back to a base scan, "
                             f"{lag['ryw_missed']} without the row")
        lines.append("  per interval:")
        for s in settings:
            k = str(len(s["indexes"]))
            lines.append(f"    ops/s {k} idx   " + " ".join(f"{r['ops_per_s']:,.0f}" for r in s["rows"]))
            if "lag" in s:
                lines.append("    lag p99 ms    " + " ".join(f"{r['lag_p99_ms']:.1f}" for r in s["rows"]))
    o = ld.get("online")
    if o:
        b, v = o["build"], o["verify"]
        lines.append(f"online build of ByTag over {b['rows']:,} rows under writes: {b['seconds']:.1f} s = "
                     f"{b['rows_s']:,.0f} rows/s")
        if o.get("split"):
            sp = o["split"]
            lines.append(f"  split {sp['range']} at {sp['at_s']:.1f} s ({'during' if sp['during_build'] else 'AFTER'} "
                         f"the build), offline {sp['offline_ms']} ms")
        if o.get("kill"):
            k = o["kill"]
            lines.append(f"  kill -9 {k['server']} at {k['at_s']:.1f} s ({'during' if k['during_build'] else 'AFTER'} "
                         f"the build): served again after {k['served_again_s']} s")
        lines.append(f"  verify: {v['queries']} queries through ByTag against a base scan: {v['mismatches']} mismatches"
                     f", {v['fallbacks']} fallbacks; {v['literal_scans']} against the filter scanning the base table: "
                     f"{v['literal_mismatches']} mismatches")
    return "\n".join(lines)


PARTS = ("queries", "writes", "online")


def run_index_bench(*, rows: int = 1_000_000, seconds: float = 120.0, query_seconds: float = 60.0,
                    interval: float = 10.0, threads: int = 8, write_rows: int = 100_000, loaders: int = 2,
                    verify: int = 300, parts: tuple[str, ...] = PARTS, echo: Echo = print) -> dict[str, Any]:
    """The parts asked for (see the module docstring); returns the figures, with the machine's 1-minute
    ``load_average`` over the run."""
    res: dict[str, Any] = {"servers": SERVERS, "replicas": REPLICAS, "cpus": os.cpu_count(), "rows": rows,
                           "threads": threads, "seconds": seconds, "query_seconds": query_seconds,
                           "interval_s": interval, "write_rows": write_rows, "parts": list(parts)}
    sampler = LoadSampler()
    sampler.start()
    try:
        if "queries" in parts or "online" in parts:
            res["loaded"] = run_loaded(rows=rows, query_seconds=query_seconds, interval=interval, threads=threads,
                                       loaders=loaders, verify=verify, parts=parts, echo=echo)
        if "writes" in parts:
            res["writes"] = [run_write_setting(p, seconds=seconds, interval=interval, threads=threads,
                                               write_rows=write_rows, echo=echo) for p in SETTINGS]
            res["write_costs"] = summarize_writes(res["writes"])
    finally:
        sampler.stop.set()
    res["load_average"] = sampler.summary()
    return res
