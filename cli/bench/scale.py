"""``rangetable bench scale``: one table loaded to millions of entities, and what that size costs.

Steps, against a cluster it starts (balancer off until step 6):

1. load 10,000 entities and measure the **small** figures: point get of a present and of a missing
   key, a PartitionKey query page (one partition of 1000) and a 1000-row scan page (a range scan
   starting at a random partition): client latency p50/p99 and server CPU per request;
2. bulk load the rest through the native bulk path (:func:`rangetable.client.bulk.bulk_upsert`, entities
   grouped by PartitionKey into 100-operation batches), with the rate of every tenth of the load;
3. the same figures at full size, and their ratio to the small ones;
4. moves of the one multi-GB range between the two partition servers, offline time of each;
5. manual splits at the data median, level by level (the whole range, then its halves, then their
   halves …, ``split_levels`` levels: 1 + 2 + 4 splits for 3), offline time of each;
6. the balancer on with its size target: size-based splits until no range exceeds it, and the
   sizes of the ranges it made;
7. bytes on disk against the raw data, then the cluster is stopped; one range store is opened in this
   process with RocksDB statistics (its open time, and how many data blocks gets of missing keys
   read: bloom filters make it ~0); last the cluster is started again and timed until it serves.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from cli.bench.http import server_pids
from cli.bench.proc import cpu_seconds
from cli.bench.soak import disk_bytes
from cli.bench.store import make_props
from rangetable.kernel.stats import percentile_ms

ROWS_PER_PARTITION = 1000
SMALL = 10_000
MiB = 1 << 20


def typed_entity(i: int) -> tuple[str, str, dict[str, list]]:
    """Entity ``i`` as (PartitionKey, RowKey, typed props): ~400 bytes of ten mixed-type properties
    (:func:`cli.bench.store.make_props`), 1000 per partition."""
    return f"p{i // ROWS_PER_PARTITION:07d}", f"r{i % ROWS_PER_PARTITION:04d}", make_props(i)


_done: Any = None  # a loader process's shared counter of acknowledged entities


def _init_loader(counter: Any) -> None:
    global _done
    _done = counter


def _load_chunk(args: tuple[str, str, int, int, int, Callable[[int], tuple[str, str, dict[str, list]]]]) -> int:
    """Bulk-load entities ``[lo, hi)`` (``make(i)`` each) in a loader process; returns how many."""
    from rangetable.client.bulk import bulk_upsert

    native, table, lo, hi, window, make = args

    def count(n: int) -> None:
        with _done.get_lock():
            _done.value += n

    return bulk_upsert(native, table, (make(i) for i in range(lo, hi)), typed=True, window=window,
                       progress=count).entities


def parallel_load(native: str, table: str, lo: int, hi: int, loaders: int, window: int,
                  progress: Callable[[int], None] | None = None,
                  make: Callable[[int], tuple[str, str, dict[str, list]]] = typed_entity) -> float:
    """Load ``[lo, hi)`` from ``loaders`` processes, each a contiguous run of whole partitions of
    :data:`ROWS_PER_PARTITION`; entity ``i`` is ``make(i)`` (a module-level function or a partial of one,
    :func:`typed_entity` by default); returns the seconds it took."""
    import multiprocessing

    from cli.bench.pools import fork_pool

    per = -(-(hi - lo) // loaders // ROWS_PER_PARTITION) * ROWS_PER_PARTITION
    chunks = [(native, table, a, min(hi, a + per), window, make) for a in range(lo, hi, per)]
    counter = multiprocessing.get_context("fork").Value("q", 0)
    t0 = time.perf_counter()
    with fork_pool(len(chunks), _init_loader, (counter,)) as pool:
        pending = pool.map_async(_load_chunk, chunks)
        seen = 0
        while not pending.ready():
            pending.wait(0.5)
            if progress is not None:
                now = counter.value
                progress(now - seen)
                seen = now
        pending.get()  # raises a loader's error
    if progress is not None:
        progress(counter.value - seen)
    return time.perf_counter() - t0


def raw_bytes(i: int) -> int:
    """The raw size of entity ``i``: key and property names and values as bytes (8 per number)."""
    pk, rk, props = typed_entity(i)
    n = len(pk) + len(rk)
    for name, (_t, v) in props.items():
        n += len(name) + (len(v) if isinstance(v, (str, bytes)) else 8)
    return n


class Measure:
    """Client latency and server CPU (partition servers + frontends) of repeated requests."""

    def __init__(self, doc: dict) -> None:
        self.pids = server_pids(doc, ("partition-server", "frontend"))

    def run(self, fn: Callable[[int], Any], reps: int) -> dict[str, float]:
        """Call ``fn(i)`` ``reps`` times; p50/p99 latency and server CPU per call, in ms."""
        lat = []
        cpu0 = cpu_seconds(self.pids)
        for i in range(reps):
            t0 = time.perf_counter()
            fn(i)
            lat.append(time.perf_counter() - t0)
        cpu = cpu_seconds(self.pids) - cpu0
        return {"p50_ms": percentile_ms(lat, 0.5, 3), "p99_ms": percentile_ms(lat, 0.99, 3),
                "cpu_ms": round(cpu / reps * 1000, 3)}


def request_costs(doc: dict, table: Any, partitions: int, reps: int, seed: int) -> dict[str, dict[str, float]]:
    """Point gets (present, missing), PartitionKey query pages and 1000-row scan pages on a table of
    ``partitions`` full partitions."""
    rnd = random.Random(seed)
    m = Measure(doc)

    def some_pk() -> str:
        return f"p{rnd.randrange(partitions):07d}"

    def page(filt: str) -> int:
        pages = table.query_entities(filt, results_per_page=ROWS_PER_PARTITION).by_page()
        return sum(1 for _ in next(pages))

    def missing(_i: int) -> None:
        try:
            table.get_entity(some_pk(), "r-missing")
        except Exception as exc:
            if getattr(exc, "error_code", None) != "ResourceNotFound":
                raise

    return {
        "get": m.run(lambda _i: table.get_entity(some_pk(), f"r{rnd.randrange(ROWS_PER_PARTITION):04d}"), reps),
        "get_missing": m.run(missing, reps),
        "pk_query_page": m.run(lambda _i: page(f"PartitionKey eq '{some_pk()}'"), max(20, reps // 50)),
        "scan_page": m.run(lambda _i: page(f"PartitionKey ge '{some_pk()}'"), max(20, reps // 50)),
    }


def offline_stats(values: list[float]) -> dict[str, float]:
    """p50/p99/max of offline windows in ms."""
    secs = [v / 1000 for v in values]
    return {"n": len(values), "p50_ms": percentile_ms(secs, 0.5, 1), "p99_ms": percentile_ms(secs, 0.99, 1),
            "max_ms": percentile_ms(secs, 1.0, 1)}


def table_ranges(coordinator: str, table: str) -> list[dict]:
    """The table's ranges with their last reported load (bytes, entities), in key order."""
    from cli.coordinator_client import call, range_loads

    st = call(coordinator, {"op": "status"}, timeout=10)
    loads = range_loads(st)
    out = [dict(r, **{"bytes": loads.get(r["id"], {}).get("bytes", 0),
                      "entities": loads.get(r["id"], {}).get("entities", 0)})
           for r in st["ranges"] if r["table"] == table]
    return sorted(out, key=lambda r: r["low"])


