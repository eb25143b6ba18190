"""``rangetable stress``: the partition stress test from Azure's scalability guide.

Loads ONE partition with a GET/PUT mix through the native protocol, keeping a window of requests in
flight on one socket (pipelining, so the client is not the bottleneck), and reports GET and PUT
throughput against Azure's target of 2000 entities/s per partition, ``ServerBusy`` answers and
latency percentiles.
"""

from __future__ import annotations

import json
from typing import Any

import click

from cli.coordinator_client import call
from cli.options import data_dir_option, native_endpoint
from cli.workload.loadgen import LoadGen
from rangetable.errors import TableError

AZURE_PARTITION_TARGET = 2000


def parse_mix(mix: str) -> float:
    """``"get:put"`` weights (e.g. ``"3:1"``) as the fraction of GETs."""
    try:
        g, p = (float(x) for x in mix.split(":"))
    except ValueError:
        raise click.BadParameter("use GET:PUT weights such as 1:1 or 9:1") from None
    if g < 0 or p < 0 or g + p == 0:
        raise click.BadParameter("weights must be non-negative and not both zero")
    return g / (g + p)


def run_stress(native: str, table: str, partition: str, *, get_share: float = 0.5, duration: float = 10.0,
               window: int = 64, rows: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Drive one partition for ``duration`` seconds; returns throughput, busy answers and latency."""
    try:
        call(native, {"op": "create_table", "table": table})
    except TableError as exc:
        if exc.error_code != "TableAlreadyExists":
            raise
    gen = LoadGen(native, table, lambda rnd, _n: (partition, f"r{rnd.randrange(rows):06d}"), get_share=get_share,
                  window=window, duration=duration, seed=seed)
    gen.run()
    r = gen.result
    elapsed = max(r.elapsed, 1e-9)
    total = r.gets + r.puts
    return {
        "table": table, "partition": partition, "duration_s": round(elapsed, 2), "window": window,
        "get_per_s": round(r.gets / elapsed, 1), "put_per_s": round(r.puts / elapsed, 1),
        "entities_per_s": round(total / elapsed, 1), "azure_target_per_s": AZURE_PARTITION_TARGET,
        "vs_target": round(total / elapsed / AZURE_PARTITION_TARGET, 2),
        "busy": r.busy, "busy_per_s": round(r.busy / elapsed, 1), "errors": r.error_count,
        "latency_ms": {k: {"p50": r.pct(k, 0.5), "p99": r.pct(k, 0.99), "max": r.pct(k, 1.0)} for k in ("get", "put")},
    }


@click.command("stress")
@click.argument("table")
@click.option("--partition", required=True, help="The PartitionKey to load.")
@click.option("--mix", default="1:1", show_default=True, help="GET:PUT weights.")
@click.option("--duration", default=10.0, show_default=True, help="Seconds.")
@click.option("--window", default=64, show_default=True, help="Requests in flight.")
@data_dir_option
@click.option("--endpoint", default=None, help="Native endpoint (default: from cluster.json).")
@click.option("--json", "as_json", is_flag=True)
def stress_cmd(table: str, partition: str, mix: str, duration: float, window: int, data_dir: str,
               endpoint: str | None, as_json: bool) -> None:
    """Load one partition and report GET/PUT throughput against Azure's 2000 entities/s target."""
    r = run_stress(native_endpoint(data_dir, endpoint), table, partition, get_share=parse_mix(mix), duration=duration,
                   window=window)
    if as_json:
        click.echo(json.dumps(r, indent=2))
        return
    lat = r["latency_ms"]
    click.echo(f"partition {partition!r} of {table}, {r['duration_s']} s, {window} requests in flight")
    click.echo(f"  GET  {r['get_per_s']:>9.1f}/s   p50 {lat['get']['p50']} ms  p99 {lat['get']['p99']} ms")
    click.echo(f"  PUT  {r['put_per_s']:>9.1f}/s   p50 {lat['put']['p50']} ms  p99 {lat['put']['p99']} ms")
    click.echo(f"  total {r['entities_per_s']:.1f} entities/s = {r['vs_target']}× Azure's {AZURE_PARTITION_TARGET}/s "
               f"partition target; ServerBusy {r['busy']} ({r['busy_per_s']}/s), other errors {r['errors']}")
