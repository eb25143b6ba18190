"""Prometheus metrics: the pure helpers, and a real cluster whose every process serves /metrics with
counts equal to the traffic sent, in agreement with the coordinator's status (what `top` shows)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from azure.data.tables import TableServiceClient as AzureService

from cli.commands.observe import scrape, total
from cli.coordinator_client import call, range_loads
from rangetable.errors import TableError
from tests.cluster import ROOT, ClusterFactory


def test_every_process_counts_the_traffic(tmp_path, cluster_factory: ClusterFactory) -> None:
    with cluster_factory(data_dir=tmp_path) as c:
        doc = c.refresh()
        assert len(doc["metrics"]) == 1 + 3 + 1 + 1 + 1  # coordinator, partition servers, frontends, dashboard
        call(c.native, {"op": "create_table", "table": "Metered"})
        for i in range(30):
            call(c.native, {"op": "write", "table": "Metered", "write": {
                "op": "insert_or_replace", "pk": f"p{i % 3}", "rk": f"r{i}", "props": {}, "if_match": None}})
        for i in range(12):
            call(c.native, {"op": "get", "table": "Metered", "pk": f"p{i % 3}", "rk": f"r{i}"})
        with pytest.raises(TableError):
            call(c.native, {"op": "get", "table": "Metered", "pk": "p0", "rk": "missing"})
        table = AzureService.from_connection_string(c.connection_string).get_table_client("Metered")
        table.upsert_entity({"PartitionKey": "p0", "RowKey": "rest", "n": 1})
        assert table.get_entity("p0", "rest")["n"] == 1

        urls = {p["id"]: p["metrics"] for p in doc["processes"]}

        def served() -> bool:  # folded in at the partition servers' next load report (0.5 s), which may
            ps = [s for sid in ("ps-1", "ps-2", "ps-3") for s in scrape(urls[sid])]  # fall between two requests
            return (total(ps, "rangetable_range_writes_total", table="Metered") == 31
                    and total(ps, "rangetable_range_reads_total", table="Metered") >= 14)

        c.wait(served, what="the writes and reads in the partition servers' metrics")
        ps = [s for sid in ("ps-1", "ps-2", "ps-3") for s in scrape(urls[sid])]
        assert total(ps, "rangetable_range_reads_total", table="Metered") == 14  # 12 + a miss + the REST read
        assert total(ps, "rangetable_range_entities_accessed_total", table="Metered") == 31 + 13
        assert total(ps, "rangetable_range_request_seconds_count", table="Metered") == 31 + 13  # the miss is not timed
        assert total(ps, "rangetable_server_lease") == 3
        # RocksDB's own statistics, shared by every store of a process: the 31 writes and their replicas
        # (3 copies; each write also puts meta keys), the gets' seeks; tombstones held (none deleted yet)
        assert total(ps, "rangetable_server_rocksdb_events_total", event="keys_written") >= 3 * 31
        assert total(ps, "rangetable_server_rocksdb_events_total", event="seeks") > 0
        assert total(ps, "rangetable_server_rocksdb_tombstones") >= 0
        fe = scrape(urls["fe-1"])
        assert total(fe, "rangetable_frontend_requests_total", op="write", status="ok") == 30
        assert total(fe, "rangetable_frontend_requests_total", op="get", status="ok") == 12
        assert total(fe, "rangetable_frontend_requests_total", op="get", status="ResourceNotFound") == 1
        http = scrape(urls["http-1"])
        assert total(http, "rangetable_http_requests_total", method="GET", status="200") >= 1
        assert total(http, "rangetable_http_requests_total", method="PATCH", status="204") == 1

        # The coordinator's metrics and its status (what `rangetable status`, `ranges` and `top` print) agree.
        st = c.status()
        co = scrape(urls["coordinator"])
        assert total(co, "rangetable_map_version") == st["version"]
        assert total(co, "rangetable_server_alive") == sum(s["alive"] for s in st["servers"]) == 3
        assert total(co, "rangetable_table_ranges", table="Metered") == len(
            [r for r in st["ranges"] if r["table"] == "Metered"])
        loads = range_loads(st)  # each range's primary's report
        entities = [(lab["range"], v) for n, lab, v in ps if n == "rangetable_range_entities" and lab["table"] == "Metered"]
        assert entities
        for rid, value in entities:
            assert loads[rid]["entities"] == value, (rid, loads[rid], value)

        out = subprocess.run([sys.executable, "-m", "cli.main", "metrics", "rangetable_range_writes_total",
                              "--data-dir", str(tmp_path), "--json"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert set(got) == set(urls)
        assert sum(s["value"] for p in got.values() for s in p["samples"] if s["labels"]["table"] == "Metered") == 31
