"""``rangetable bench`` and its subcommands: the native path (the group itself), ``store``, ``http``,
``soak`` (a workload held for minutes), ``scale`` (10M entities), ``frontends`` (REST across HTTP
frontend processes), ``control-plane``, ``takeover``, ``ttl`` and ``capacity`` (table TTL and reserved
throughput), ``aio`` (the asyncio native client against the blocking one), ``stock`` (conditional
counters against ETag retries), ``point-or`` (an `or` of 200 point keys against table size),
``replicas`` (the cost of replication: replicas 1 against 3), ``feed`` (the cost of the change feed: off
against on, a following reader's lag, catch-up and disk) and ``index`` (what secondary indexes cost: queries
through one at size, writes with 0, 1 and 3, the lag, an online build through a split and a failover) and
``host`` (what this machine charges for waking an idle thread).

Plain click commands; :mod:`cli.main` adds them to the ``bench`` group.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable

import click

from cli.options import json_option


def progress(as_json: bool) -> Callable[[str], None]:
    """Where a bench prints its lines as it runs: standard output, or nowhere under ``--json`` (the JSON is
    then all standard output holds)."""
    return (lambda s: None) if as_json else click.echo


@click.group("bench", invoke_without_command=True)
@click.option("--http", "use_http", is_flag=True, help="The Azure SDK workload over REST (= `bench http`).")
@click.option("-n", "count", default=20_000, show_default=True, help="Operations per phase (native path).")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@json_option
@click.pass_context
def bench_group(ctx: click.Context, use_http: bool, count: int, data_dir: str | None, as_json: bool) -> None:
    """Benchmarks that print figures. Without a subcommand: the native path (point ops, EGT, queries,
    scan, bulk ingest) next to a bare two-hop ZeroMQ echo; `--http` for the REST path."""
    if ctx.invoked_subcommand is not None:
        return
    if use_http:
        ctx.invoke(bench_http, data_dir=data_dir, as_json=as_json)
        return
    from cli.bench.http import bench_cluster
    from cli.bench.native import run_native_bench

    say = progress(as_json)
    with bench_cluster(data_dir) as (doc, _temp):
        say(f"native endpoint {doc['native']}, {count:,} operations per phase")
        res = run_native_bench(doc["native"], count, echo=say)
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("store")
@click.option("-n", "count", default=50_000, show_default=True, help="Entities per phase.")
@click.option("--options", "options", is_flag=True,
              help="Instead: RocksDB options compared on one store (bloom filter, block cache, memtable size, "
                   "deletes in key order, compaction CPU of one hot range).")
@click.option("--data-dir", default=None, help="Where to put the store (default: a temp dir).")
@json_option
def bench_store(count: int, options: bool, data_dir: str | None, as_json: bool) -> None:
    """Single-process range-store figures: point write/read, EGT of 100, filtered scan."""
    if options:
        from cli.bench.rocksdb_options import run_options_bench

        res = run_options_bench(count, max(1000, min(50_000, count // 4)), data_dir,
                                echo=progress(as_json))
    else:
        from cli.bench.store import run_store_bench

        res = run_store_bench(count, data_dir, echo=progress(as_json))
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("http")
@click.option("-n", "count", default=2000, show_default=True, help="Point operations per phase.")
@click.option("--batches", default=50, show_default=True, help="100-operation batches.")
@click.option("--big", default=50_000, show_default=True, help="Table size for the second PartitionKey query run.")
@click.option("--procs", default=8, show_default=True, help="Client processes (the SDK needs ~1 ms of CPU per call).")
@click.option("--entities", default=0, show_default=True, help="Preload this many entities before the first phase.")
@click.option("--pages", "max_pages", default=0, show_default=True, help="At most this many scan pages (0: all).")
@click.option("--frontends", default=1, show_default=True,
              help="HTTP frontends of the cluster it starts (sharing one port).")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one in a temp dir).")
@click.option("--endpoint", default=None, metavar="CONNECTION_STRING",
              help="Run the workload against another Azure Table endpoint instead (e.g. Azurite); needs --pid.")
@click.option("--pid", "pids", type=int, multiple=True,
              help="With --endpoint: a process whose CPU counts as the server's (repeatable).")
@json_option
def bench_http(count: int, batches: int, big: int, procs: int, entities: int, max_pages: int, frontends: int,
               data_dir: str | None, endpoint: str | None, pids: tuple[int, ...], as_json: bool) -> None:
    """The Azure SDK workload through the REST API: ops/s and server CPU per operation.

    With --endpoint and --pid the same workload runs against another server, so that rangetable and,
    say, Azurite are measured by one harness on one machine (see docs/http.md).
    """
    from cli.bench.http import bench_cluster, external_doc, run_http_bench

    if pids and not endpoint:
        raise click.UsageError("--pid goes with --endpoint.")
    if frontends != 1 and (endpoint or data_dir):
        raise click.UsageError("--frontends is for the cluster bench http starts, not with --endpoint or --data-dir.")
    target: contextlib.AbstractContextManager[tuple[dict, str | None]]  # (cluster.json, temporary data dir)
    if endpoint:
        if data_dir:
            raise click.UsageError("--endpoint and --data-dir exclude each other.")
        try:
            target = contextlib.nullcontext((external_doc(endpoint, list(pids)), None))
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    else:
        target = bench_cluster(data_dir, frontends=frontends)
    say = progress(as_json)
    with target as (doc, temp):
        say(f"REST endpoint {doc['http']}")
        res = run_http_bench(doc, count, batches, big=big, procs=procs, entities=entities, max_pages=max_pages,
                             hold_balancer=temp is not None, echo=say)
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("soak")
@click.option("--minutes", default=10.0, show_default=True, help="How long to run.")
@click.option("--threads", default=6, show_default=True, help="Client threads, one client each.")
@click.option("--mix", type=click.Choice(["mixed", "hot-partition"]), default="mixed", show_default=True,
              help="mixed: inserts, upserts, merges, gets, deletes, batches, queries, scan pages; "
                   "hot-partition: upserts of new RowKeys into one PartitionKey.")
@click.option("--interval", default=60.0, show_default=True, help="Seconds per row of the table.")
@click.option("--preload", default=100_000, show_default=True,
              help="Entities bulk-loaded first (read only by scans), so the first interval is not on an empty table.")
@click.option("--http", "use_http", is_flag=True, help="Through the Azure SDK over REST instead of the native client.")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@json_option
def bench_soak(minutes: float, threads: int, mix: str, interval: float, preload: int, use_http: bool,
               data_dir: str | None, as_json: bool) -> None:
    """A workload held for minutes: ops/s, latency, RSS of every process, bytes on disk and RocksDB's
    pending compaction per interval, then a verdict (exit 1 on FAIL): the last 10 minutes hold on average
    90% of minute 2's ops/s, and RSS less block caches, on average over those minutes, grew at most 10% over
    its average in as many minutes after warm-up."""
    from cli.bench.http import bench_cluster
    from cli.bench.soak import run_soak

    if minutes <= 0 or interval <= 0 or threads < 1 or preload < 0:
        raise click.UsageError("--minutes and --interval must be positive, --threads at least 1, --preload at least 0.")
    with bench_cluster(data_dir) as (doc, temp):
        work = data_dir or temp
        assert work is not None  # without a data dir, bench_cluster started one in ``temp``
        res = run_soak(doc, work, minutes=minutes, threads=threads, mix=mix, interval=interval,
                       http=use_http, background=preload, echo=progress(as_json))
    if as_json:
        click.echo(json.dumps(res, indent=2))
    if not res["verdict"]["ok"]:
        sys.exit(1)


@click.command("scale")
@click.option("--entities", default=10_000_000, show_default=True, help="Entities to load (~400 bytes each).")
@click.option("--moves", default=10, show_default=True, help="Moves of the loaded range, to time their offline windows.")
@click.option("--split-levels", default=3, show_default=True,
              help="Levels of manual splits at the median (1 + 2 + 4 splits for 3), to time their offline windows.")
@click.option("--split-mb", default=64, show_default=True,
              help="The balancer's size-split target, in MiB, for the size-based splits after the manual ones.")
@click.option("--block-cache-mb", default=128, show_default=True, help="Each partition server's block cache, in MiB.")
@click.option("--reps", default=2000, show_default=True, help="Point gets per measurement (queries: a fiftieth).")
@click.option("--loaders", default=2, show_default=True, help="Bulk-load client processes (each a contiguous key run).")
@click.option("--work-dir", default=None, help="Where the cluster it starts keeps its data (default: a temp dir).")
@click.option("--keep", is_flag=True, help="Leave the cluster running and its data in place.")
@json_option
def bench_scale(entities: int, moves: int, split_levels: int, split_mb: int, block_cache_mb: int, reps: int,
                loaders: int, work_dir: str | None, keep: bool, as_json: bool) -> None:
    """Load one table through the native bulk path (progress on stderr), then at that size: point gets,
    query and scan pages against the same at 10,000 entities, move and split offline times of the
    multi-GB range, size-based splits, space on disk, and restart times. Starts its own cluster."""
    import os
    import shutil
    import tempfile

    from cli.bench.scale import SMALL, run_scale, time_up
    from cli.cluster_file import down, read_cluster

    if entities < SMALL or min(moves, split_levels, split_mb, block_cache_mb, reps, loaders) < 1:
        raise click.UsageError(f"--entities must be at least {SMALL:,}; --moves, --split-levels, --split-mb, "
                               "--block-cache-mb, --reps and --loaders at least 1.")
    data_dir = os.path.abspath(work_dir or tempfile.mkdtemp(prefix="rt-bench-scale-"))
    os.environ["RANGETABLE_BLOCK_CACHE_MB"] = str(block_cache_mb)  # inherited by the partition servers
    up_args = ["--servers", "2", "--replicas", "1"]  # one copy under the shared root, as the figures were taken
    echo = progress(as_json)
    try:
        echo(f"starting a cluster in {data_dir} (block cache {block_cache_mb} MiB per partition server)")
        time_up(data_dir, up_args)
        doc = read_cluster(data_dir)
        assert doc is not None  # time_up returned: the cluster is up, its cluster.json written
        with click.progressbar(length=entities, label="bulk load", file=sys.stderr) as bar:
            res = run_scale(doc, data_dir, entities=entities, moves=moves, split_levels=split_levels,
                            split_target=split_mb << 20, reps=reps,
                            loaders=loaders, up_args=up_args, echo=echo, progress=bar.update)
    finally:
        if not keep:
            down(data_dir)
            if not work_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("frontends")
@click.option("--max", "max_frontends", default=2, show_default=True, help="Measure 1 up to this many HTTP frontends.")
@click.option("--seconds", default=30.0, show_default=True, help="Length of each measured run.")
@click.option("--connections", default=64, show_default=True, help="Keep-alive connections wrk keeps open.")
@json_option
def bench_frontends(max_frontends: int, seconds: float, connections: int, as_json: bool) -> None:
    """REST throughput at 1, 2, … HTTP frontends sharing one port, driven by wrk (point GETs with a
    table SAS): requests/s, latency and server CPU per request. Needs wrk (apt-get install wrk)."""
    from cli.bench.frontends import WrkMissing, run_frontends_bench

    if max_frontends < 1 or seconds <= 0 or connections < 1:
        raise click.UsageError("--max and --connections must be at least 1, --seconds positive.")
    try:
        res = run_frontends_bench(max_frontends, seconds, connections, echo=progress(as_json))
    except WrkMissing as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("control-plane")
@click.option("--servers", default=1000, show_default=True, help="Simulated partition servers.")
@click.option("--ranges", default=100_000, show_default=True, help="Ranges in the seeded map (one table).")
@click.option("--frontends", default=10, show_default=True, help="Real frontend processes.")
@click.option("--sim-processes", default=4, show_default=True, help="Processes the simulated servers run in.")
@click.option("--seconds", default=10.0, show_default=True, help="Length of the heartbeat measurement.")
@click.option("--work-dir", default=None, help="Keep the run's data and logs here (default: a temp dir, removed).")
@json_option
def bench_control_plane(servers: int, ranges: int, frontends: int, sim_processes: int, seconds: float,
                        work_dir: str | None, as_json: bool) -> None:
    """The control plane at scale: the real coordinator and frontends against simulated partition
    servers (real heartbeats and control commands, no data). Reports coordinator CPU and heartbeat
    round trips, the bytes and time for a split to reach every frontend, frontend memory with the
    whole map, and the time to fail over a killed server's ranges."""
    from cli.bench.control_plane import format_table, run_control_plane_bench

    if servers < 2 or ranges < servers or frontends < 1 or sim_processes < 1 or seconds <= 0:
        raise click.UsageError("need --servers >= 2, --ranges >= --servers, --frontends >= 1, "
                               "--sim-processes >= 1 and --seconds > 0.")
    res = run_control_plane_bench(servers, ranges, frontends, sim_processes, seconds, work_dir,
                                  echo=progress(as_json))
    click.echo(json.dumps(res, indent=2) if as_json else format_table(res))


