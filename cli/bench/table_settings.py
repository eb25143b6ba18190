"""``rangetable bench ttl`` and ``rangetable bench capacity``: table TTL and reserved throughput on a
real cluster, printed as one row per interval.

* ``ttl``: loads N entities through the bulk path into a table with a long TTL, shortens the TTL to
  1 s, checks at once that gets and queries return nothing, then prints every interval the disk used,
  the entities left (RocksDB's estimate) and the partition servers' CPU while the expired entities
  are reclaimed.
* ``capacity``: a table split into 4 ranges and reserved at N writes/s gets a skewed write load
  (most of it on one range): the rows show what it was granted (>= 90 % of N is the goal); then a
  second table on the same servers, also reserved, is loaded at the same time, and each keeps its own.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import zmq

from cli.bench.http import bench_cluster, server_pids
from cli.bench.proc import cpu_seconds
from cli.coordinator_client import call
from rangetable import curve, protocol
from rangetable.client.bulk import bulk_upsert
from rangetable.edm import INT32, STRING

Echo = Callable[[str], None]


def _disk_bytes(data_dir: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(data_dir):
        if os.sep + "logs" in root:
            continue
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _table_stats(coordinator: str, table: str) -> tuple[int, int]:
    """(entities left, entities reclaimed) of a table's ranges, from the partition servers' load
    reports (the first is RocksDB's estimate, which counts deletes until they are compacted)."""
    st = call(coordinator, {"op": "status"}, timeout=10)
    ids = {r["id"] for r in st["ranges"] if r["table"].lower() == table.lower()}
    ents = nbytes = 0
    for s in st["servers"]:
        for rid, ld in (s.get("load") or {}).items():
            if rid in ids:
                ents += ld.get("entities", 0)
                nbytes += ld.get("expired", 0)
    return ents, nbytes


def _typed(n: int) -> Iterator[tuple[str, str, dict]]:
    for i in range(n):  # 120 hex characters that differ per entity: data that does not compress away
        pad = hashlib.blake2b(i.to_bytes(8, "big"), digest_size=60).hexdigest()
        yield f"p{i // 100:06d}", f"r{i % 100:03d}", {"n": [INT32, i], "s": [STRING, pad]}


def run_ttl_bench(doc: dict, data_dir: str, n: int, interval: float, limit_s: float, echo: Echo) -> dict:
    """The TTL bench against a running cluster (see the module docstring)."""
    native, coord = doc["native"], doc["coordinator"]
    table = f"ttl{int(time.time()) % 10**6}"
    call(native, {"op": "create_table", "table": table, "settings": {"ttl_s": 3600}})
    t0 = time.monotonic()
    done = [0]

    def progress(k: int) -> None:
        done[0] += k
        if done[0] % 100_000 < k:
            echo(f"  loaded {done[0]:,} ({done[0] / (time.monotonic() - t0):,.0f}/s)")

    res = bulk_upsert(native, table, _typed(n), typed=True, progress=progress)
    load_s = time.monotonic() - t0
    echo(f"loaded {res.entities:,} entities in {load_s:.1f} s ({res.rate:,.0f}/s) with a TTL of 1h")
    rnd = random.Random(1)
    sample = [(f"p{(i := rnd.randrange(n)) // 100:06d}", f"r{i % 100:03d}") for _ in range(200)]

    def found() -> int:
        k = 0
        for pk, rk in sample:
            try:
                call(native, {"op": "get", "table": table, "pk": pk, "rk": rk}, timeout=10)
                k += 1
            except Exception:
                pass
        return k

    first = call(native, {"op": "query", "table": table, "top": 10}, timeout=30)
    echo(f"before: {found()}/200 sampled gets found, first query page {len(first['entities'])} entities")
    time.sleep(3.0)  # let the load reports settle
    pids = server_pids(doc, ("partition-server",))
    c0, w0 = cpu_seconds(pids), time.monotonic()
    time.sleep(interval)
    idle_cpu = (cpu_seconds(pids) - c0) / (time.monotonic() - w0)
    ts = time.monotonic()
    answer = call(native, {"op": "set_table", "table": table, "settings": {"ttl_s": 1}}, timeout=30)
    set_ms = (time.monotonic() - ts) * 1000
    page = call(native, {"op": "query", "table": table, "top": 10}, timeout=60)
    q_ms = (time.monotonic() - ts) * 1000 - set_ms
    hits = found()
    echo(f"TTL set to {answer['ttl']} in {set_ms:.0f} ms; right after: first query page {len(page['entities'])} "
         f"entities ({q_ms:.0f} ms), {hits}/200 sampled gets found")
    echo(f"idle partition-server CPU before: {idle_cpu * 100:.1f} % of a core")
    echo(f"{'t_s':>6} {'disk_MB':>9} {'reclaimed':>10} {'est_left':>10} {'ps_cpu_%':>9} {'cpu_s_total':>12}")
    rows = []
    start, cpu_start = time.monotonic(), cpu_seconds(pids)
    last_cpu, last_t = cpu_start, start
    while True:
        time.sleep(interval)
        now, cpu = time.monotonic(), cpu_seconds(pids)
        ents, gone = _table_stats(coord, table)
        row = {"t_s": round(now - start, 1), "disk_mb": round(_disk_bytes(data_dir) / 2**20, 1), "entities_left": ents,
               "reclaimed": gone,
               "ps_cpu_pct": round((cpu - last_cpu) / (now - last_t) * 100, 1), "cpu_s": round(cpu - cpu_start, 1)}
        rows.append(row)
        echo(f"{row['t_s']:>6} {row['disk_mb']:>9} {gone:>10,} {ents:>10,} {row['ps_cpu_pct']:>9} {row['cpu_s']:>12}")
        last_cpu, last_t = cpu, now
        if (gone >= n and len(rows) > 2 and abs(rows[-1]["disk_mb"] - rows[-2]["disk_mb"]) < 1) \
                or now - start > limit_s:
            break
    reclaim_cpu = rows[-1]["cpu_s"] - idle_cpu * rows[-1]["t_s"]
    echo(f"reclaim: {n:,} entities in ~{rows[-1]['t_s']} s, {reclaim_cpu:.1f} CPU-s above idle "
         f"({reclaim_cpu / max(n, 1) * 1e6:.1f} µs per entity)")
    call(native, {"op": "delete_table", "table": table}, timeout=60)
    return {"entities": n, "load_s": round(load_s, 1), "set_ms": round(set_ms), "after_page": len(page["entities"]),
            "after_gets_found": hits, "rows": rows, "reclaim_cpu_s": round(reclaim_cpu, 1)}


class Writer:
    """Single-entity upserts kept ``window`` in flight on one DEALER socket, ServerBusy counted and not
    retried (an offered load above the reservation)."""

    def __init__(self, native: str, window: int = 64) -> None:
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        curve.connect(self.sock, native)
        self.window = window
        self.inflight: dict[bytes, str] = {}
        self.n = 0

    def run(self, seconds: float, pick: Callable[[], tuple[str, str]], counts: dict[str, list[int]]) -> None:
        """Send for ``seconds``: ``pick()`` gives (table, PartitionKey); counts[table] = [ok, busy]."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            while len(self.inflight) < self.window:
                table, pk = pick()
                self.n += 1
                rid = b"%d" % self.n
                body = {"op": "write", "table": table, "write": {"op": "insert_or_replace", "pk": pk,
                                                                 "rk": f"r{self.n % 5000}", "props": {"v": [INT32, 1]}}}
                self.sock.send_multipart([rid, protocol.pack(body)])
                self.inflight[rid] = table
            if self.sock.poll(100):
                rid, raw = self.sock.recv_multipart()
                table = self.inflight.pop(rid, "")
                c = counts.setdefault(table, [0, 0])
                try:
                    protocol.result(raw)
                    c[0] += 1
                except Exception:
                    c[1] += 1

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(0)


def _split_four(coord: str, table: str) -> None:
    for key in ("p25", "p50", "p75"):
        st = call(coord, {"op": "status"}, timeout=10)
        rid = next(r["id"] for r in st["ranges"] if r["table"] == table and r["low"] < key
                   and (r["high"] is None or key < r["high"]))
        call(coord, {"op": "split", "range": rid, "key": key}, timeout=60)


def _skewed(rnd: random.Random) -> str:
    """A PartitionKey p00..p99 with 70 % of picks in the first range, 20 %, 7 %, 3 % in the others."""
    x = rnd.random()
    quarter = 0 if x < 0.70 else 1 if x < 0.90 else 2 if x < 0.97 else 3
    return f"p{quarter * 25 + rnd.randrange(25):02d}"


def run_capacity_bench(doc: dict, reserve: int, seconds: float, interval: float, echo: Echo) -> dict:
    """The capacity bench against a running cluster (see the module docstring)."""
    native, coord = doc["native"], doc["coordinator"]
    tag = int(time.time()) % 10**6
    a, b = f"capa{tag}", f"capb{tag}"
    for t in (a, b):
        call(native, {"op": "create_table", "table": t}, timeout=60)
        _split_four(coord, t)
        call(native, {"op": "set_table", "table": t, "settings": {"writes": reserve}}, timeout=60)
    primaries = {r["primary"] for r in call(coord, {"op": "status"})["ranges"] if r["table"] in (a, b)}
    echo(f"tables {a} and {b}: 4 ranges each on {len(primaries)} servers, each reserved at {reserve} writes/s; "
         "load: 70/20/7/3 % over the ranges, offered above the reservation")
    rnd = random.Random(7)
    w = Writer(native)
    out: dict[str, Any] = {}
    try:
        for phase, tables in (("skewed, one table", (a,)), ("two tables at once", (a, b))):
            echo(f"-- {phase}")
            echo(f"{'t_s':>6} " + " ".join(f"{t + ' ok/s':>16} {'% of N':>7} {'busy/s':>8}" for t in tables))
            rows = []

            def pick(tables: tuple[str, ...] = tables) -> tuple[str, str]:
                return rnd.choice(tables), _skewed(rnd)

            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                counts: dict[str, list[int]] = {}
                s0 = time.monotonic()
                w.run(interval, pick, counts)
                dt = time.monotonic() - s0
                row: dict[str, Any] = {"t_s": round(time.monotonic() - t0, 1)}
                cells = []
                for t in tables:
                    ok, busy = counts.get(t, [0, 0])
                    row[t] = {"ok_s": round(ok / dt), "pct": round(ok / dt / reserve * 100, 1), "busy_s": round(busy / dt)}
                    cells.append(f"{row[t]['ok_s']:>16} {row[t]['pct']:>7} {row[t]['busy_s']:>8}")
                rows.append(row)
                echo(f"{row['t_s']:>6} " + " ".join(cells))
            steady = rows[len(rows) // 3:]  # after the shares adapted
            means = {t: round(sum(r[t]["pct"] for r in steady) / len(steady), 1) for t in tables}
            echo("   mean after the first third: " + ", ".join(f"{t} {p} % of N" for t, p in means.items()))
            out[phase] = {"rows": rows, "mean_pct": means}
        shown = call(native, {"op": "get_table", "table": a})
        echo(f"table {a} metrics: reserved {shown['writes']} writes/s, usage {shown['usage']}")
    finally:
        w.close()
    for t in (a, b):
        call(native, {"op": "delete_table", "table": t}, timeout=60)
    return out


def bench_ttl_cmd(n: int, interval: float, limit_s: float, data_dir: str | None, echo: Echo) -> dict:
    """Run the TTL bench on the cluster of ``data_dir`` or a temporary one."""
    with bench_cluster(data_dir) as (doc, temp):
        return run_ttl_bench(doc, data_dir or temp or ".", n, interval, limit_s, echo)


def bench_capacity_cmd(reserve: int, seconds: float, interval: float, data_dir: str | None, echo: Echo) -> dict:
    """Run the capacity bench on the cluster of ``data_dir`` or a temporary one."""
    with bench_cluster(data_dir) as (doc, _temp):
        return run_capacity_bench(doc, reserve, seconds, interval, echo)