def partitions_of(record: dict, partitions: int) -> range:
    """The indices of the generated partitions (``typed_entity``) inside a range record's bounds."""
    lo = int(record["low"][1:]) if record.get("low") else 0
    hi = record.get("high")
    return range(lo, int(hi[1:]) if hi else partitions)


def bloom_check(range_dir: str, pks: range, gets: int = 10_000) -> dict[str, Any]:
    """Open a range store in this process with RocksDB statistics: its open time, and the data blocks
    that ``gets`` point reads of missing RowKeys in its partitions ``pks`` touch (bloom filters skip them)."""
    from partition_server.store.range_store import RangeStore
    from rangetable.kernel.storage import db_options, open_range_db
    from rangetable.keys import encode_key

    opts = db_options(create=False)
    opts.enable_statistics()
    t0 = time.perf_counter()
    store = RangeStore(open_range_db(range_dir, create=False, options=opts), range_dir)
    open_s = time.perf_counter() - t0

    def ticker(name: str) -> int:
        stats = opts.get_statistics()
        assert stats is not None  # statistics are enabled above
        m = re.search(re.escape(name) + r" COUNT : (\d+)", stats)
        return int(m.group(1)) if m else 0

    names = ("rocksdb.block.cache.data.miss", "rocksdb.block.cache.data.hit", "rocksdb.bloom.filter.useful")
    before = {n: ticker(n) for n in names}
    rnd = random.Random(7)
    for _ in range(gets):
        store.get_raw(encode_key(f"p{rnd.choice(pks):07d}", "r-missing"))
    after = {n: ticker(n) - before[n] for n in names}
    store.close()
    return {"open_ms": round(open_s * 1000, 1), "missing_gets": gets,
            "data_blocks_read": after[names[0]] + after[names[1]], "bloom_useful": after[names[2]]}