@click.command("takeover")
@click.option("--servers", default=1000, show_default=True, help="Servers in the seeded map.")
@click.option("--ranges", default=100_000, show_default=True, help="Ranges in the seeded map (one table).")
@click.option("--follow-s", default=2.0, show_default=True, type=float,
              help="Seconds the standby follows the leader before the pause.")
@click.option("--mode", type=click.Choice(["pause", "kill"]), default="pause", show_default=True,
              help="Pause the leader (SIGSTOP: its store is copied) or kill it (its store is reopened).")
@click.option("--meta", type=click.Choice(["rocksdb", "etcd"]), default="rocksdb", show_default=True,
              help="Where the coordinators keep their state: RocksDB on the data root, or a real etcd the bench "
                   "starts (needs the etcd binary: apt-get install etcd-server).")
@click.option("--cold", is_flag=True, help="Run the coordinators with --cold-takeover (no warm standby), to compare.")
@json_option
def bench_takeover(servers: int, ranges: int, follow_s: float, mode: str, meta: str, cold: bool, as_json: bool) -> None:
    """Two real coordinators on a large seeded map: pause the leader, report when the standby's first
    lease came and how long copying the meta store and loading the map took."""
    from cli.bench.takeover import format_result, run_takeover_bench

    if servers < 1 or ranges < servers:
        raise click.UsageError("need --servers >= 1 and --ranges >= --servers.")
    if follow_s < 0:
        raise click.UsageError("--follow-s must be >= 0.")
    if meta == "etcd":
        from cli.bench.etcd_server import etcd_missing

        why = etcd_missing()
        if why:
            raise click.ClickException(why)
    res = run_takeover_bench(servers, ranges, echo=progress(as_json), follow_s=follow_s,
                             mode=mode, meta=meta, cold=cold)
    click.echo(json.dumps(res, indent=2) if as_json else format_result(res))


