"""``rangetable bench store --options``: RocksDB options measured on one range store.

Each variant loads the same ``n`` entities (~480 bytes, 1000 per partition) through 100-operation
batches, compacts, and then measures random gets of present keys, gets of missing RowKeys in present
partitions (with the data blocks each reads, from RocksDB's statistics) and bytes on disk. The first
variant is what every range store uses (:func:`rangetable.kernel.storage.db_options`); each other one
changes one option.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

MiB = 1 << 20
VARIANTS: dict[str, dict[str, Any]] = {
    "ours (bloom 10 bits, shared 128 MiB cache, 8 MiB memtables)": {},
    "no bloom filter": {"bloom_bits": 0},
    "block cache 8 MiB": {"block_cache_bytes": 8 * MiB},
    "block cache 512 MiB": {"block_cache_bytes": 512 * MiB},
    "memtables 16 MiB, L0 trigger 8": {"write_buffer_size": 16 * MiB, "l0_trigger": 8},
    "memtables 64 MiB": {"write_buffer_size": 64 * MiB},
}
# compaction under one hot range: each changes one option of ours
HOT_VARIANTS: dict[str, dict[str, Any]] = {
    "ours (8 MiB memtables, L0 trigger 4, deletion trigger 75 %)": {},
    "memtables 16 MiB, L0 trigger 8": {"write_buffer_size": 16 * MiB, "l0_trigger": 8},
    "deletion trigger 50 % (before)": {"deletion_trigger": 8192},
    "no compact-on-deletion collector": {"compact_deletions": False},
}


def _ticker(options: Any, name: str) -> int:
    m = re.search(re.escape(name) + r" COUNT : (\d+)", options.get_statistics())
    return int(m.group(1)) if m else 0


def measure_variant(path: str, n: int, probes: int, **kw: Any) -> dict[str, Any]:
    """Load, compact and probe one store at ``path`` opened with ``db_options(**kw)``."""
    from cli.bench.scale import ROWS_PER_PARTITION, typed_entity
    from cli.bench.soak import disk_bytes
    from partition_server.store.range_store import RangeStore
    from rangetable.kernel.storage import db_options, open_range_db

    opts = db_options(**kw)
    opts.enable_statistics()
    store = RangeStore(open_range_db(path, options=opts), path)
    try:
        t0 = time.perf_counter()
        for b in range(0, n, 100):
            store.batch([{"op": "insert_or_replace", "pk": pk, "rk": rk, "props": props}
                         for pk, rk, props in map(typed_entity, range(b, min(n, b + 100)))])
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        store.flush()
        store._db.compact_range(None, None)
        compact_s = time.perf_counter() - t0
        rnd = random.Random(3)
        parts = max(1, n // ROWS_PER_PARTITION)
        present = [typed_entity(rnd.randrange(n))[:2] for _ in range(probes)]
        missing = [(f"p{rnd.randrange(parts):07d}", f"x{i}") for i in range(probes)]
        t0 = time.perf_counter()
        for pk, rk in present:
            store.get(pk, rk)
        get_s = time.perf_counter() - t0
        blocks = ("rocksdb.block.cache.data.miss", "rocksdb.block.cache.data.hit")
        before = sum(_ticker(opts, b) for b in blocks)
        t0 = time.perf_counter()
        for pk, rk in missing:
            store.get(pk, rk)
        miss_s = time.perf_counter() - t0
        miss_blocks = sum(_ticker(opts, b) for b in blocks) - before
    finally:
        store.close()
    return {"load_entities_s": round(n / load_s), "compact_s": round(compact_s, 2),
            "get_ops_s": round(probes / get_s), "missing_get_ops_s": round(probes / miss_s),
            "data_blocks_per_missing_get": round(miss_blocks / probes, 3),
            "disk_mib": round(disk_bytes(path) / MiB, 1)}


def queue_scan(path: str, n: int, compact_deletions: bool, settle_s: float = 5.0) -> dict[str, Any]:
    """The queue pattern: ``n`` entities inserted, the oldest 95 % deleted in key order, flushed; after
    ``settle_s`` for background compaction, the cost of reading the head of the queue (a 100-entity
    scan from the start) in keys stepped over and milliseconds."""
    from partition_server.store.range_store import RangeStore
    from rangetable.kernel.storage import db_options, open_range_db
    from rangetable.keys import encode_key

    opts = db_options(compact_deletions=compact_deletions)
    opts.enable_statistics()
    store = RangeStore(open_range_db(path, options=opts), path)
    try:
        props = {"n": [2, 1], "note": [0, "x" * 200]}  # Int32, String
        for b in range(0, n, 100):
            store.batch([{"op": "insert_or_replace", "pk": "queue", "rk": f"{i:010d}", "props": props}
                         for i in range(b, min(n, b + 100))])
        for i in range(n * 95 // 100):
            store.write({"op": "delete", "pk": "queue", "rk": f"{i:010d}"})
        store.flush()
        time.sleep(settle_s)
        before = _ticker(opts, "rocksdb.number.iter.skip")
        t0 = time.perf_counter()
        for _ in range(20):
            page, _next = store.scan(encode_key("queue", ""), None, limit=100)
        ms = (time.perf_counter() - t0) / 20 * 1000
        skipped = (_ticker(opts, "rocksdb.number.iter.skip") - before) // 20
    finally:
        store.close()
    return {"head_scan_ms": round(ms, 3), "keys_skipped_per_scan": skipped, "live_first": page[0].rk}


def background_cpu_s() -> float:
    """CPU seconds used so far by this process's RocksDB background threads (flushes and compactions:
    the threads RocksDB names ``rocksdb:high`` and ``rocksdb:low``: :func:`cli.bench.proc.thread_kind`)."""
    from cli.bench.proc import thread_cpu

    return thread_cpu(os.getpid()).get("rocksdb", 0.0)


def hot_range_compaction(path: str, n: int, settle_s: float = 30.0, **kw: Any) -> dict[str, Any]:
    """One hot range: ``n`` upserts of new RowKeys into one PartitionKey by 6 interleaved writers, each
    with a request id (so the request-record window fills and purges), into a store opened with
    ``db_options(**kw)``. Returns RocksDB's background CPU per write in microseconds, measured until the
    compactions the writes caused have finished (at most ``settle_s`` more), and the writes' rate."""
    import uuid

    from partition_server.store.range_store import RangeStore
    from rangetable.kernel.storage import db_options, open_range_db

    store = RangeStore(open_range_db(path, options=db_options(**kw)), path)
    run = uuid.uuid4().hex[:8]
    note = [0, "x" * 60]  # String
    try:
        cpu0, t0 = background_cpu_s(), time.perf_counter()
        for i in range(n):
            store.write({"op": "insert_or_replace", "pk": "hot", "rk": f"{i % 6}-{run}-{i:010d}",
                         "props": {"qty": [2, i], "note": note}}, request_id=uuid.uuid4().hex)
        write_s = time.perf_counter() - t0
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline and (store._db.property_int_value("rocksdb.num-running-compactions")
                                               or store._db.property_int_value("rocksdb.compaction-pending")):
            time.sleep(0.1)
        cpu = background_cpu_s() - cpu0
    finally:
        store.close()
    return {"writes_s": round(n / write_s), "background_cpu_s": round(cpu, 2),
            "background_us_per_write": round(cpu / n * 1e6, 1)}


