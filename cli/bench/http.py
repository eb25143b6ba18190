"""``rangetable bench http``: the Azure SDK workload against a cluster's REST endpoint.

Phases (each through ``azure-data-tables``, unchanged): point insert, point get, upsert (merge),
batch of 100, a query whose ``$filter`` is an ``or`` of 200 point keys (``PartitionKey eq … and RowKey
eq …``, as Orleans' grain directory sends), PartitionKey query (one partition of ``part`` entities) at two table sizes, a paged
full scan (pages of 1000), and a GET signed with a wrong key (403 from the HTTP frontend alone: the fixed
cost of any request). For each phase it prints client-side ops/s and the **server CPU per
operation**: user+system CPU of the HTTP frontend(s) and partition servers, read from
``/proc/<pid>/stat`` before and after the phase (pids from ``cluster.json``).

Azurite 3.35 on the reference 2-core machine: 1.2 ms CPU per point op, 21 ms per 100-op batch,
4.8 ms per PartitionKey query, 34 ms per 1000-row page, with query cost growing with the table size.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cli.bench.proc import cpu_seconds

AZURITE_MS = {"insert": 1.2, "get": 1.2, "upsert": 1.2, "batch100": 21.0, "pk_query": 4.8, "pk_query_big": 4.8,
              "scan_page": 34.0}
def server_pids(doc: dict, roles: tuple[str, ...] = ("http-frontend", "partition-server")) -> list[int]:
    """Pids of the processes of a cluster.json with these roles (default: HTTP frontends and partition servers)."""
    return [p["pid"] for p in doc.get("processes", []) if p.get("role") in roles and p.get("pid")]


def _fields(connection_string: str) -> dict[str, str]:
    """The ``Name=value`` fields of a connection string, in order."""
    return dict(p.split("=", 1) for p in connection_string.split(";") if "=" in p)


def external_doc(connection_string: str, pids: list[int]) -> dict:
    """A stand-in for cluster.json describing another Table endpoint whose server runs as ``pids``.

    Raises ValueError for a connection string without a TableEndpoint or a pid that is not running.
    """
    url = _fields(connection_string).get("TableEndpoint")
    if not url:
        raise ValueError("the connection string names no TableEndpoint")
    if not pids:
        raise ValueError("give the server's process ids (--pid), or its CPU cannot be measured")
    for pid in pids:
        if not os.path.exists(f"/proc/{pid}/stat"):
            raise ValueError(f"no process {pid} is running")
    return {"http": url, "connection_string": connection_string,
            "processes": [{"role": "http-frontend", "pid": pid} for pid in pids]}


def entity(pk: str, rk: str, i: int) -> dict[str, Any]:
    """A ~300-byte entity with eight properties of mixed types."""
    return {"PartitionKey": pk, "RowKey": rk, "name": f"customer-{i:08d}",
            "city": ("Amsterdam", "Berlin", "Lisbon", "Oslo", "Prague")[i % 5],
            "note": "lorem ipsum dolor sit amet " * 3, "qty": i % 100, "price": i * 0.25 + 0.5,
            "active": i % 3 == 0, "created": datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
            "ref": uuid.UUID(int=i)}


class Phase:
    """Measures one phase: wall time, operations and server CPU (in all, and of the HTTP frontends)."""

    def __init__(self, name: str, pids: list[int], frontend_pids: list[int]) -> None:
        self.name, self.pids, self.fe_pids = name, pids, frontend_pids

    def __enter__(self) -> Phase:
        self.cpu0, self.fe0, self.t0 = cpu_seconds(self.pids), cpu_seconds(self.fe_pids), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = cpu_seconds(self.pids) - self.cpu0
        self.fe_cpu = cpu_seconds(self.fe_pids) - self.fe0


_client: Any = None
_forger: Any = None  # the same client with a wrong account key
_inserted = 0  # how many entities the insert phase wrote (the point keys the point_or phase asks for)
POINT_KEYS = 200  # point keys per point_or query


def point_or_filter(i: int, inserted: int) -> str:
    """The ``or`` of :data:`POINT_KEYS` point keys of the insert phase's entities (query ``i``'s)."""
    keys = sorted({(i * 37 + k) % inserted for k in range(POINT_KEYS)})
    return " or ".join(f"(PartitionKey eq 'p{j % 20:03d}' and RowKey eq 'r{j:08d}')" for j in keys)


def wrong_key(conn: str) -> str:
    """``conn`` with its AccountKey replaced by another valid base64 key of the same length."""
    fields = _fields(conn)
    key = base64.b64decode(fields["AccountKey"])
    fields["AccountKey"] = base64.b64encode(bytes(b ^ 0x5A for b in key)).decode()
    return "".join(f"{name}={value};" for name, value in fields.items())


def _init_worker(conn: str, table: str, inserted: int) -> None:
    global _client, _forger, _inserted
    from azure.data.tables import TableClient

    _inserted = inserted
    _client = TableClient.from_connection_string(conn, table)
    _forger = TableClient.from_connection_string(wrong_key(conn), table)


def _op(kind: str, i: int) -> int:
    """One client operation of a phase (runs in a worker process); returns the entities it saw."""
    from azure.data.tables import UpdateMode

    t = _client
    if kind == "insert":
        t.create_entity(entity(f"p{i % 20:03d}", f"r{i:08d}", i))
    elif kind == "get":
        t.get_entity(f"p{i % 20:03d}", f"r{i:08d}")
    elif kind == "upsert":
        t.upsert_entity({"PartitionKey": f"p{i % 20:03d}", "RowKey": f"r{i:08d}", "qty": i}, mode=UpdateMode.MERGE)
    elif kind in ("batch", "grow", "preload"):
        pk = f"{kind[0]}{i:06d}" if kind != "preload" else f"pre{i // 10:05d}"  # preload: 1000 per partition
        base = (i % 10) * 100 if kind == "preload" else 0
        t.submit_transaction([("upsert", entity(pk, f"r{base + j:04d}", j)) for j in range(100)])
    elif kind == "pk_query":
        return sum(1 for _ in t.query_entities("PartitionKey eq 'qpart'"))
    elif kind == "point_or":
        return sum(1 for _ in t.query_entities(point_or_filter(i, _inserted)))
    elif kind == "reject":
        from azure.core.exceptions import HttpResponseError

        try:
            _forger.get_entity(f"p{i % 20:03d}", f"r{i:08d}")
        except HttpResponseError as exc:
            return int(exc.status_code == 403)
    return 0


def _chunk(args: tuple[str, int, int, int]) -> int:
    kind, k, n, step = args
    return sum(_op(kind, i) for i in range(k, n, step))


def _parallel(pool: Any, procs: int, kind: str, n: int) -> int:
    """Run operation ``kind`` for 0..n-1 spread over the pool's ``procs`` client processes."""
    return sum(pool.map(_chunk, [(kind, k, n, procs) for k in range(procs)]))


