"""``rangetable drill rebalance``: skewed load (a hot key range and an append-only writer) on a running
cluster, and how the balancer reacted: splits, moves, offline ms and per-server load.

On a replicated cluster a balancer move is a leadership transfer to an in-sync replica (no data copied); the
timeline calls it ``transfer`` and leaves out the ``promote`` event the coordinator records for it."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from cli.commands.balance import server_loads
from cli.coordinator_client import call
from cli.options import coordinator_endpoint, data_dir_option, native_endpoint
from cli.workload.loadgen import LoadGen
from rangetable.errors import TableError
from rangetable.kernel.stats import percentile


def timeline_rows(events: list[dict], t0: float) -> list[dict[str, Any]]:
    """The drill's timeline from the coordinator's events (``t0``: the start, on the events' clock): a move
    of a replicated range is named ``transfer`` (a primary handed to an in-sync replica) and its own
    ``promote`` event is dropped; a promotion not part of a transfer (a failover) stays."""
    transfers = {(e.get("range"), e.get("target"), e.get("reason")) for e in events
                 if e["kind"] == "move" and e.get("transfer")}
    rows = []
    for e in events:
        if e["kind"] == "promote" and (e.get("range"), e.get("target"), e.get("reason")) in transfers:
            continue
        kind = "transfer" if e["kind"] == "move" and e.get("transfer") else e["kind"]
        rows.append({"t": round(e["time"] - t0, 2), "kind": kind, "range": e.get("range"),
                     "offline_ms": e.get("offline_ms"), "key": e.get("key"), "target": e.get("target"),
                     "reason": e.get("reason")})
    return rows


def run_rebalance_drill(data_dir: str, *, duration: float = 30.0, echo: Any = None) -> dict[str, Any]:
    """Skewed load (a hot key range and an append-only writer) and how the balancer reacted."""
    say = echo or (lambda _m: None)
    coord, native = coordinator_endpoint(data_dir, None), native_endpoint(data_dir, None)
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
    timeline = timeline_rows(events, t0)
    offline = [e["offline_ms"] for e in timeline if e["offline_ms"] is not None]
    first_split = next((e["t"] for e in timeline if e["kind"] == "split"), None)
    first_move = next((e["t"] for e in timeline if e["kind"] in ("move", "transfer")), None)
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


@click.command("rebalance")
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
    moved = "transfer" if any(e["kind"] == "transfer" for e in r["timeline"]) else "move"
    click.echo(f"first split at {r['first_split_s']} s, first {moved} at {r['first_move_s']} s; "
               f"offline ms: max {r['offline_ms']['max']}, p99 {r['offline_ms']['p99']} over {r['offline_ms']['count']}")
    click.echo(f"load per server (score/s): before {r['load_before']}, early {r['load_during']}, "
               f"after {r['load_after']}")
    click.echo(f"client: {r['hot_ops']} hot ops, {r['append_ops']} appends, errors {r['client_errors'] or 0}, "
               f"ServerBusy {r['client_busy']}")
