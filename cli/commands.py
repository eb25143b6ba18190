"""User and admin commands: tables, entities, queries, the partition map, events, manual changes."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from cli.admin import call, human_size, range_loads
from cli.bench import bench_control_plane, bench_frontends, bench_scale, bench_soak, bench_takeover
from cli.main import data_dir_option, json_option, main
from rangetable.rest_json import json_to_typed, typed_to_json

endpoint_option = click.option("--endpoint", default=None, help="Native endpoint (default: from cluster.json).")


def _cluster(data_dir: str) -> dict:
    from cli.supervisor import read_cluster

    doc = read_cluster(data_dir)
    if doc is None:
        raise click.ClickException(f"no cluster.json in {data_dir}: start one with `rangetable up` "
                                   "or pass --endpoint")
    return doc


def _native(data_dir: str, endpoint: str | None) -> str:
    if endpoint:
        from cli.supervisor import read_cluster

        read_cluster(data_dir)  # remembers its CURVE keys, if the endpoint is one of that cluster's
        return endpoint
    return _cluster(data_dir)["native"]


def _coordinator(data_dir: str, endpoint: str | None) -> str:
    return _native(data_dir, endpoint) if endpoint else _cluster(data_dir)["coordinator"]


def _entity_json(wire: list) -> dict:
    pk, rk, ts, props = wire
    return typed_to_json(pk, rk, ts, props, metadata="minimal")


def _emit(obj: Any, as_json: bool, text: str) -> None:
    click.echo(json.dumps(obj, indent=2, default=str) if as_json else text)


# --- tables --------------------------------------------------------------------------------------


@main.group("table")
def table_group() -> None:
    """Create, delete and list tables."""


@table_group.command("create")
@click.argument("name")
@data_dir_option
@endpoint_option
def table_create(name: str, data_dir: str, endpoint: str | None) -> None:
    """Create a table."""
    call(_native(data_dir, endpoint), {"op": "create_table", "table": name})
    click.echo(f"created table {name}")


@table_group.command("delete")
@click.argument("name")
@data_dir_option
@endpoint_option
def table_delete(name: str, data_dir: str, endpoint: str | None) -> None:
    """Delete a table and all its entities."""
    call(_native(data_dir, endpoint), {"op": "delete_table", "table": name})
    click.echo(f"deleted table {name}")


@table_group.command("list")
@data_dir_option
@endpoint_option
@json_option
def table_list(data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """List tables."""
    res = call(_native(data_dir, endpoint), {"op": "list_tables"})
    _emit(res["tables"], as_json, "\n".join(res["tables"]) or "(no tables)")


# --- entities ------------------------------------------------------------------------------------


@main.group("entity")
def entity_group() -> None:
    """Put, get and delete entities (JSON as in the Azure REST API, @odata.type annotations allowed)."""


@entity_group.command("put")
@click.argument("table")
@click.argument("entity_json")
@click.option("--mode", type=click.Choice(["replace", "merge", "insert"]), default="replace", show_default=True,
              help="replace/merge: upsert; insert: fail if the entity exists.")
@click.option("--if-match", default=None, help="Only update when the entity's ETag matches (or '*').")
@data_dir_option
@endpoint_option
@json_option
def entity_put(table: str, entity_json: str, mode: str, if_match: str | None, data_dir: str,
               endpoint: str | None, as_json: bool) -> None:
    """Insert or update an entity given as JSON."""
    try:
        body = json.loads(entity_json)
    except ValueError as exc:
        raise click.ClickException(f"InvalidInput: not JSON: {exc}") from None
    pk, rk, props = json_to_typed(body)
    if mode == "insert":
        op = "insert"
    elif if_match:
        op = mode
    else:
        op = "insert_or_" + mode
    res = call(_native(data_dir, endpoint), {"op": "write", "table": table, "write": {
        "op": op, "pk": pk, "rk": rk, "props": props, "if_match": if_match}})
    from rangetable.edm import etag_from_ticks

    etag = etag_from_ticks(res[2])
    _emit({"etag": etag}, as_json, f"ok  etag {etag}")


@entity_group.command("merge")
@click.argument("table")
@click.argument("entity_json")
@click.option("--if-match", default=None, help="Only merge when the entity's ETag matches (or '*').")
@data_dir_option
@endpoint_option
@json_option
@click.pass_context
def entity_merge(ctx: click.Context, table: str, entity_json: str, if_match: str | None, data_dir: str,
                 endpoint: str | None, as_json: bool) -> None:
    """Merge properties into an entity (inserting it if absent, unless --if-match is given)."""
    ctx.invoke(entity_put, table=table, entity_json=entity_json, mode="merge", if_match=if_match,
               data_dir=data_dir, endpoint=endpoint, as_json=as_json)


@entity_group.command("get")
@click.argument("table")
@click.argument("partition_key")
@click.argument("row_key")
@data_dir_option
@endpoint_option
def entity_get(table: str, partition_key: str, row_key: str, data_dir: str, endpoint: str | None) -> None:
    """Print one entity as JSON."""
    res = call(_native(data_dir, endpoint), {"op": "get", "table": table, "pk": partition_key, "rk": row_key})
    click.echo(json.dumps(_entity_json(res), indent=2))


@entity_group.command("delete")
@click.argument("table")
@click.argument("partition_key")
@click.argument("row_key")
@click.option("--if-match", default="*", show_default=True, help="ETag the entity must have.")
@data_dir_option
@endpoint_option
def entity_delete(table: str, partition_key: str, row_key: str, if_match: str, data_dir: str,
                  endpoint: str | None) -> None:
    """Delete one entity."""
    call(_native(data_dir, endpoint), {"op": "write", "table": table, "write": {
        "op": "delete", "pk": partition_key, "rk": row_key, "if_match": if_match}})
    click.echo("deleted")


@main.command("query")
@click.argument("table")
@click.argument("filter_text", required=False, default=None, metavar="[FILTER]")
@click.option("--select", default=None, help="Comma-separated properties to return.")
@click.option("--top", type=int, default=None, help="Stop after this many entities.")
@click.option("--page-size", type=int, default=1000, show_default=True)
@data_dir_option
@endpoint_option
@json_option
def query_cmd(table: str, filter_text: str | None, select: str | None, top: int | None, page_size: int,
              data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Query a table with an OData $filter, e.g. "PartitionKey eq 'p1' and qty ge 2"."""
    ep = _native(data_dir, endpoint)
    sel = [s.strip() for s in select.split(",")] if select else None
    token = None
    out: list[dict] = []
    pages = 0
    while True:
        size = page_size if top is None else min(page_size, top - len(out))
        res = call(ep, {"op": "query", "table": table, "filter": filter_text, "select": sel, "top": size,
                        "next": token})
        pages += 1
        for w in res["entities"]:
            e = _entity_json(w)
            out.append(e)
            if not as_json:
                click.echo(json.dumps(e))
        token = res["next"]
        if token is None or (top is not None and len(out) >= top):
            break
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(f"({len(out)} entities, {pages} page{'s' if pages != 1 else ''})", err=True)


