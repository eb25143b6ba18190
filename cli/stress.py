"""``rangetable stress``: the partition stress test from Azure's scalability guide.

Loads ONE partition with a GET/PUT mix through the native protocol, keeping a window of requests in
flight on one socket (pipelining, so the client is not the bottleneck), and reports GET and PUT
throughput against Azure's target of 2000 entities/s per partition, ``ServerBusy`` answers and
latency percentiles.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from typing import Any

import click
import zmq

from cli.admin import call
from cli.main import data_dir_option, main
from rangetable import protocol
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
    rnd = random.Random(seed)
    try:
        call(native, {"op": "create_table", "table": table})
    except TableError as exc:
        if exc.error_code != "TableAlreadyExists":
            raise
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(native)
    ids = itertools.count(1)
    inflight: dict[bytes, tuple[str, float]] = {}
    counts = {"get": 0, "put": 0, "busy": 0, "errors": 0, "not_found": 0}
    lat: dict[str, list[float]] = {"get": [], "put": []}

    def send() -> None:
        rk = f"r{rnd.randrange(rows):06d}"
        kind = "get" if rnd.random() < get_share else "put"
        if kind == "get":
            body = {"op": "get", "table": table, "pk": partition, "rk": rk}
        else:
            body = {"op": "write", "table": table, "write": {
                "op": "insert_or_replace", "pk": partition, "rk": rk,
                "props": {"n": [1, rnd.randrange(1 << 30)], "pad": [0, "x" * 100]}, "if_match": None}}
        rid = b"%d" % next(ids)
        inflight[rid] = (kind, time.perf_counter())
        sock.send_multipart([rid, protocol.pack(body)])

    try:
        t0 = time.monotonic()
        end = t0 + duration
        while len(inflight) < window:
            send()
        while inflight:
            if not sock.poll(5000):
                break
            rid, body = sock.recv_multipart()
            kind, sent = inflight.pop(rid)
            err = protocol.unpack(body).get("error")
            if err is None:
                counts[kind] += 1
                lat[kind].append(time.perf_counter() - sent)
            elif err["code"] == "ServerBusy":
                counts["busy"] += 1
            elif err["code"] == "ResourceNotFound":
                counts["not_found"] += 1
                counts[kind] += 1
                lat[kind].append(time.perf_counter() - sent)
            else:
                counts["errors"] += 1
            if time.monotonic() < end:
                send()
        elapsed = time.monotonic() - t0
    finally:
        sock.close(0)

    def pct(xs: list[float], p: float) -> float:
        xs = sorted(xs)
        return round(xs[min(len(xs) - 1, int(p * len(xs)))] * 1000, 2) if xs else 0.0

    total = counts["get"] + counts["put"]
    return {
        "table": table, "partition": partition, "duration_s": round(elapsed, 2), "window": window,
        "get_per_s": round(counts["get"] / elapsed, 1), "put_per_s": round(counts["put"] / elapsed, 1),
        "entities_per_s": round(total / elapsed, 1), "azure_target_per_s": AZURE_PARTITION_TARGET,
        "vs_target": round(total / elapsed / AZURE_PARTITION_TARGET, 2),
        "busy": counts["busy"], "busy_per_s": round(counts["busy"] / elapsed, 1), "errors": counts["errors"],
        "latency_ms": {k: {"p50": pct(v, 0.5), "p99": pct(v, 0.99), "max": pct(v, 1.0)} for k, v in lat.items()},
    }


@main.command("stress")
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
    from cli.commands import _native

    r = run_stress(_native(data_dir, endpoint), table, partition, get_share=parse_mix(mix), duration=duration,
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