def rss_total(pids: list[int]) -> int:
    """Resident set size of processes together, in bytes."""
    from cli.bench.proc import rss_bytes

    return sum(rss_bytes(pid) for pid in pids)


def wait_quiet(doc: dict, echo: Callable[[str], None], timeout: float = 300.0, table: str | None = None,
               still_s: float = 10.0) -> float:
    """Wait until a cluster of ours is quiet after a preload: every range of the map (of ``table`` only, when
    given) serving, none compacting a split's dropped half, no pending compaction, and the map unchanged, for
    ``still_s`` on end (so the balancer's splits and RocksDB's compactions do not bill their CPU to the next
    phase). Reports of ranges the map no longer has do not count. Returns the seconds waited; other endpoints
    (no coordinator in ``doc``) return at once."""
    if "coordinator" not in doc:
        return 0.0
    from cli.coordinator_client import call, range_loads

    t0 = time.monotonic()
    last_version, still_since = None, time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = call(doc["coordinator"], {"op": "status"}, timeout=5)
        ranges = [r for r in st["ranges"] if table is None or r["table"].lower() == table.lower()]
        loads = range_loads(st)
        busy = any(r["state"] != "serving" for r in ranges) or any(
            ld.get("compacting") or ld.get("pending_compaction_bytes") for ld in (loads.get(r["id"], {}) for r in ranges))
        version = st.get("version") if table is None else sorted(r["id"] for r in ranges)
        if version != last_version or busy:
            last_version, still_since = version, time.monotonic()
        elif time.monotonic() - still_since >= still_s:
            break
        time.sleep(min(1.0, still_s / 4))
    waited = time.monotonic() - t0
    echo(f"{'':<13} waited {waited:.0f} s for splits and compactions to finish")
    return waited


