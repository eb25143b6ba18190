"""``rangetable bench aio``: the asyncio native client (one process, one event loop, one socket, N tasks)
against the blocking one (one process, M threads, each with a client of its own), on the same
operation mix: point upserts and point reads of random keys of a preloaded table.

Each client runs for ``seconds``; every ``interval`` seconds a row prints the ops/s of that interval, its
p50/p99 latency, and the CPU the client process and the cluster's servers spent per operation. The steady
figure is the median of the intervals after the first (warm-up) one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cli.bench.http import server_pids
from cli.bench.proc import cpu_seconds
from rangetable import TableClient, TableServiceClient, aio
from rangetable.kernel.stats import percentile_ms


@dataclass
class Tally:
    """What the workers did since the last interval row (shared by the tasks or threads)."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> tuple[list[float], int]:
        """The latencies and error count so far, and start afresh."""
        with self.lock:
            out, errors = self.latencies, self.errors
            self.latencies, self.errors = [], 0
        return out, errors

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Time one operation: its latency, or an error (counted and shown in the row; the run goes on)."""
        t0 = time.perf_counter()
        try:
            yield
        except Exception:
            with self.lock:
                self.errors += 1
            return
        dt = time.perf_counter() - t0
        with self.lock:
            self.latencies.append(dt)


@dataclass
class Mix:
    """The operation mix: ``read_share`` of the operations are point reads, the rest point upserts, of
    keys drawn uniformly from ``keys`` entities in ``partitions`` partitions."""

    keys: int = 10_000
    partitions: int = 100
    read_share: float = 0.5

    def key_of(self, i: int) -> tuple[str, str]:
        """The key of entity number ``i``."""
        return f"p{i % self.partitions:04d}", f"r{i:07d}"

    def key(self, rng: random.Random) -> tuple[str, str]:
        """A random existing key."""
        return self.key_of(rng.randrange(self.keys))

    def operation(self, rng: random.Random) -> tuple[bool, str, str, dict[str, Any]]:
        """The next operation: (a read?, PartitionKey, RowKey, the entity an upsert writes)."""
        pk, rk = self.key(rng)
        return rng.random() < self.read_share, pk, rk, self.entity(pk, rk, rng)

    def entity(self, pk: str, rk: str, rng: random.Random) -> dict[str, Any]:
        """The entity an upsert writes: a handful of typed properties, ~150 bytes."""
        return {"PartitionKey": pk, "RowKey": rk, "Name": f"customer-{rk}", "Qty": rng.randrange(100),
                "Price": rng.random() * 100, "Active": rng.random() < 0.5, "Note": "lorem ipsum dolor sit amet " * 3}


def _row(label: str, t: float, ops: int, lat: list[float], errors: int, interval: float, client_cpu: float,
         server_cpu: float, frontend_cpu: float | None = None) -> dict[str, Any]:
    n = max(1, ops)
    row = {"client": label, "t": round(t), "ops": ops, "ops_per_s": round(ops / interval, 1),
           "p50_ms": percentile_ms(lat, 0.5), "p99_ms": percentile_ms(lat, 0.99), "errors": errors,
           "client_cpu_us": round(client_cpu / n * 1e6, 1), "server_cpu_us": round(server_cpu / n * 1e6, 1)}
    if frontend_cpu is not None:
        row["frontend_cpu_us"] = round(frontend_cpu / n * 1e6, 1)
    return row


def _report(label: str, tally: Tally, seconds: float, interval: float, pids: list[int], running: Callable[[], bool],
            echo: Callable[[str], None], frontend_pids: list[int] | None = None) -> dict[str, Any]:
    """Print a row every ``interval`` s for ``seconds`` (blocking: the caller's workers run elsewhere),
    then the steady figure; returns the rows and the steady figure. The servers' CPU is that of ``pids``;
    with ``frontend_pids`` the rows also give those processes' CPU per operation, apart."""
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    fe = frontend_pids or []
    cpu0, srv0, fe0 = time.process_time(), cpu_seconds(pids), cpu_seconds(fe)
    tally.take()
    for k in range(1, int(seconds / interval) + 1):
        time.sleep(max(0.0, start + k * interval - time.monotonic()))
        if not running():
            raise RuntimeError(f"the {label} workers stopped early")
        lat, errors = tally.take()
        cpu, srv, fe1 = time.process_time(), cpu_seconds(pids), cpu_seconds(fe)
        row = _row(label, k * interval, len(lat), lat, errors, interval, cpu - cpu0, srv - srv0,
                   fe1 - fe0 if frontend_pids is not None else None)
        cpu0, srv0, fe0 = cpu, srv, fe1
        rows.append(row)
        fe_text = f"  frontend CPU {row['frontend_cpu_us']:>6} µs/op" if "frontend_cpu_us" in row else ""
        echo(f"{label:28} {row['t']:>4} s {row['ops_per_s']:>10,.0f} ops/s  p50 {row['p50_ms']:>6} ms  "
             f"p99 {row['p99_ms']:>6} ms  client CPU {row['client_cpu_us']:>6} µs/op  "
             f"servers CPU {row['server_cpu_us']:>6} µs/op{fe_text}"
             f"{'  errors ' + str(row['errors']) if row['errors'] else ''}")
    settled = rows[1:] or rows
    steady = round(statistics.median(r["ops_per_s"] for r in settled), 1)
    echo(f"{label:28} steady {steady:,.0f} ops/s (median of the {len(settled)} intervals after the first)")
    return {"rows": rows, "steady_ops_per_s": steady}


class ClientThreads:
    """``threads`` native clients of ``table``, a thread each, calling ``op(client, rng)`` back to back (each call
    timed into :attr:`tally`, an exception counted as an error) until :meth:`close`. The threads of every
    blocking bench (this one, ``bench feed``'s and ``bench index``'s writers)."""

    def __init__(self, native: str, table: str, threads: int, op: Callable[[TableClient, random.Random], Any]) -> None:
        self.tally, self.stop = Tally(), threading.Event()
        self.clients = [TableClient(native, table) for _ in range(threads)]
        self.op = op
        self.workers = [threading.Thread(target=self._run, args=(c, i), daemon=True)
                        for i, c in enumerate(self.clients)]
        for w in self.workers:
            w.start()

    def _run(self, client: TableClient, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            with self.tally.timing():
                self.op(client, rng)

    def alive(self) -> bool:
        """Every thread is still running."""
        return all(w.is_alive() for w in self.workers)

    def close(self) -> None:
        """Stop the threads and close their clients."""
        self.stop.set()
        for w in self.workers:
            w.join(30)
        for c in self.clients:
            c.close()


def _mixed_op(mix: Mix) -> Callable[[TableClient, random.Random], Any]:
    def op(client: TableClient, rng: random.Random) -> Any:
        read, pk, rk, entity = mix.operation(rng)
        return client.get_entity(pk, rk) if read else client.upsert_entity(entity)
    return op


def run_threads(native: str, table: str, mix: Mix, threads: int, seconds: float, interval: float, pids: list[int],
                echo: Callable[[str], None], label: str = "", frontend_pids: list[int] | None = None) -> dict[str, Any]:
    """The blocking client: ``threads`` threads, each with a TableClient (and socket) of its own
    (``label`` and ``frontend_pids``: see :func:`_report`)."""
    pool = ClientThreads(native, table, threads, _mixed_op(mix))
    try:
        return _report(label or f"blocking, {threads} threads", pool.tally, seconds, interval, pids, pool.alive, echo,
                       frontend_pids)
    finally:
        pool.close()


async def _task_worker(client: aio.TableClient, mix: Mix, tally: Tally, stop: asyncio.Event, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        read, pk, rk, entity = mix.operation(rng)
        with tally.timing():
            await (client.get_entity(pk, rk) if read else client.upsert_entity(entity))


def run_tasks(native: str, table: str, mix: Mix, tasks: int, seconds: float, interval: float, pids: list[int],
              echo: Callable[[str], None]) -> dict[str, Any]:
    """The asyncio client: ``tasks`` tasks on one TableClient (one socket), its event loop in a thread of
    this process while the main thread prints the rows (the GIL is the one the workers' would be)."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    tally = Tally()
    client = aio.TableClient(native, table)

    async def main() -> None:
        await asyncio.gather(*(_task_worker(client, mix, tally, stop, 1000 + i) for i in range(tasks)))
        await client.close()

    def run_loop() -> None:
        loop.run_until_complete(main())

    runner = threading.Thread(target=run_loop, daemon=True)
    runner.start()
    try:
        return _report(f"asyncio, {tasks} tasks", tally, seconds, interval, pids, runner.is_alive, echo)
    finally:
        loop.call_soon_threadsafe(stop.set)
        runner.join(30)
        loop.close()


def run_aio_bench(native: str, doc: dict, *, seconds: float = 60.0, interval: float = 10.0, tasks: int = 64,
                  threads: int = 8, mix: Mix | None = None, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Preload a table, then run the blocking client's threads and the asyncio client's tasks on it, one
    after the other; prints the rows and returns both runs' figures."""
    mix = mix or Mix()
    pids = server_pids(doc, ("frontend", "partition-server"))
    name = f"benchaio{uuid.uuid4().hex[:8]}"
    with TableServiceClient(native) as service:
        table = service.create_table(name)
        rng = random.Random(0)
        loaded = table.upsert_entities(mix.entity(*mix.key_of(i), rng) for i in range(mix.keys))
        echo(f"table {name}: {loaded:,} entities in {mix.partitions} partitions; "
             f"{mix.read_share:.0%} point reads, {1 - mix.read_share:.0%} point upserts; "
             f"{seconds:g} s per client, a row every {interval:g} s (client process {os.getpid()})")
        try:
            res = {"threads": run_threads(native, name, mix, threads, seconds, interval, pids, echo),
                   "tasks": run_tasks(native, name, mix, tasks, seconds, interval, pids, echo)}
        finally:
            service.delete_table(name)
    ratio = res["tasks"]["steady_ops_per_s"] / max(1.0, res["threads"]["steady_ops_per_s"])
    res["tasks_vs_threads"] = round(ratio, 2)
    echo(f"asyncio ({tasks} tasks) / blocking ({threads} threads): {ratio:.2f}x")
    return res