@click.command("ttl")
@click.option("-n", "count", default=1_000_000, show_default=True, help="Entities loaded (bulk path).")
@click.option("--interval", default=2.0, show_default=True, help="Seconds per printed row.")
@click.option("--limit-s", default=300.0, show_default=True, help="Stop printing rows after this long.")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@json_option
def bench_ttl(count: int, interval: float, limit_s: float, data_dir: str | None, as_json: bool) -> None:
    """Table TTL: load N entities, shorten the TTL to 1 s, check that reads stop returning them at
    once, then print disk space, entities left and partition-server CPU per interval while they
    are reclaimed."""
    from cli.bench.table_settings import bench_ttl_cmd

    if count < 1 or interval <= 0:
        raise click.UsageError("need -n >= 1 and --interval > 0.")
    res = bench_ttl_cmd(count, interval, limit_s, data_dir, progress(as_json))
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("capacity")
@click.option("--writes", "reserve", default=1000, show_default=True, help="Writes/s reserved for each table.")
@click.option("--seconds", default=20.0, show_default=True, help="Length of each phase.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds per printed row.")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@json_option
def bench_capacity(reserve: int, seconds: float, interval: float, data_dir: str | None, as_json: bool) -> None:
    """Reserved throughput: a table of 4 ranges reserved at N writes/s under a skewed load, then two
    such tables on the same servers at once; prints what each was granted per interval."""
    from cli.bench.table_settings import bench_capacity_cmd

    if reserve < 1 or seconds <= 0 or interval <= 0:
        raise click.UsageError("need --writes >= 1, --seconds > 0 and --interval > 0.")
    res = bench_capacity_cmd(reserve, seconds, interval, data_dir, progress(as_json))
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("aio")
@click.option("--seconds", default=60.0, show_default=True, help="How long each client runs.")
@click.option("--interval", default=10.0, show_default=True, help="Seconds per printed row.")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@click.option("--tasks", default=64, show_default=True, help="Concurrent asyncio tasks on one asyncio client.")
@click.option("--threads", default=8, show_default=True, help="Threads of the blocking client (a client each).")
@click.option("--keys", default=10_000, show_default=True, help="Entities preloaded; the operations pick among them.")
@click.option("--reads", "read_share", default=0.5, show_default=True, help="Share of point reads (the rest: upserts).")
@json_option
def bench_aio(seconds: float, interval: float, data_dir: str | None, tasks: int, threads: int, keys: int,
              read_share: float, as_json: bool) -> None:
    """The asyncio native client (one process, --tasks tasks on one socket) against the blocking one
    (--threads threads) on point upserts and point reads: ops/s every --interval s, and the steady figure."""
    from cli.bench.aio import Mix, run_aio_bench
    from cli.bench.http import bench_cluster

    if seconds < interval or interval <= 0 or tasks < 1 or threads < 1 or keys < 1 or not 0 <= read_share <= 1:
        raise click.UsageError("need --seconds >= --interval > 0, --tasks/--threads/--keys >= 1, 0 <= --reads <= 1.")
    with bench_cluster(data_dir) as (doc, _temp):
        res = run_aio_bench(doc["native"], doc, seconds=seconds, interval=interval, tasks=tasks, threads=threads,
                            mix=Mix(keys=keys, read_share=read_share),
                            echo=progress(as_json))
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("stock")
@click.option("--stock", default=5000, show_default=True, help="Units to sell in each run.")
@click.option("--clients", default=8, show_default=True, help="Client processes decrementing at once.")
@click.option("--via", "vias", type=click.Choice(["native", "rest"]), multiple=True,
              help="Native client and/or the Azure SDK over REST (default: both).")