# --- admin ---------------------------------------------------------------------------------------

coordinator_option = click.option("--coordinator", default=None, help="Coordinator endpoint (default: cluster.json).")


def _fmt_key(k: str | None, unbounded: str) -> str:
    return unbounded if k is None else (repr(k) if k else "''")


@main.command("ranges")
@click.argument("table", required=False)
@data_dir_option
@coordinator_option
@json_option
def ranges_cmd(table: str | None, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Show the partition map: every range with its bounds, owner, epoch and load."""
    st = call(_coordinator(data_dir, coordinator), {"op": "status"})
    load = range_loads(st)
    rs = [r for r in st["ranges"] if table is None or r["table"].lower() == table.lower()]
    if as_json:
        click.echo(json.dumps({"version": st["version"], "servers": st["servers"],
                               "ranges": [{**r, "load": load.get(r["id"], {})} for r in rs]}, indent=2))
        return
    click.echo(f"map version {st['version']}, {len(st['tables'])} tables, {len(st['ranges'])} ranges")
    click.echo(f"{'range':8} {'table':14} {'low':>12} {'high':>12} {'owner':8} {'epoch':>5} {'state':9} "
               f"{'entities':>9} {'size':>9} {'req/s':>8}")
    for r in rs:
        ld = load.get(r["id"], {})
        rps = ld.get("reads_s", 0) + ld.get("writes_s", 0)
        click.echo(f"{r['id']:8} {r['table'][:14]:14} {_fmt_key(r['low'], ''):>12} {_fmt_key(r['high'], '∞'):>12} "
                   f"{str(r['owner']):8} {r['epoch']:>5} {r['state']:9} {ld.get('entities', 0):>9} "
                   f"{human_size(ld.get('bytes', 0)):>9} {rps:>8.1f}")
    click.echo("")
    _print_servers(st["servers"])


def _print_servers(servers: list[dict]) -> None:
    for s in servers:
        state = "alive" if s["alive"] else "DEAD"
        click.echo(f"server {s['id']:8} {state:5} {s['endpoint']:24} pid {s['pid']:<7} ranges {s['ranges']}")


@main.command("servers")
@data_dir_option
@coordinator_option
@json_option
def servers_cmd(data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """List partition servers: alive or dead, endpoint, pid, ranges."""
    st = call(_coordinator(data_dir, coordinator), {"op": "servers"})
    if as_json:
        click.echo(json.dumps(st["servers"], indent=2))
    else:
        _print_servers(st["servers"])


@main.command("status")
@data_dir_option
@json_option
def status_cmd(data_dir: str, as_json: bool) -> None:
    """The cluster at a glance: processes, endpoints, map version, tables, ranges, servers."""
    from cli.supervisor import pid_alive

    doc = _cluster(data_dir)
    st = call(doc["coordinator"], {"op": "status"})
    if as_json:
        click.echo(json.dumps({"cluster": doc, "status": st}, indent=2))
        return
    click.echo(f"native {doc['native']}" + (f"   REST {doc['http']}" if doc.get("http") else "")
               + (f"   dashboard {doc['dashboard']}" if doc.get("dashboard") else ""))
    click.echo(f"coordinator {st.get('leader', doc['coordinator'])} leads term {st.get('term')}   "
               f"map version {st['version']}, {len(st['tables'])} tables, {len(st['ranges'])} ranges")
    for p in doc["processes"]:
        up = "running" if p.get("pid") and pid_alive(p["pid"]) else "DOWN"
        role = p["role"]
        if role == "coordinator" and len([q for q in doc["processes"] if q["role"] == role]) > 1:
            role += " (leads)" if p.get("endpoint") == st.get("leader") else " (standby)"
        click.echo(f"  {p['id']:14} {role:23} pid {p['pid']:<7} {up:8} restarts {p.get('restarts', 0)}"
                   + (f"   {p.get('metrics') or p['url']}" if p.get("metrics") or p.get("url") else ""))
    _print_servers(st["servers"])


@main.command("events")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events.")
@click.option("--limit", default=50, show_default=True)
@data_dir_option
@coordinator_option
@json_option
def events_cmd(follow: bool, limit: int, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Show splits, merges, moves, failovers and warnings, with durations and offline times."""
    ep = _coordinator(data_dir, coordinator)
    since = 0
    first = True
    while True:
        evs = call(ep, {"op": "events", "since": since, "limit": limit if first else 1000})
        first = False
        for e in evs:
            since = max(since, e["seq"])
            if as_json:
                click.echo(json.dumps(e))
                continue
            when = time.strftime("%H:%M:%S", time.localtime(e["time"]))
            rest = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("seq", "time", "kind"))
            click.echo(f"{when} {e['kind']:12} {rest}")
        if not follow:
            return
        time.sleep(0.5)