def time_up(data_dir: str, extra: list[str]) -> float:
    """Start the cluster of ``data_dir`` again (``up --detach``), seconds until it serves."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "cli.main", "up", "--detach", "--data-dir", data_dir,
                          "--native-port", "0", "--http-port", "0", "--dashboard-port", "0", *extra],
                         capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"restart failed: {out.stdout}{out.stderr}")
    return time.perf_counter() - t0


def wait_for_size_splits(coordinator: str, table: str, target: int, timeout: float,
                         echo: Callable[[str], None]) -> list[dict]:
    """Poll until no range of ``table`` reaches ``target`` bytes and the map has been still for a while."""
    deadline = time.monotonic() + timeout
    last_n, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        ranges = table_ranges(coordinator, table)
        if len(ranges) != last_n:
            echo(f"  {len(ranges)} ranges, largest {max(r['bytes'] for r in ranges) / MiB:.0f} MiB")
            last_n, still_since = len(ranges), time.monotonic()
        busy = any(r["state"] != "serving" for r in ranges)
        if not busy and max(r["bytes"] for r in ranges) < target and time.monotonic() - still_since > 15:
            return ranges
        time.sleep(2)
    return table_ranges(coordinator, table)


def wait_compacted(coordinator: str, rid: str, timeout: float = 600.0) -> None:
    """Wait until range ``rid`` reports no compaction of a split's dropped half in progress."""
    from cli.coordinator_client import call, range_loads

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = call(coordinator, {"op": "status"}, timeout=10)
        loads = range_loads(st)
        if rid in loads and not loads[rid].get("compacting"):
            return
        time.sleep(1)


