"""Balancer controls, the live ``top`` view and ``drill rebalance``."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from cli.admin import call
from cli.commands import _coordinator, _native, coordinator_option
from cli.loadgen import LoadGen
from cli.main import data_dir_option, drill_group, main
from rangetable.errors import TableError
from rangetable.stats import percentile


@main.command("balancer")
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
    res = call(_coordinator(data_dir, coordinator), {"op": "balancer", "action": action, "key": key, "value": value})
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


@main.command("top")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--interval", default=1.0, show_default=True)
@data_dir_option
@coordinator_option
def top_cmd(once: bool, interval: float, data_dir: str, coordinator: str | None) -> None:
    """A live per-server and per-range load view (Ctrl-C to quit)."""
    ep = _coordinator(data_dir, coordinator)
    while True:
        frame = render_top(call(ep, {"op": "status"}))
        if once:
            click.echo(frame)
            return
        click.clear()
        click.echo(frame)
        time.sleep(interval)


def run_rebalance_drill(data_dir: str, *, duration: float = 30.0, echo: Any = None) -> dict[str, Any]:
    """Skewed load (a hot key range and an append-only writer) and how the balancer reacted."""
    say = echo or (lambda _m: None)
    coord, native = _coordinator(data_dir, None), _native(data_dir, None)
    stamp = int(time.time()) % 10**6
    hot_t, log_t = f"rebalhot{stamp}", f"rebalseq{stamp}"
    for t in (hot_t, log_t):
        call(native, {"op": "create_table", "table": t})
    since = max([e["seq"] for e in call(coord, {"op": "events", "limit": 1})] or [0])
    before = server_loads(call(coord, {"op": "status"}))
    hot = LoadGen(native, hot_t, lambda rnd, _n: (f"user{rnd.randrange(40):03d}", f"r{rnd.randrange(500)}"),
                  window=48, duration=duration, get_share=0.5, seed=1)
    seq = LoadGen(native, log_t, lambda _rnd, n: (f"{n:012d}", "0"), window=16, duration=duration, get_share=0.0,
                  seed=2)
    say(f"hot key range on table {hot_t} (40 PartitionKeys), append-only writer on {log_t}, {duration:.0f} s")
    t0 = time.time()
    hot.start()
    seq.start()
    time.sleep(min(3.0, duration / 3))
    during = server_loads(call(coord, {"op": "status"}))
    hot.join()
    seq.join()
    after = server_loads(call(coord, {"op": "status"}))
    events = [e for e in call(coord, {"op": "events", "since": since, "limit": 1000})
              if e.get("table") in (hot_t, log_t) or e["kind"] in ("hot_key", "append_hotspot")]
    timeline = [{"t": round(e["time"] - t0, 2), "kind": e["kind"], "range": e.get("range"),
                 "offline_ms": e.get("offline_ms"), "key": e.get("key"), "target": e.get("target"),
                 "reason": e.get("reason")} for e in events]
    offline = [e["offline_ms"] for e in timeline if e["offline_ms"] is not None]
    first_split = next((e["t"] for e in timeline if e["kind"] == "split"), None)
    first_move = next((e["t"] for e in timeline if e["kind"] == "move"), None)
    errs = {**hot.result.errors}
    for k, v in seq.result.errors.items():
        errs[k] = errs.get(k, 0) + v
    return {
        "duration_s": duration, "timeline": timeline, "first_split_s": first_split, "first_move_s": first_move,
        "offline_ms": {"count": len(offline), "max": max(offline, default=None), "p99": percentile(offline, 0.99)},
        "load_before": before, "load_during": during, "load_after": after,
        "hot_ops": hot.result.gets + hot.result.puts, "append_ops": seq.result.puts,
        "client_errors": errs, "client_busy": hot.result.busy + seq.result.busy,
    }


@drill_group.command("rebalance")
@click.option("--duration", default=30.0, show_default=True, help="Seconds of skewed load.")
@data_dir_option
@click.option("--json", "as_json", is_flag=True)
def drill_rebalance(duration: float, data_dir: str, as_json: bool) -> None:
    """Skewed load on a running cluster; report splits, moves, offline ms and per-server load."""
    try:
        r = run_rebalance_drill(data_dir, duration=duration, echo=None if as_json else click.echo)
    except TableError as exc:
        raise click.ClickException(f"{exc.error_code}: {exc.message}") from None
    if as_json:
        click.echo(json.dumps(r, indent=2))
        return
    click.echo("timeline:")
    for e in r["timeline"]:
        extra = f" offline {e['offline_ms']} ms" if e["offline_ms"] is not None else ""
        click.echo(f"  t={e['t']:6.2f}s {e['kind']:15} {e['range']} {e['key'] or ''} {e['target'] or ''}{extra}")
        if e["kind"] in ("hot_key", "append_hotspot"):
            click.echo(f"             {e['reason']}")
    click.echo(f"first split at {r['first_split_s']} s, first move at {r['first_move_s']} s; "
               f"offline ms: max {r['offline_ms']['max']}, p99 {r['offline_ms']['p99']} over {r['offline_ms']['count']}")
    click.echo(f"load per server (score/s): before {r['load_before']}, early {r['load_during']}, "
               f"after {r['load_after']}")
    click.echo(f"client: {r['hot_ops']} hot ops, {r['append_ops']} appends, errors {r['client_errors'] or 0}, "
               f"ServerBusy {r['client_busy']}")