@click.option("--mode", "modes", type=click.Choice(["cond", "etag"]), multiple=True,
              help="cond: conditional counter writes; etag: read, If-Match write, retry (default: both).")
@click.option("--interval", default=2.0, show_default=True, help="Seconds per printed row.")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@json_option
def bench_stock(stock: int, clients: int, vias: tuple[str, ...], modes: tuple[str, ...], interval: float,
                data_dir: str | None, as_json: bool) -> None:
    """Clients decrementing one stock counter until it is sold out: conditional counter writes
    (`stock ge 1`, `stock -1`) against read + If-Match write + retry. Checks the final stock is 0 and
    no decrement was lost or doubled (exit 1 otherwise); prints ops/s and retries per decrement."""
    import uuid

    from cli.bench.http import bench_cluster
    from cli.workload.stock import MODES, VIAS, run_stock
    from rangetable import TableServiceClient

    if stock < 1 or clients < 1 or interval <= 0:
        raise click.UsageError("--stock and --clients must be at least 1, --interval positive.")
    echo = progress(as_json)
    results = []
    with bench_cluster(data_dir) as (doc, _):
        table = f"stock{uuid.uuid4().hex[:8]}"
        with TableServiceClient(doc["native"]) as svc:
            svc.create_table(table)
            try:
                for via in vias or VIAS:
                    for mode in modes or MODES:
                        results.append(run_stock(via, mode, doc=doc, table=table, stock=stock, clients=clients,
                                                 interval=interval, echo=echo))
            finally:
                svc.delete_table(table)
    echo("\nvia     mode   ops/s  retries/op  final  lost  doubled  verdict")
    for r in results:
        echo(f"{r['via']:7} {r['mode']:5} {r['ops_s']:6.0f}  {r['retries_per_op']:10.2f}  {r['final']:5}  "
             f"{r['lost']:4}  {r['doubled']:7}  {'PASS' if r['ok'] else 'FAIL'}")
    if as_json:
        click.echo(json.dumps(results, indent=2))
    if not all(r["ok"] for r in results):
        sys.exit(1)


