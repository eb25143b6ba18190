"""``rangetable bench frontends``: REST throughput with 1, 2, … HTTP frontend processes on one port.

The Azure SDK needs about 1 ms of client CPU per call, more than the server spends, so on a small
machine SDK clients saturate the cores before the frontends do. This bench drives the REST endpoint
with ``wrk`` instead (C, microseconds per request): point GETs of one entity, authorised by a table
SAS signed once (as a browser or a CDN would send them), over ``connections`` keep-alive connections
that the kernel spreads across the frontends sharing the port (SO_REUSEPORT). For each frontend count
it starts a cluster, warms up, runs ``seconds`` and reports requests/s, wrk's latency percentiles and
the server CPU per request (HTTP frontends + partition servers, from ``/proc``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from cli.bench.http import server_pids, start_temp_cluster, stop_temp_cluster
from cli.bench.proc import cpu_seconds


class WrkMissing(RuntimeError):
    """wrk is not installed."""


def sas_get_url(doc: dict, table: str) -> str:
    """Create ``table`` with one entity; the URL of a GET of it, with a read SAS valid for an hour."""
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.data.tables import TableSasPermissions, TableServiceClient, generate_table_sas

    from cli.bench.http import _fields

    fields = _fields(doc["connection_string"])
    svc = TableServiceClient.from_connection_string(doc["connection_string"])
    svc.create_table(table).upsert_entity({"PartitionKey": "p", "RowKey": "r", "qty": 1, "note": "x" * 100})
    svc.close()
    sas = generate_table_sas(AzureNamedKeyCredential(fields["AccountName"], fields["AccountKey"]), table,
                             permission=TableSasPermissions(read=True), expiry=datetime.now(UTC) + timedelta(hours=1))
    return f"{doc['http']}/{table}(PartitionKey='p',RowKey='r')?{sas}"


def parse_wrk(text: str) -> dict[str, float]:
    """Requests/s, latency percentiles (ms) and non-2xx answers from ``wrk --latency`` output."""
    def ms(v: str, unit: str) -> float:
        return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    out: dict[str, float] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))}  # type: ignore[union-attr]
    for p, v, unit in re.findall(r"^\s+(50|90|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        out[f"p{p}_ms"] = round(ms(v, unit), 3)
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    out["non_2xx"] = float(bad.group(1)) if bad else 0.0
    out["requests"] = float(re.search(r"(\d+) requests in", text).group(1))  # type: ignore[union-attr]
    return out


def wrk(url: str, seconds: float, connections: int) -> str:
    """Run wrk against ``url`` (one thread, keep-alive, JSON accept header); its output."""
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency",
            "-H", "Accept: application/json;odata=nometadata", "-H", "x-ms-version: 2019-02-02", url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout


def run_frontends_bench(max_frontends: int = 2, seconds: float = 30.0, connections: int = 64,
                        echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Measure 1..``max_frontends`` HTTP frontends; one result per count."""
    if shutil.which("wrk") is None:
        raise WrkMissing("this bench drives the REST endpoint with wrk: install it (apt-get install wrk)")
    results = []
    echo(f"point GETs with a table SAS, {connections} connections, {seconds:g} s per run")
    for n in range(1, max_frontends + 1):
        data_dir, doc = start_temp_cluster(frontends=n)
        try:
            url = sas_get_url(doc, "frontends")
            wrk(url, 3, connections)  # warm up: connections, caches, the frontends' maps
            pids = server_pids(doc)
            fe_pids = server_pids(doc, ("http-frontend",))
            each0 = {pid: cpu_seconds([pid]) for pid in pids}
            t0 = time.perf_counter()
            r: dict[str, Any] = parse_wrk(wrk(url, seconds, connections))  # and, below, the per-core lists
            wall = time.perf_counter() - t0
            each = {pid: cpu_seconds([pid]) - each0[pid] for pid in pids}
            cpu = sum(each.values())
            r.update({"frontends": n, "cpu_ms_per_request": round(cpu / r["requests"] * 1000, 3),
                      "wall_s": round(wall, 1),
                      "frontend_core_use": [round(each[p] / wall, 2) for p in fe_pids],  # 1.0 = one core busy
                      "partition_servers_core_use": round(sum(v for p, v in each.items() if p not in fe_pids) / wall, 2)})
        finally:
            stop_temp_cluster(data_dir)
        results.append(r)
        echo(f"{n} HTTP frontend(s): {r['rps']:>9,.0f} requests/s  p50 {r.get('p50_ms')} ms  p99 {r.get('p99_ms')} ms  "
             f"server CPU {r['cpu_ms_per_request']:.3f} ms/request  non-2xx {int(r['non_2xx'])}; cores busy: "
             f"frontends {r['frontend_core_use']}, partition servers {r['partition_servers_core_use']}")
    return results
