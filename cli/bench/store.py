"""Benchmark of one RangeStore: point writes, point reads, entity group transactions, filtered scans.

``run_store_bench(n, data_dir)`` prints one line per figure and returns them as a dict. Targets on a
2-core box: ≥ 50k writes/s, ≥ 80k reads/s, ≥ 150k scanned entities/s. The machine is noisy, so treat
the figures as indications; compare runs made back to back.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, GUID, INT32, INT64, STRING, UNIX_EPOCH_TICKS


def make_props(i: int) -> dict[str, list]:
    """Typed props of a ~400-byte entity with ten properties of mixed types."""
    return {
        "name": [STRING, f"customer-{i:08d}"],
        "city": [STRING, ("Amsterdam", "Berlin", "Lisbon", "Oslo", "Prague")[i % 5]],
        "note": [STRING, "lorem ipsum dolor sit amet " * 6],
        "qty": [INT32, i % 100],
        "total": [INT64, i * 1_000_003],
        "price": [DOUBLE, i * 0.25],
        "active": [BOOLEAN, i % 3 == 0],
        "created": [DATETIME, UNIX_EPOCH_TICKS + i * 10_000_000],
        "ref": [GUID, f"{i:08x}-0000-4000-8000-{i:012x}"],
        "blob": [BINARY, bytes(range(64))],
    }


def _key(i: int) -> tuple[str, str]:
    return f"p{i % 1000:04d}", f"r{i:09d}"


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def run_store_bench(n: int = 50_000, data_dir: str | None = None,
                    echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the store benchmark on ``n`` entities in a fresh store under ``data_dir`` (temp if None); ``echo``
    prints the table (``--json`` passes one that prints nothing, so stdout is the JSON alone).

    Returns ``{"write_ops_s", "read_ops_s", "egt_entities_s", "egt_batches_s", "scan_entities_s",
    "scan_matches", "n"}``.
    """
    import msgpack

    from partition_server.store.range_store import RangeStore
    from rangetable.filter import compile_cached

    n = max(100, n)
    base = tempfile.mkdtemp(prefix="rt-bench-store-", dir=data_dir)
    results: dict[str, Any] = {"n": n}
    try:
        store = RangeStore.open(os.path.join(base, "range"))
        try:
            props = [make_props(i) for i in range(n)]
            keys = [_key(i) for i in range(n)]
            ops = [
                {"op": "insert_or_replace", "pk": pk, "rk": rk, "props": p}
                for (pk, rk), p in zip(keys, props, strict=True)
            ]
            size = len(msgpack.packb([0, props[0]]))

            write = store.write
            t = time.perf_counter()
            for op in ops:
                write(op)
            results["write_ops_s"] = _rate(n, time.perf_counter() - t)

            order = list(range(n))
            random.Random(1).shuffle(order)
            probe = [keys[i] for i in order]
            get = store.get
            t = time.perf_counter()
            for pk, rk in probe:
                get(pk, rk)
            results["read_ops_s"] = _rate(n, time.perf_counter() - t)

            batches = []
            for b in range(max(1, n // 100)):
                pk = f"egt{b:06d}"
                batches.append(
                    [
                        {
                            "op": "insert_or_replace",
                            "pk": pk,
                            "rk": f"r{j:03d}",
                            "props": props[(b * 100 + j) % n],
                        }
                        for j in range(100)
                    ]
                )
            batch = store.batch
            t = time.perf_counter()
            for ops_b in batches:
                batch(ops_b)
            dt = time.perf_counter() - t
            results["egt_batches_s"] = _rate(len(batches), dt)
            results["egt_entities_s"] = _rate(len(batches) * 100, dt)

            store.flush()
            _, pred = compile_cached("qty ge 50")
            lo, hi = b"p", b"q"  # the n point-written entities
            matches = 0
            t = time.perf_counter()
            nxt: bytes | None = lo
            while nxt is not None:
                page, nxt = store.scan(nxt, hi, pred, limit=1000)
                matches += len(page)
            dt = time.perf_counter() - t
            results["scan_entities_s"] = _rate(n, dt)
            results["scan_matches"] = matches
            results["entity_bytes"] = size
        finally:
            store.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    echo(f"store bench: n={n}, ~{results['entity_bytes']} B/entity (10 typed props)")
    echo(f"  point write (insert_or_replace): {results['write_ops_s']:>10,.0f} ops/s")
    echo(f"  point read (get, random):        {results['read_ops_s']:>10,.0f} ops/s")
    echo(
        f"  EGT of 100 (insert_or_replace):  {results['egt_entities_s']:>10,.0f} entities/s"
        f" ({results['egt_batches_s']:,.0f} batches/s)"
    )
    echo(
        f"  filtered scan (qty ge 50):       {results['scan_entities_s']:>10,.0f} entities scanned/s"
        f" ({results['scan_matches']:,} matches)"
    )
    return results


if __name__ == "__main__":  # pragma: no cover
    import sys

    run_store_bench(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)