@click.command("point-or")
@click.option("--sizes", default="1000,10000,100000,1000000", show_default=True,
              help="Table sizes to grow through (entities, ascending, comma-separated).")
@click.option("--queries", default=200, show_default=True, help="`or` queries per size and path.")
@click.option("--procs", default=2, show_default=True, help="Client processes running the queries.")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@json_option
def bench_point_or(sizes: str, queries: int, procs: int, data_dir: str | None, as_json: bool) -> None:
    """An `or` of 200 point keys (Orleans' grain-directory filter) through REST and native, against
    one table grown through --sizes: queries/s and server CPU per query, next to a full scan."""
    from cli.bench.http import bench_cluster
    from cli.bench.point_or import run_point_or_bench

    try:
        steps = [int(s) for s in sizes.split(",")]
    except ValueError:
        raise click.UsageError("--sizes takes integers, comma-separated.") from None
    if not steps or steps != sorted(set(steps)) or steps[0] < 1 or queries < 1 or procs < 1:
        raise click.UsageError("need ascending --sizes >= 1, --queries >= 1 and --procs >= 1.")
    with bench_cluster(data_dir) as (doc, _temp):
        res = run_point_or_bench(doc, steps, queries, procs, echo=progress(as_json))
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("replicas")
@click.option("--seconds", default=120.0, show_default=True, help="Seconds of point writes per setting.")
@click.option("--interval", default=10.0, show_default=True, help="Seconds per printed row.")
@click.option("--threads", type=int, multiple=True,
              help="Client threads upserting (a native client each); once per load to measure (default: 8 and 32).")