def summarize_sizes(ranges: list[dict], target: int) -> dict[str, Any]:
    """Range sizes against the split target."""
    sizes = sorted(r["bytes"] for r in ranges)
    return {"ranges": len(sizes), "target_mib": target / MiB, "min_mib": round(sizes[0] / MiB, 1),
            "median_mib": round(sizes[len(sizes) // 2] / MiB, 1), "max_mib": round(sizes[-1] / MiB, 1)}


def range_dir(data_dir: str, record: dict) -> str:
    """The RocksDB directory of a range record of the map."""
    return os.path.join(data_dir, record.get("path") or os.path.join("ranges", record["id"]))


def run_scale(doc: dict, data_dir: str, *, entities: int = 10_000_000, moves: int = 10, split_levels: int = 3,
              split_target: int = 64 * MiB,
              reps: int = 2000, window: int = 32, loaders: int = 2, settle_s: float = 600.0,
              up_args: list[str] | None = None,
              echo: Callable[[str], None] = print, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run every step of the module docstring on the cluster of ``doc`` (started with ``up_args``,
    which :func:`time_up` reuses) whose data root is ``data_dir``; stops that cluster at step 7 and
    leaves it running again after it. Returns the figures."""
    from cli.coordinator_client import call
    from rangetable.client import TableServiceClient

    coord, native = doc["coordinator"], doc["native"]
    call(coord, {"op": "balancer", "action": "off"})
    name = "scale"
    svc = TableServiceClient(native)
    table = svc.create_table_if_not_exists(name)
    res: dict[str, Any] = {"entities": entities, "loaders": loaders}
    small = min(SMALL, entities)

    def load(lo: int, hi: int) -> float:
        return parallel_load(native, name, lo, hi, loaders, window, progress)

    load(0, small)
    res["small"] = request_costs(doc, table, small // ROWS_PER_PARTITION, reps, 1)
    echo(f"at {small:,} entities: " + _costs_line(res["small"]))

    slices, done, total_s = [], small, 0.0  # 2. the bulk load, timed per tenth
    step = max(ROWS_PER_PARTITION, (entities - small) // 10 // ROWS_PER_PARTITION * ROWS_PER_PARTITION)
    while done < entities:
        hi = min(entities, done + step)
        secs = load(done, hi)
        total_s += secs
        slices.append(round((hi - done) / secs, 1))
        echo(f"  loaded {hi:>11,}  {slices[-1]:>9,.0f} entities/s")
        done = hi
    res["load"] = {"entities_s": round((entities - small) / total_s, 1) if total_s else None,
                   "per_tenth": slices, "min_tenth": min(slices) if slices else None}

    res["large"] = request_costs(doc, table, entities // ROWS_PER_PARTITION, reps, 2)  # 3.
    res["ratio"] = {k: round(res["large"][k]["cpu_ms"] / max(res["small"][k]["cpu_ms"], 1e-6), 2)
                    for k in res["large"]}
    echo(f"at {entities:,} entities: " + _costs_line(res["large"]))

    (big,) = table_ranges(coord, name)  # 4. moves of the one big range
    servers = [s["id"] for s in call(coord, {"op": "status"})["servers"] if s["alive"]]
    res["big_range_mib"] = round(big["bytes"] / MiB, 1)
    offs = []
    for _ in range(moves):
        primary = table_ranges(coord, name)[0]["primary"]
        target = next(s for s in servers if s != primary)
        offs.append(call(coord, {"op": "move", "range": big["id"], "server": target}, timeout=120)["offline_ms"])
    res["moves"] = offline_stats(offs)
    echo(f"moves of the {res['big_range_mib']:,.0f} MiB range: {res['moves']}")

    splits, level = [], [big["id"]]  # 5. manual splits, level by level
    for _ in range(split_levels):
        nxt = []
        for rid in level:
            wait_compacted(coord, rid)  # as the balancer does: never split a half still compacting its drop
            out = call(coord, {"op": "split", "range": rid, "key": None}, timeout=300)
            splits.append(out["offline_ms"])
            nxt += [out["left"], out["right"]]
        level = nxt
    res["manual_splits"] = offline_stats(splits)
    smallest = min(r["bytes"] for r in table_ranges(coord, name)) / MiB
    echo(f"manual splits ({res['big_range_mib']:,.0f} MiB down to {smallest:,.0f} MiB ranges): {res['manual_splits']}")

    call(coord, {"op": "balancer", "action": "set", "key": "split_size_bytes", "value": str(split_target)})
    call(coord, {"op": "balancer", "action": "on"})  # 6. size-based splits
    ranges = wait_for_size_splits(coord, name, split_target, settle_s, echo)
    res["size_splits"] = summarize_sizes(ranges, split_target)
    events = call(coord, {"op": "events", "since": 0, "limit": 10_000})
    auto = [e["offline_ms"] for e in events if e.get("kind") == "split" and e.get("reason") != "manual"
            and "offline_ms" in e]
    res["size_splits"]["offline"] = offline_stats(auto) if auto else None
    echo(f"size-based splits (target {split_target / MiB:.0f} MiB): {res['size_splits']}")

    sample = range(0, entities, max(1, entities // 10_000))
    raw = sum(raw_bytes(i) for i in sample) / len(sample) * entities
    on_disk = disk_bytes(os.path.join(data_dir, "ranges"))  # 7.
    res["space"] = {"raw_mib": round(raw / MiB, 1), "disk_mib": round(on_disk / MiB, 1),
                    "disk_per_raw": round(on_disk / raw, 2)}
    echo(f"space: {res['space']}")
    svc.close()
    biggest = max(table_ranges(coord, name), key=lambda r: r["bytes"])
    from cli.cluster_file import down

    down(data_dir)
    res["store_open"] = bloom_check(range_dir(data_dir, biggest), partitions_of(biggest, -(-entities // ROWS_PER_PARTITION)))
    echo(f"range store of {biggest['bytes'] / MiB:,.0f} MiB opened in this process: {res['store_open']}")
    res["restart_s"] = round(time_up(data_dir, up_args or []), 2)
    echo(f"cluster restart until it serves: {res['restart_s']} s")
    return res


def _costs_line(c: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{k} p50 {v['p50_ms']} ms p99 {v['p99_ms']} ms cpu {v['cpu_ms']} ms" for k, v in c.items())
