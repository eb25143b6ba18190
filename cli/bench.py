"""``rangetable bench soak`` and ``bench scale``: workloads held for minutes, and at 10M entities.

Plain click commands; :mod:`cli.commands` adds them to the ``bench`` group.
"""

from __future__ import annotations

import json
import sys

import click

from cli.main import json_option


def _cluster_doc(data_dir: str) -> dict:
    from cli.commands import _cluster

    return _cluster(data_dir)


@click.command("soak")
@click.option("--minutes", default=10.0, show_default=True, help="How long to run.")
@click.option("--threads", default=6, show_default=True, help="Client threads, one client each.")
@click.option("--mix", type=click.Choice(["mixed", "hot-partition"]), default="mixed", show_default=True,
              help="mixed: inserts, upserts, merges, gets, deletes, batches, queries, scan pages; "
                   "hot-partition: upserts of new RowKeys into one PartitionKey.")
@click.option("--interval", default=60.0, show_default=True, help="Seconds per row of the table.")
@click.option("--http", "use_http", is_flag=True, help="Through the Azure SDK over REST instead of the native client.")
@click.option("--data-dir", default=None, help="Use the running cluster of this data dir (default: start one).")
@json_option
def bench_soak(minutes: float, threads: int, mix: str, interval: float, use_http: bool, data_dir: str | None,
               as_json: bool) -> None:
    """A workload held for minutes: ops/s, latency, RSS of every process, bytes on disk and RocksDB's
    pending compaction per interval, then a verdict (exit 1 on FAIL): the last interval holds 90% of
    the first one's ops/s and RSS grew at most 10% after warm-up."""
    from rangetable.bench_http import start_temp_cluster, stop_temp_cluster
    from rangetable.bench_soak import run_soak

    if minutes <= 0 or interval <= 0 or threads < 1:
        raise click.UsageError("--minutes and --interval must be positive, --threads at least 1.")
    temp = None
    if data_dir:
        doc = _cluster_doc(data_dir)
    else:
        temp, doc = start_temp_cluster()
    try:
        res = run_soak(doc, data_dir or temp, minutes=minutes, threads=threads, mix=mix, interval=interval,
                       http=use_http, echo=(lambda s: None) if as_json else click.echo)
    finally:
        if temp:
            stop_temp_cluster(temp)
    if as_json:
        click.echo(json.dumps(res, indent=2))
    if not res["verdict"]["ok"]:
        sys.exit(1)