@click.option("--bulk", default=300_000, show_default=True, help="Entities bulk-loaded per setting (0: skip).")
@click.option("--loaders", default=2, show_default=True, help="Bulk-load client processes.")
@click.option("--rebuild-mb", default=200.0, show_default=True,
              help="MB of the range re-replicated at replicas 3 (0: skip re-replication).")
@click.option("--rebuild-mb-s", "rebuild_rates", type=float, multiple=True,
              help="The partition servers' --rebuild-mb-s, one re-replication run each (0: no limit; "
                   "default: 100 and 0).")
@click.option("--rebuild-timeout", default=300.0, show_default=True,
              help="Seconds to wait for 3 in-sync replicas again.")
@json_option
def bench_replicas(seconds: float, interval: float, threads: tuple[int, ...], bulk: int, loaders: int,
                   rebuild_mb: float, rebuild_rates: tuple[float, ...], rebuild_timeout: float, as_json: bool) -> None:
    """The cost of replication on this machine: the same point-write load and bulk ingest on a cluster of
    three partition servers at --replicas 1 and at 3 (ops/s, p50/p99 and CPU per write every --interval), at
    each client load (--threads), then the time to re-replicate a lost follower's copy. Starts its own
    clusters."""
    from cli.bench.replicas import format_table, run_replicas_bench

    threads = threads or (8, 32)
    if seconds < interval or interval <= 0 or min(threads) < 1 or bulk < 0 or loaders < 1 or rebuild_mb < 0 \
            or rebuild_timeout <= 0 or any(r < 0 for r in rebuild_rates):
        raise click.UsageError("need --seconds >= --interval > 0, --threads/--loaders >= 1, --bulk/--rebuild-mb "
                               ">= 0, --rebuild-timeout > 0 and --rebuild-mb-s >= 0.")
    res = run_replicas_bench(seconds=seconds, interval=interval, threads=threads, bulk=bulk, loaders=loaders,
                             rebuild_mb=rebuild_mb, rebuild_rates=rebuild_rates or (100.0, 0.0),
                             rebuild_timeout=rebuild_timeout, echo=progress(as_json))
    click.echo(json.dumps(res, indent=2) if as_json else "\n" + format_table(res))


