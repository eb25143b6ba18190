"""``rangetable bench point-or``: an ``or`` of 200 point keys against tables of growing size.

The query is the one Orleans' grain directory sends to Azure: ``(PartitionKey eq 'a' and RowKey eq 'b')
or …`` over 200 (PartitionKey, RowKey) pairs spread over the whole table. The planner turns it into
point spans (one scan request per range), so its cost should not grow with the table; a full scan
of the same table, measured next to it, does.

For each size the table is grown through the native bulk path to that many entities (~200 bytes each,
100 per partition), the cluster is left to settle (splits, compactions), the balancer is held off, and
then, through REST (the unchanged ``azure-data-tables`` SDK) and through the native client: the
``or`` query from ``procs`` client processes (queries/s, server CPU per query) and one full scan
(seconds, server CPU). Server CPU is the user+system CPU of the HTTP frontends and partition servers
(the native path has no HTTP frontend in it: its CPU is the native frontend's and the partition
servers').
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from cli.bench.http import Phase, server_pids, wait_quiet
from rangetable.client.bulk import bulk_upsert
from rangetable.edm import INT32, STRING

POINT_KEYS = 200
Echo = Callable[[str], None]

_clients: dict[str, Any] = {}  # per worker process: "rest" and "native" table clients


def key_of(i: int) -> tuple[str, str]:
    """The (PartitionKey, RowKey) of the ``i``-th loaded entity: partitions of 100."""
    return f"p{i // 100:07d}", f"r{i % 100:03d}"


def point_or_filter(keys: list[int]) -> str:
    """The Orleans-style ``or`` of the point keys of these entities."""
    return " or ".join("(PartitionKey eq '{}' and RowKey eq '{}')".format(*key_of(i)) for i in keys)


def query_keys(size: int, q: int) -> list[int]:
    """Query ``q``'s :data:`POINT_KEYS` distinct entities, drawn from the whole table of ``size``."""
    return sorted(random.Random(q).sample(range(size), min(POINT_KEYS, size)))


def _rows(lo: int, hi: int) -> Iterator[tuple[str, str, dict]]:
    for i in range(lo, hi):  # 120 hex characters that differ per entity: data that does not compress away
        pad = hashlib.blake2b(i.to_bytes(8, "big"), digest_size=60).hexdigest()
        yield (*key_of(i), {"n": [INT32, i], "s": [STRING, pad]})


def _init_worker(conn: str, native: str, table: str) -> None:
    from azure.data.tables import TableClient as RestClient

    from rangetable.client import TableClient

    _clients["rest"] = RestClient.from_connection_string(conn, table)
    _clients["native"] = TableClient(native, table)


def _queries(args: tuple[str, int, int, int, int]) -> int:
    """Run queries ``k, k + step, …`` below ``n`` through one client kind; the entities they returned."""
    kind, size, k, n, step = args
    client = _clients[kind]
    return sum(sum(1 for _ in client.query_entities(point_or_filter(query_keys(size, q)))) for q in range(k, n, step))


def _full_scan(client: Any) -> int:
    return sum(1 for _ in client.list_entities(results_per_page=1000))


def run_point_or_bench(doc: dict, sizes: list[int], queries: int = 200, procs: int = 2,
                       echo: Echo = print) -> dict[str, Any]:
    """Grow one table through ``sizes`` and measure the ``or`` query and a full scan at each (see the
    module docstring); returns ``{size: {"rest"|"native": {...}}}`` and prints a row per size and path."""
    from azure.data.tables import TableClient as RestClient

    from cli.bench.pools import fork_pool
    from cli.coordinator_client import call
    from rangetable.client import TableClient

    pids = server_pids(doc, ("http-frontend", "partition-server", "frontend"))
    fe_pids = server_pids(doc, ("http-frontend", "frontend"))
    table = f"pointor{int(time.time()) % 10**6}"
    native = TableClient(doc["native"], table)
    native.create_table()
    rest = RestClient.from_connection_string(doc["connection_string"], table)
    pool = fork_pool(procs, _init_worker, (doc["connection_string"], doc["native"], table))
    results: dict[str, Any] = {}
    loaded = 0
    echo(f"{'entities':>10} {'path':<7} {'or q/s':>8} {'or CPU ms/q':>12} {'(PS ms/q)':>10} {'scan s':>8} "
         f"{'scan CPU ms':>12} {'(PS ms)':>9}")
    try:
        for size in sizes:
            call(doc["coordinator"], {"op": "balancer", "action": "on"})
            t0 = time.monotonic()
            bulk_upsert(doc["native"], table, _rows(loaded, size), typed=True)
            load_s, loaded = time.monotonic() - t0, size
            echo(f"{'':>10} loaded to {size:,} in {load_s:.1f} s")
            wait_quiet(doc, echo)
            call(doc["coordinator"], {"op": "balancer", "action": "off"})
            row: dict[str, Any] = {}
            for kind, client in (("rest", rest), ("native", native)):
                with Phase(kind, pids, fe_pids) as q:
                    seen = sum(pool.map(_queries, [(kind, size, k, queries, procs) for k in range(procs)]))
                assert seen == queries * min(POINT_KEYS, size), (kind, seen)
                with Phase(kind, pids, fe_pids) as s:
                    rows = _full_scan(client)
                assert rows == size, (kind, rows)
                row[kind] = r = {"or_queries_s": round(queries / q.wall, 1), "or_cpu_ms": round(q.cpu / queries * 1000, 2),
                                 "or_ps_ms": round((q.cpu - q.fe_cpu) / queries * 1000, 2), "scan_s": round(s.wall, 2),
                                 "scan_cpu_ms": round(s.cpu * 1000, 1), "scan_ps_ms": round((s.cpu - s.fe_cpu) * 1000, 1)}
                echo(f"{size:>10,} {kind:<7} {r['or_queries_s']:>8.1f} {r['or_cpu_ms']:>12.2f} {r['or_ps_ms']:>10.2f} "
                     f"{r['scan_s']:>8.2f} {r['scan_cpu_ms']:>12.1f} {r['scan_ps_ms']:>9.1f}")
            results[str(size)] = row
    finally:
        pool.terminate()
        pool.join()
        try:
            call(doc["coordinator"], {"op": "balancer", "action": "on"})
            native.delete_table()
        finally:
            native.close()
            rest.close()
    return results