def run_options_bench(n: int = 1_000_000, probes: int = 50_000, data_dir: str | None = None,
                      echo: Callable[[str], None] = print, queue: int | None = None) -> dict[str, dict[str, Any]]:
    """Every variant of :data:`VARIANTS` on ``n`` entities, and the queue pattern on ``queue`` entities
    (default: ``n`` / 10, at least 60,000); prints a table, returns the figures."""
    base = tempfile.mkdtemp(prefix="rt-bench-options-", dir=data_dir)
    out: dict[str, dict[str, Any]] = {}
    echo(f"{n:,} entities per variant, {probes:,} gets of present and of missing keys")
    echo(f"{'variant':<58} {'load/s':>8} {'compact s':>9} {'get/s':>8} {'miss/s':>8} {'blocks/miss':>11} {'disk MiB':>8}")
    try:
        for i, (name, kw) in enumerate(VARIANTS.items()):
            r = out[name] = measure_variant(os.path.join(base, f"v{i}"), n, probes, **kw)
            echo(f"{name:<58} {r['load_entities_s']:>8,} {r['compact_s']:>9} {r['get_ops_s']:>8,} "
                 f"{r['missing_get_ops_s']:>8,} {r['data_blocks_per_missing_get']:>11} {r['disk_mib']:>8}")
            shutil.rmtree(os.path.join(base, f"v{i}"), ignore_errors=True)
        q = queue or max(60_000, n // 10)
        echo(f"queue pattern: {q:,} inserted, the oldest 95 % deleted in key order, then the head read")
        for flag, name in ((True, "with the compact-on-deletion collector (ours)"), (False, "without it")):
            r = out[f"queue {name}"] = queue_scan(os.path.join(base, f"q{int(flag)}"), q, flag)
            echo(f"  {name:<46} {r['head_scan_ms']:>8} ms per 100-entity head scan, "
                 f"{r['keys_skipped_per_scan']:,} keys stepped over")
        echo(f"hot range: {n:,} upserts of new RowKeys into one PartitionKey, each with a request id")
        for i, (name, kw) in enumerate(HOT_VARIANTS.items()):
            r = out[f"hot {name}"] = hot_range_compaction(os.path.join(base, f"h{i}"), n, **kw)
            echo(f"  {name:<62} {r['background_us_per_write']:>6} us of flush and compaction CPU per write, "
                 f"{r['writes_s']:,} writes/s")
            shutil.rmtree(os.path.join(base, f"h{i}"), ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out