@click.command("feed")
@click.option("--seconds", default=120.0, show_default=True, help="Seconds of point writes per setting (feed off, on).")
@click.option("--interval", default=10.0, show_default=True, help="Seconds per printed row.")
@click.option("--threads", default=8, show_default=True, help="Client threads upserting (a native client each).")
@click.option("--rows", default=100_000, show_default=True, help="Rows the point writes upsert, at random.")
@click.option("--catchup", default=1_000_000, show_default=True,
              help="Changes bulk-written per setting for the disk figure, then read from the beginning (0: skip).")
@click.option("--loaders", default=2, show_default=True, help="Bulk-load client processes.")
@click.option("--poll-interval", "poll", default=0.05, show_default=True,
              help="The following reader's wait between pages that bring nothing new (read_changes' poll_interval).")
@json_option
def bench_feed(seconds: float, interval: float, threads: int, rows: int, catchup: int, loaders: int, poll: float,
               as_json: bool) -> None:
    """The cost of the change feed on a cluster as `rangetable up` starts it (3 servers, 3 replicas): point-write
    ops/s, p50/p99 and CPU per write with the feed off and on (with a reader following it: lag from
    acknowledgement to the reader, p50/p99), every --interval; then --catchup changes bulk-written (disk per
    million changes, off and on) and read from the beginning (changes/s against the write rate). Starts its own
    clusters."""
    from cli.bench.feed import format_table, run_feed_bench

    if seconds < interval or interval <= 0 or threads < 1 or rows < 1 or catchup < 0 or loaders < 1 or poll < 0:
        raise click.UsageError("need --seconds >= --interval > 0, --threads/--rows/--loaders >= 1, --catchup >= 0 "
                               "and --poll-interval >= 0.")
    res = run_feed_bench(seconds=seconds, interval=interval, threads=threads, rows=rows, catchup=catchup,
                         loaders=loaders, poll=poll, echo=progress(as_json))
    click.echo(json.dumps(res, indent=2) if as_json else "\n" + format_table(res))


@click.command("geo")
@click.option("--minutes", default=5.0, show_default=True, help="Minutes of writes at the source's full rate.")
@click.option("--interval", default=30.0, show_default=True, help="Seconds per printed row.")
@click.option("--threads", default=8, show_default=True, help="Client threads writing (a native client each).")
@click.option("--rows", default=100_000, show_default=True, help="Rows the writes upsert, at random.")
@click.option("--cut-s", default=60.0, show_default=True,
              help="Seconds the secondary's appliers are stopped under the writes, then timed catching up.")
@click.option("--preload", default=0, show_default=True,
              help="Entities bulk-loaded into the source's table before the secondary starts (timed: its first copy).")
@json_option
def bench_geo(minutes: float, interval: float, threads: int, rows: int, cut_s: float, preload: int,
              as_json: bool) -> None:
    """What a secondary cluster costs and how far behind it stays: two clusters as `rangetable up` starts them, the
    second following the first; the source's writes/s against the secondary's applied records/s, the RPO (now less
    the cut) p50/p99/max and the secondary's CPU per record every --interval; then catch-up after its appliers
    stop for --cut-s; then every entity compared. With --preload, first the time the secondary takes to copy the
    table. Starts its own clusters."""
    from cli.bench.geo import format_table, run_geo_bench

    if minutes * 60 < interval or interval <= 0 or threads < 1 or rows < 1 or cut_s < 0 or preload < 0:
        raise click.UsageError("need --minutes * 60 >= --interval > 0, --threads/--rows >= 1 and --cut-s, "
                               "--preload >= 0.")
    res = run_geo_bench(minutes=minutes, interval=interval, threads=threads, rows=rows, cut_s=cut_s,
                        preload=preload, echo=progress(as_json))
    click.echo(json.dumps(res, indent=2) if as_json else "\n" + format_table(res))


@click.command("index")
@click.option("--rows", default=1_000_000, show_default=True,
              help="Entities bulk-loaded for the queries and the online build (100 per PartitionKey and per value of "
                   "the indexed property).")
