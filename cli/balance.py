"""Balancer controls (``rangetable balancer``) and the live ``top`` view of per-server load."""

from __future__ import annotations

import json
import time

import click

from cli.coordinator_client import call
from cli.options import coordinator_endpoint, coordinator_option, data_dir_option


@click.command("balancer")
@click.argument("action", type=click.Choice(["status", "on", "off", "dry-run", "set"]), default="status")
@click.argument("key", required=False)
@click.argument("value", required=False)
@data_dir_option
@coordinator_option
@click.option("--json", "as_json", is_flag=True)
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


def render_top(status: dict) -> str:
    """One frame of ``rangetable top``."""
    lines = [f"map version {status['version']}   {time.strftime('%H:%M:%S')}", "",
             f"{'server':10} {'alive':5} {'ranges':>6} {'load/s':>9} {'queued':>6}"]
    loads = server_loads(status)
    for s in status["servers"]:
        lines.append(f"{s['id']:10} {'yes' if s['alive'] else 'NO':5} {s['ranges']:>6} {loads.get(s['id'], 0):>9.1f} "
                     f"{s.get('pending', 0):>6}")
    per_range: dict[str, dict] = {}
    for s in status["servers"]:
        per_range.update(s.get("load", {}))
    lines += ["", f"{'range':8} {'table':14} {'low':>10} {'owner':6} {'reads/s':>8} {'writes/s':>8} {'busy/s':>7} "
                  f"{'p99ms':>6} {'KiB/s':>7} {'entities':>9}"]
    rows = sorted(status["ranges"], key=lambda r: -_score(per_range.get(r["id"], {})))
    for r in rows[:30]:
        ld = per_range.get(r["id"], {})
        lines.append(f"{r['id']:8} {r['table'][:14]:14} {repr(r['low'])[:10]:>10} {str(r['owner'])[:6]:6} "
                     f"{ld.get('reads_s', 0):>8.1f} {ld.get('writes_s', 0):>8.1f} {ld.get('busy_s', 0):>7.1f} "
                     f"{ld.get('lat_p99_ms', 0):>6.1f} {ld.get('bytes_s', 0) / 1024:>7.1f} {ld.get('entities', 0):>9}")
    return "\n".join(lines)


@click.command("top")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--interval", default=1.0, show_default=True)
@data_dir_option
@coordinator_option
def top_cmd(once: bool, interval: float, data_dir: str, coordinator: str | None) -> None:
    """A live per-server and per-range load view (Ctrl-C to quit)."""
    ep = coordinator_endpoint(data_dir, coordinator)
    while True:
        frame = render_top(call(ep, {"op": "status"}))
        if once:
            click.echo(frame)
            return
        click.clear()
        click.echo(frame)
        time.sleep(interval)