@main.command("split")
@click.argument("range_id")
@click.option("--at", "key", default=None, help="PartitionKey to split at (default: the data median).")
@data_dir_option
@coordinator_option
@json_option
def split_cmd(range_id: str, key: str | None, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Split a range at a PartitionKey (default: the data median)."""
    res = call(_coordinator(data_dir, coordinator), {"op": "split", "range": range_id, "key": key}, timeout=60)
    _emit(res, as_json, f"split {range_id} at {res['key']!r} into {res['left']} and {res['right']}, "
                        f"offline {res['offline_ms']} ms")


@main.command("move")
@click.argument("range_id")
@click.option("--to", "server", required=True, help="Target partition server id.")
@data_dir_option
@coordinator_option
@json_option
def move_cmd(range_id: str, server: str, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Move a range to another partition server."""
    res = call(_coordinator(data_dir, coordinator), {"op": "move", "range": range_id, "server": server}, timeout=60)
    _emit(res, as_json, f"moved {range_id} to {server}, offline {res['offline_ms']} ms")


@main.command("merge")
@click.argument("range_id")
@data_dir_option
@coordinator_option
@json_option
def merge_cmd(range_id: str, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Merge a range with its right-hand neighbour."""
    res = call(_coordinator(data_dir, coordinator), {"op": "merge", "range": range_id}, timeout=60)
    _emit(res, as_json, f"merged {res['left']} and {res['right']} into {res['range']}, "
                        f"offline {res['offline_ms']} ms")


@main.group("bench", invoke_without_command=True)
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
    from rangetable.bench_http import start_temp_cluster, stop_temp_cluster
    from rangetable.bench_native import run_native_bench

    temp = None
    if data_dir:
        doc = _cluster(data_dir)
    else:
        temp, doc = start_temp_cluster()
    try:
        click.echo(f"native endpoint {doc['native']}, {count:,} operations per phase")
        res = run_native_bench(doc["native"], count, echo=click.echo)
    finally:
        if temp:
            stop_temp_cluster(temp)
    if as_json:
        click.echo(json.dumps(res, indent=2))


@bench_group.command("store")
@click.option("-n", "count", default=50_000, show_default=True, help="Entities per phase.")
@click.option("--options", "options", is_flag=True,
              help="Instead: RocksDB options compared on one store (bloom filter, block cache, memtable size, "
                   "deletes in key order, compaction CPU of one hot range).")
@click.option("--data-dir", default=None, help="Where to put the store (default: a temp dir).")
@json_option
def bench_store(count: int, options: bool, data_dir: str | None, as_json: bool) -> None:
    """Single-process range-store figures: point write/read, EGT of 100, filtered scan."""
    if options:
        from rangetable.bench_options import run_options_bench

        res = run_options_bench(count, max(1000, min(50_000, count // 4)), data_dir,
                                echo=(lambda s: None) if as_json else click.echo)
    else:
        from rangetable.bench_store import run_store_bench

        res = run_store_bench(count, data_dir)
    if as_json:
        click.echo(json.dumps(res, indent=2))


bench_group.add_command(bench_soak)
bench_group.add_command(bench_scale)
bench_group.add_command(bench_frontends)
bench_group.add_command(bench_control_plane)
bench_group.add_command(bench_takeover)


@bench_group.command("http")
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
    from rangetable.bench_http import external_doc, run_http_bench, start_temp_cluster, stop_temp_cluster

    if pids and not endpoint:
        raise click.UsageError("--pid goes with --endpoint.")
    if frontends != 1 and (endpoint or data_dir):
        raise click.UsageError("--frontends is for the cluster bench http starts, not with --endpoint or --data-dir.")
    temp = None
    if endpoint:
        if data_dir:
            raise click.UsageError("--endpoint and --data-dir exclude each other.")
        try:
            doc = external_doc(endpoint, list(pids))
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    elif data_dir:
        doc = _cluster(data_dir)
    else:
        temp, doc = start_temp_cluster(frontends=frontends)
    try:
        click.echo(f"REST endpoint {doc['http']}")
        res = run_http_bench(doc, count, batches, big=big, procs=procs, entities=entities, max_pages=max_pages,
                             hold_balancer=temp is not None, echo=click.echo)
    finally:
        if temp:
            stop_temp_cluster(temp)
    if as_json:
        click.echo(json.dumps(res, indent=2))