def run_http_bench(doc: dict, n: int = 2000, batches: int = 50, big: int = 50_000, procs: int = 8,
                   entities: int = 0, max_pages: int = 0, hold_balancer: bool = False,
                   echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the workload against the cluster described by ``doc`` (its cluster.json) with ``procs``
    client processes; returns the figures per phase.

    ``entities`` preloads that many (in partitions of 1000, batches of 100) before the first phase and
    reports the servers' memory after it; ``max_pages`` (0: all) caps the paged scan. ``hold_balancer``
    (for a cluster the bench started) turns the balancer off once the preload has settled: a split the
    phases' load triggers would bill its background compaction to whichever phase runs then."""
    from azure.data.tables import TableServiceClient

    from cli.bench.pools import fork_pool

    pids = server_pids(doc)
    fe_pids = server_pids(doc, ("http-frontend",))
    split_cpu = len(fe_pids) < len(pids)  # a cluster of ours, not another endpoint (external_doc)
    svc = TableServiceClient.from_connection_string(doc["connection_string"])
    name = "bench" + uuid.uuid4().hex[:10]
    table = svc.create_table(name)
    results: dict[str, Any] = {}
    pool = fork_pool(procs, _init_worker, (doc["connection_string"], name, n))

    def record(ph: Phase, ops: int, unit: str = "op") -> None:
        ms = ph.cpu / ops * 1000 if ops else 0.0
        fe_ms = ph.fe_cpu / ops * 1000 if ops else 0.0
        ref = AZURITE_MS.get(ph.name)
        results[ph.name] = {"ops": ops, "ops_s": round(ops / ph.wall, 1), "cpu_ms_per_op": round(ms, 3),
                            "frontend_ms": round(fe_ms, 3), "partition_servers_ms": round(ms - fe_ms, 3),
                            "azurite_ms": ref, "vs_azurite": round(ms / ref, 3) if ref else None}
        vs = f"  {ms / ref * 100:5.1f}% of Azurite's {ref} ms" if ref else ""
        split = f" (frontend {fe_ms:.3f} + partition servers {ms - fe_ms:.3f})" if split_cpu else ""
        echo(f"{ph.name:<13} {ops:>6} {unit}s {ops / ph.wall:>8.1f}/s  server CPU {ms:7.3f} ms/{unit}{split}{vs}")

    try:
        if entities:
            with Phase("preload", pids, fe_pids) as ph:
                _parallel(pool, procs, "preload", entities // 100)
            results["preload"] = {"entities": entities // 100 * 100, "entities_s": round(entities / ph.wall, 1),
                                  "cpu_ms_per_batch": round(ph.cpu / max(1, entities // 100) * 1000, 3),
                                  "server_rss_mib": round(rss_total(pids) / (1 << 20), 1)}
            echo(f"preload       {entities // 100 * 100} entities {entities / ph.wall:>8.1f}/s, server RSS "
                 f"{results['preload']['server_rss_mib']} MiB")
            results["preload"]["settle_s"] = round(wait_quiet(doc, echo), 1)
        if hold_balancer:
            from cli.coordinator_client import call

            call(doc["coordinator"], {"op": "balancer", "action": "off"})
        for kind in ("insert", "get", "upsert"):
            with Phase(kind, pids, fe_pids) as ph:
                _parallel(pool, procs, kind, n)
            record(ph, n)
        queries = max(20, n // 10)
        with Phase("point_or", pids, fe_pids) as ph:
            seen = _parallel(pool, procs, "point_or", queries)
        assert seen == queries * min(POINT_KEYS, n), seen
        record(ph, queries, "query")
        with Phase("batch100", pids, fe_pids) as ph:
            _parallel(pool, procs, "batch", batches)
        record(ph, batches, "batch")
        # One partition of 100 entities, queried by PartitionKey while the table is small, then large.
        table.submit_transaction([("upsert", entity("qpart", f"r{i:04d}", i)) for i in range(100)])
        size_small = n + batches * 100 + 100 + entities // 100 * 100
        with Phase("pk_query", pids, fe_pids) as ph:
            seen = _parallel(pool, procs, "pk_query", queries)
        assert seen == queries * 100, seen
        record(ph, queries, "query")
        results["pk_query"]["table_size"] = size_small
        grow = max(0, big - size_small) // 100
        _parallel(pool, procs, "grow", grow)
        size_big = size_small + grow * 100
        with Phase("pk_query_big", pids, fe_pids) as ph:
            _parallel(pool, procs, "pk_query", queries)
        record(ph, queries, "query")
        results["pk_query_big"]["table_size"] = size_big
        echo(f"{'':<13} PartitionKey query at {size_small} entities: {results['pk_query']['cpu_ms_per_op']:.3f} ms, "
             f"at {size_big}: {results['pk_query_big']['cpu_ms_per_op']:.3f} ms")
        pages = 0
        rows = 0
        with Phase("scan_page", pids, fe_pids) as ph:
            for page in table.list_entities(results_per_page=1000).by_page():
                pages += 1
                rows += sum(1 for _ in page)
                if pages == max_pages:
                    break
        record(ph, pages, "page")
        results["scan_page"]["rows"] = rows
        with Phase("reject", pids, fe_pids) as ph:
            rejected = _parallel(pool, procs, "reject", n)
        assert rejected == n, rejected
        record(ph, n)
        results["server_rss_mib"] = round(rss_total(pids) / (1 << 20), 1)
        echo(f"{'':<13} server RSS at the end: {results['server_rss_mib']} MiB")
    finally:
        pool.terminate()
        pool.join()
        try:
            svc.delete_table(name)
        finally:
            svc.close()
    return results


def _unwind_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit in this process (if it has no handler of its own), so the caller's
    ``finally`` stops the cluster it started instead of leaving it running."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def start_temp_cluster(servers: int | None = None, frontends: int = 1, extra: Sequence[str] = ()) -> tuple[str, dict]:
    """Start a cluster in a temporary data dir: ``rangetable up --detach`` with its defaults (three partition
    servers, three replicas of every range) unless ``servers`` or the flags ``extra`` say otherwise; returns
    (data_dir, cluster.json). From now on a SIGTERM to this process unwinds, so a caller's
    ``finally: stop_temp_cluster`` runs."""
    from cli.cluster_file import read_cluster

    _unwind_on_sigterm()

    data_dir = tempfile.mkdtemp(prefix="rt-bench-http-")
    argv = [sys.executable, "-m", "cli.main", "up", "--detach", "--data-dir", data_dir, "--native-port", "0",
            "--http-port", "0", "--dashboard-port", "0", "--frontends", str(frontends)]
    argv += [] if servers is None else ["--servers", str(servers)]
    argv += extra
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"could not start a cluster: {out.stdout}{out.stderr}")
    doc = read_cluster(data_dir)
    if doc is None:
        raise RuntimeError("the cluster wrote no cluster.json")
    return data_dir, doc


def stop_temp_cluster(data_dir: str) -> None:
    """Stop a cluster started by :func:`start_temp_cluster` and remove its data."""
    import shutil

    from cli.cluster_file import down

    try:
        down(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)



@contextlib.contextmanager
def bench_cluster(data_dir: str | None, frontends: int = 1) -> Iterator[tuple[dict, str | None]]:
    """The cluster a bench runs against: the running one of ``data_dir``, or else one started for it
    (:func:`start_temp_cluster`) and stopped when the block ends. Yields (cluster.json, the temporary
    data dir or None)."""
    from cli.options import cluster_doc

    if data_dir:
        yield cluster_doc(data_dir), None
        return
    temp, doc = start_temp_cluster(frontends=frontends)
    try:
        yield doc, temp
    finally:
        stop_temp_cluster(temp)
