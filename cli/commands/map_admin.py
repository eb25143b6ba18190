"""Admin commands on the partition map: ranges, servers, status, events, and manual split, move and merge."""

from __future__ import annotations

import json
import time

import click

from cli.coordinator_client import call, human_size, range_loads
from cli.options import (
    cluster_doc,
    coordinator_endpoint,
    coordinator_option,
    data_dir_option,
    emit,
    json_option,
)
from rangetable.index_def import is_index_table

# --- admin ---------------------------------------------------------------------------------------

def _fmt_key(k: str | None, unbounded: str) -> str:
    return unbounded if k is None else (repr(k) if k else "''")


@click.command("ranges")
@click.argument("table", required=False)
@data_dir_option
@coordinator_option
@json_option
def ranges_cmd(table: str | None, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Show the partition map: every range with its bounds, primary, epoch, load, entity data and change-feed size
    (bytes each replica holds)."""
    st = call(coordinator_endpoint(data_dir, coordinator), {"op": "status"})
    load = range_loads(st)
    rs = [r for r in st["ranges"] if table is None or r["table"].lower() == table.lower()]
    if as_json:
        click.echo(json.dumps({"version": st["version"], "servers": st["servers"],
                               "ranges": [{**r, "load": load.get(r["id"], {})} for r in rs],
                               "indexes": st.get("indexes", {})}, indent=2))
        return
    n_ix = sum(1 for t in st["tables"] if is_index_table(t))
    click.echo(f"map version {st['version']}, {len(st['tables']) - n_ix} tables"
               + (f" (and {n_ix} index tables)" if n_ix else "") + f", {len(st['ranges'])} ranges")
    click.echo(f"{'range':8} {'table':14} {'low':>12} {'high':>12} {'primary':8} {'epoch':>5} {'state':9} "
               f"{'entities':>9} {'size':>9} {'feed':>9} {'req/s':>8} {'copies':>6}")
    for r in rs:
        ld = load.get(r["id"], {})
        rps = ld.get("reads_s", 0) + ld.get("writes_s", 0)
        click.echo(f"{r['id']:8} {r['table'][:14]:14} {_fmt_key(r['low'], ''):>12} {_fmt_key(r['high'], '∞'):>12} "
                   f"{str(r['primary']):8} {r['epoch']:>5} {r['state']:9} {ld.get('entities', 0):>9} "
                   f"{human_size(ld.get('bytes', 0)):>9} {human_size(ld.get('feed_bytes', 0)):>9} {rps:>8.1f} "
                   f"{_copies(r):>6}")
    click.echo("")
    _print_servers(st["servers"])


def _copies(r: dict) -> str:
    """A replicated range's in-sync/total replicas, ``*`` when some replica is not in sync (lagging or being
    rebuilt), as the coordinator judged its health; empty for a single copy."""
    h = r.get("health")
    if not h:
        return ""
    return h["copies"] + ("*" if h["out_of_sync"] else "")


def _held(s: dict) -> str:
    """What a server holds, as the coordinator's status decided it (``holds``, :mod:`coordinator.map.holdings`):
    ``primary of N (entities, size), follower of M (entities, size)``; ``ranges N`` when the answer has no
    ``holds`` (``rangetable servers``)."""
    holds = s.get("holds")
    if not holds:
        return f"ranges {s['ranges']}"
    return ", ".join(f"{role} of {h['ranges']} ({h['entities']} entities, {human_size(h['bytes'])})"
                     for role, h in holds.items())


def _print_servers(servers: list[dict]) -> None:
    for s in servers:
        state = "alive" if s["alive"] else "DEAD"
        zone = f"zone {s['zone']:6} " if s.get("zone") else ""
        click.echo(f"server {s['id']:8} {state:5} {s['endpoint']:24} pid {s['pid']:<7} {zone}{_held(s)}")
        for rid, p in sorted((s.get("rebuilding") or {}).items()):
            click.echo(f"  rebuilding {rid} from {p['primary']}: {human_size(p['bytes'])} of "
                       f"{human_size(p['total'])} at {p['mb_s']} MB/s")


@click.command("servers")
@data_dir_option
@coordinator_option
@json_option
def servers_cmd(data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """List partition servers: alive or dead, endpoint, pid, ranges."""
    st = call(coordinator_endpoint(data_dir, coordinator), {"op": "servers"})
    if as_json:
        click.echo(json.dumps(st["servers"], indent=2))
    else:
        _print_servers(st["servers"])


@click.command("status")
@data_dir_option
@json_option
def status_cmd(data_dir: str, as_json: bool) -> None:
    """The cluster at a glance: processes, endpoints, map version, tables, ranges, servers."""
    from cli.cluster_file import pid_alive

    doc = cluster_doc(data_dir)
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
    short = [r["id"] for r in st["ranges"] if r.get("health") and r["health"]["out_of_sync"]]
    if short:
        click.echo(f"{len(short)} ranges with replicas not in sync: {', '.join(short[:10])}"
                   + (" …" if len(short) > 10 else ""))
    moving = [f"{r['id']} {r['move']['source']}->{r['move']['target']}" for r in st["ranges"] if r.get("move")]
    if moving:
        click.echo(f"{len(moving)} replica moves under way: {', '.join(moving[:10])}" + (" …" if len(moving) > 10 else ""))
    _print_servers(st["servers"])


@click.command("events")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events.")
@click.option("--limit", default=50, show_default=True)
@data_dir_option
@coordinator_option
@json_option
def events_cmd(follow: bool, limit: int, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Show splits, merges, moves, failovers and warnings, with durations and offline times."""
    ep = coordinator_endpoint(data_dir, coordinator)
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


@click.command("split")
@click.argument("range_id")
@click.option("--at", "key", default=None, help="PartitionKey to split at (default: the data median).")
@data_dir_option
@coordinator_option
@json_option
def split_cmd(range_id: str, key: str | None, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Split a range at a PartitionKey (default: the data median)."""
    res = call(coordinator_endpoint(data_dir, coordinator), {"op": "split", "range": range_id, "key": key}, timeout=60)
    emit(res, as_json, f"split {range_id} at {res['key']!r} into {res['left']} and {res['right']}, "
                        f"offline {res['offline_ms']} ms")


@click.command("move")
@click.argument("range_id")
@click.option("--to", "server", required=True, help="Target partition server id.")
@data_dir_option
@coordinator_option
@json_option
def move_cmd(range_id: str, server: str, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Move a range to another partition server."""
    res = call(coordinator_endpoint(data_dir, coordinator), {"op": "move", "range": range_id, "server": server}, timeout=60)
    what = (f"moved {range_id}'s primary to {server} (a leadership transfer to an in-sync replica: no data copied)"
            if res.get("transfer") else f"moved {range_id} to {server}")
    emit(res, as_json, f"{what}, offline {res['offline_ms']} ms")


@click.command("merge")
@click.argument("range_id")
@data_dir_option
@coordinator_option
@json_option
def merge_cmd(range_id: str, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Merge a range with its right-hand neighbour."""
    res = call(coordinator_endpoint(data_dir, coordinator), {"op": "merge", "range": range_id}, timeout=60)
    emit(res, as_json, f"merged {res['left']} and {res['right']} into {res['range']}, "
                        f"offline {res['offline_ms']} ms")
