"""Balancer controls (``rangetable balancer``) and the live ``top`` view of per-server load."""

from __future__ import annotations

import json
import time

import click

from cli.coordinator_client import call, range_loads
from cli.options import coordinator_endpoint, coordinator_option, data_dir_option, json_option


@click.command("balancer")
@click.argument("action", type=click.Choice(["status", "on", "off", "dry-run", "set"]), default="status")
@click.argument("key", required=False)
@click.argument("value", required=False)
@data_dir_option
@coordinator_option
@json_option
def balancer_cmd(action: str, key: str | None, value: str | None, data_dir: str, coordinator: str | None,
                 as_json: bool) -> None:
    """Show or change the balancer: status, on, off, dry-run, or `set KEY VALUE` (e.g. `set hot-rps 800`)."""
    if action == "set" and (key is None or value is None):
        raise click.UsageError("balancer set needs KEY and VALUE")
    res = call(coordinator_endpoint(data_dir, coordinator), {"op": "balancer", "action": action, "key": key, "value": value})
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    s = res["settings"]
    state = "off" if not s["enabled"] else ("dry-run (logs actions only)" if s["dry_run"] else "on")
    click.echo(f"balancer {state}; moves in flight {res['in_flight']}")
    for k, v in s.items():
        if k not in ("enabled", "dry_run"):
            click.echo(f"  {k.replace('_', '-'):22} {v}")


def _score(ld: dict) -> float:
    return ld.get("reads_s", 0) + ld.get("writes_s", 0) + ld.get("busy_s", 0) + ld.get("entities_s", 0) / 100


def server_loads(status: dict) -> dict[str, float]:
    """Load score per live server from the last heartbeats."""
    return {s["id"]: round(sum(_score(ld) for ld in s.get("load", {}).values()), 1)
            for s in status["servers"] if s["alive"]}


def top_frame(status: dict, limit: int = 30) -> dict:
    """What one frame of ``rangetable top`` shows: each server's range count and load, and the busiest
    ranges (their primaries' reports), busiest first."""
    loads = server_loads(status)
    per_range = range_loads(status)
    servers = [{"id": s["id"], "alive": s["alive"], "ranges": s["ranges"], "load_s": loads.get(s["id"], 0.0),
                "queued": s.get("pending", 0)} for s in status["servers"]]
    ranges = []
    for r in sorted(status["ranges"], key=lambda r: -_score(per_range.get(r["id"], {})))[:limit]:
        ld = per_range.get(r["id"], {})
        ranges.append({"id": r["id"], "table": r["table"], "low": r["low"], "primary": r["primary"],
                       **{k: ld.get(k, 0) for k in ("reads_s", "writes_s", "busy_s", "lat_p99_ms", "bytes_s",
                                                    "entities")}})
    return {"version": status["version"], "time": time.strftime("%H:%M:%S"), "servers": servers, "ranges": ranges}


def render_top(frame: dict) -> str:
    """One frame of ``rangetable top`` as text."""
    lines = [f"map version {frame['version']}   {frame['time']}", "",
             f"{'server':10} {'alive':5} {'ranges':>6} {'load/s':>9} {'queued':>6}"]
    for s in frame["servers"]:
        lines.append(f"{s['id']:10} {'yes' if s['alive'] else 'NO':5} {s['ranges']:>6} {s['load_s']:>9.1f} "
                     f"{s['queued']:>6}")
    lines += ["", f"{'range':8} {'table':14} {'low':>10} {'primary':6} {'reads/s':>8} {'writes/s':>8} {'busy/s':>7} "
                  f"{'p99ms':>6} {'KiB/s':>7} {'entities':>9}"]
    for r in frame["ranges"]:
        lines.append(f"{r['id']:8} {r['table'][:14]:14} {repr(r['low'])[:10]:>10} {str(r['primary'])[:6]:6} "
                     f"{r['reads_s']:>8.1f} {r['writes_s']:>8.1f} {r['busy_s']:>7.1f} "
                     f"{r['lat_p99_ms']:>6.1f} {r['bytes_s'] / 1024:>7.1f} {r['entities']:>9}")
    return "\n".join(lines)


@click.command("top")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--interval", default=1.0, show_default=True)
@data_dir_option
@coordinator_option
@json_option
def top_cmd(once: bool, interval: float, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """A live per-server and per-range load view (Ctrl-C to quit). With --json: one JSON object per frame, a
    line each."""
    ep = coordinator_endpoint(data_dir, coordinator)
    while True:
        frame = top_frame(call(ep, {"op": "status"}))
        if as_json:
            click.echo(json.dumps(frame))
        elif once:
            click.echo(render_top(frame))
        else:
            click.clear()
            click.echo(render_top(frame))
        if once:
            return
        time.sleep(interval)