@click.option("--seconds", default=120.0, show_default=True,
              help="Seconds of point writes per setting (0, 1 and 3 indexes).")
@click.option("--query-seconds", default=60.0, show_default=True,
              help="Seconds of each query kind at size (index, base scan, PartitionKey, Azure SDK).")
@click.option("--interval", default=10.0, show_default=True, help="Seconds per printed row.")
@click.option("--threads", default=8, show_default=True, help="Client threads writing (a native client each).")
@click.option("--write-rows", default=100_000, show_default=True, help="Rows the point writes upsert, at random.")
@click.option("--loaders", default=2, show_default=True, help="Bulk-load client processes.")
@click.option("--verify", default=300, show_default=True,
              help="Random equality queries checking the index built online against the base table.")
@click.option("--part", "parts", type=click.Choice(["queries", "writes", "online"]), multiple=True,
              help="Run only these parts (repeatable; default: all).")
@json_option
def bench_index(rows: int, seconds: float, query_seconds: float, interval: float, threads: int, write_rows: int,
                loaders: int, verify: int, parts: tuple[str, ...], as_json: bool) -> None:
    """What secondary indexes cost on a cluster as `rangetable up` starts it (3 servers, 3 replicas): the build
    over --rows; an equality query through the index against the same filter scanning the base table, a
    PartitionKey query and the Azure SDK (queries/s, p50/p99, CPU per query); point writes with 0, 1 and 3
    indexes (ops/s, p50/p99, CPU per write) and the index's lag; an online build under writes through a split
    and a kill -9, verified against the base table. Starts its own clusters."""
    from cli.bench.index import PARTS, format_table, run_index_bench

    if (seconds < interval or query_seconds <= 0 or interval <= 0 or threads < 1 or rows < 100 or write_rows < 1
            or loaders < 1 or verify < 1):
        raise click.UsageError("need --seconds >= --interval > 0, --query-seconds > 0, --rows >= 100 and "
                               "--threads/--write-rows/--loaders/--verify >= 1.")
    res = run_index_bench(rows=rows, seconds=seconds, query_seconds=query_seconds, interval=interval, threads=threads,
                          write_rows=write_rows, loaders=loaders, verify=verify, parts=parts or PARTS,
                          echo=progress(as_json))
    click.echo(json.dumps(res, indent=2) if as_json else "\n" + format_table(res))


@click.command("host")
@click.option("--seconds", default=2.0, show_default=True, help="Seconds per measurement.")
@json_option
def bench_host(seconds: float, as_json: bool) -> None:
    """What this machine charges for waking up: the CPU of a ZeroMQ send and of a fixed Python loop, back to back
    and after idle gaps of 0.5 and 2 ms, and a ZeroMQ round trip. Every hop of a request wakes an idle thread,
    so this sets the CPU a lightly loaded cluster spends per operation here. Starts no cluster."""
    from cli.bench.host import run_host_bench

    if seconds <= 0:
        raise click.UsageError("--seconds must be positive.")
    res = run_host_bench(seconds, echo=progress(as_json))
    if as_json:
        click.echo(json.dumps(res, indent=2))


@click.command("geo-rejoin")
@click.option("--rows", default=100_000, show_default=True, help="Entities in the table.")
@click.option("--outage", default=10_000, show_default=True,
              help="Entities written again at the old primary while the secondary is cut off.")
@json_option
def bench_geo_rejoin(rows: int, outage: int, as_json: bool) -> None:
    """What a failback costs: after a forced failover, the old primary rejoining by a diff (its loss ledger's keys
    read at the new primary, then the new primary's feed from the cut) against a full copy of the table. Starts
    its own clusters."""
    from cli.bench.geo_rejoin import format_result, run_rejoin_bench

    if rows < 1 or not 0 < outage <= rows:
        raise click.UsageError("need --rows >= 1 and 0 < --outage <= --rows.")
    res = run_rejoin_bench(rows, outage, progress(as_json))
    click.echo(json.dumps(res, indent=2) if as_json else "\n" + format_result(res))
