"""The stock workload: client processes decrementing one stock counter until it is sold out.

Two ways to decrement, through the native client or the unchanged Azure SDK over REST:

* ``cond`` — one conditional counter write per unit: ``stock ge 1`` and ``stock -1`` in the same
  request (:mod:`rangetable.write_conditions`; over REST the ``x-rangetable-condition`` and
  ``x-rangetable-counters`` headers). A sold-out stock answers ConditionCheckFailed; nothing retries.
* ``etag`` — what a client of Azure Tables must do: read the entity, write ``stock - 1`` with
  ``If-Match`` its ETag, and start over on 412 (another client got there first).

Every successful decrement records the value it left (the counter's new value, or the value written),
so the run proves that no decrement was lost or doubled: the values left are exactly
``stock - 1, …, 1, 0``, each once, and the entity reads 0 at the end. The parent prints a row per
interval (decrements and retries in it) while the clients run.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from typing import Any

MODES = ("cond", "etag")
VIAS = ("native", "rest")
CONDITION = "stock ge 1"
_SLOTS = 2  # per client in the shared counters: decrements, retries


def _etag_decrement(get: Callable[[], Any], update: Callable[[int, str], None],
                    modified: type[Exception]) -> Callable[[], tuple[int | None, int]]:
    """A decrement by read-modify-write: read the entity (``get``), write ``stock - 1`` if its ETag is
    unchanged (``update``), start over when the write raises ``modified`` (412)."""

    def etag() -> tuple[int | None, int]:
        retries = 0
        while True:
            e = get()
            left = e["stock"]
            if left < 1:
                return None, retries
            try:
                update(left - 1, e.metadata["etag"])
                return left - 1, retries
            except modified:
                retries += 1

    return etag


def _native_decrement(target: str, table: str, pk: str, mode: str) -> Callable[[], tuple[int | None, int]]:
    """A function decrementing once through the native client: (the value left, or None when sold
    out; the retries it took)."""
    from rangetable import ConditionCheckFailedError, MatchConditions, ResourceModifiedError, TableClient

    client = TableClient(target, table)
    key = {"PartitionKey": pk, "RowKey": "stock"}

    def cond() -> tuple[int | None, int]:
        try:
            return client.update_entity(key, condition=CONDITION, counters={"stock": -1})["counters"]["stock"], 0
        except ConditionCheckFailedError:
            return None, 0

    def update(left: int, etag: str) -> None:
        client.update_entity({**key, "stock": left}, etag=etag, match_condition=MatchConditions.IfNotModified)

    return cond if mode == "cond" else _etag_decrement(lambda: client.get_entity(pk, "stock"), update,
                                                       ResourceModifiedError)


def _rest_decrement(target: str, table: str, pk: str, mode: str) -> Callable[[], tuple[int | None, int]]:
    """:func:`_native_decrement` through ``azure-data-tables`` (``target``: a connection string)."""
    from azure.core import MatchConditions
    from azure.core.exceptions import HttpResponseError, ResourceModifiedError
    from azure.data.tables import TableClient

    client = TableClient.from_connection_string(target, table)
    key = {"PartitionKey": pk, "RowKey": "stock"}
    headers = {"x-rangetable-condition": CONDITION, "x-rangetable-counters": '{"stock": -1}'}
    seen: dict[str, str] = {}

    def hook(response: Any) -> None:
        seen["counters"] = response.http_response.headers.get("x-rangetable-counters", "")

    def cond() -> tuple[int | None, int]:
        try:
            client.update_entity(key, headers=headers, raw_response_hook=hook)
        except HttpResponseError as exc:  # not a code the SDK knows: not a ResourceModifiedError
            # azure-data-tables sets error_code on the errors it raises; azure-core's class lacks it
            if exc.error_code != "ConditionCheckFailed":  # type: ignore[attr-defined]
                raise
            return None, 0
        return json.loads(seen["counters"])["stock"], 0

    def update(left: int, etag: str) -> None:
        client.update_entity({**key, "stock": left}, etag=etag, match_condition=MatchConditions.IfNotModified)

    return cond if mode == "cond" else _etag_decrement(lambda: client.get_entity(pk, "stock"), update,
                                                       ResourceModifiedError)


def _client(index: int, via: str, doc: dict, table: str, pk: str, mode: str, counts: Any, start: Any,
            out: Any) -> None:
    """One client process of the cluster described by ``doc`` (its cluster.json): once every client
    is ready (the ``start`` barrier), decrement until sold out, counting in ``counts`` (slots
    ``2 * index`` and the next), then put (index, the values left, or the error) on ``out``."""
    from rangetable import curve

    try:
        curve.remember_cluster(doc)
        if via == "native":
            decrement = _native_decrement(doc["native"], table, pk, mode)
        else:
            decrement = _rest_decrement(doc["connection_string"], table, pk, mode)
        start.wait(timeout=300)
        left: list[int] = []
        while True:
            value, retries = decrement()
            counts[_SLOTS * index + 1] += retries
            if value is None:
                break
            left.append(value)
            counts[_SLOTS * index] += 1
        out.put((index, left, None))
    except Exception as exc:  # noqa: BLE001  (reported by the parent, which fails the run)
        out.put((index, [], f"{type(exc).__name__}: {exc}"))


def run_stock(via: str, mode: str, *, doc: dict, table: str, stock: int, clients: int,
              interval: float, echo: Callable[[str], None]) -> dict[str, Any]:
    """Sell ``stock`` units with ``clients`` processes decrementing through ``via`` in ``mode`` on the
    cluster of ``doc`` (its cluster.json); print a row per ``interval`` and return the figures and the
    verdict. The stock row (PartitionKey ``{via}-{mode}``) is created first in ``table``, which must exist."""
    from rangetable import TableClient

    pk = f"{via}-{mode}"
    native = doc["native"]
    with TableClient(native, table) as t:
        t.upsert_entity({"PartitionKey": pk, "RowKey": "stock", "stock": stock}, mode="replace")
    ctx = mp.get_context("spawn")
    counts = ctx.Array("q", _SLOTS * clients, lock=False)
    out = ctx.Queue()
    barrier = ctx.Barrier(clients + 1)
    procs = [ctx.Process(target=_client, args=(i, via, doc, table, pk, mode, counts, barrier, out), daemon=True)
             for i in range(clients)]
    echo(f"{via:6} {mode:4}: {clients} clients selling {stock} units")
    echo("      t   decrements   ops/s   retries  retries/op")
    for p in procs:
        p.start()
    barrier.wait(timeout=300)  # every client has imported its libraries and made its client: go
    results: dict[int, tuple[list[int], str | None]] = {}
    start = last_t = time.monotonic()
    last = (0, 0)
    while len(results) < clients:
        try:
            index, left, err = out.get(timeout=max(0.0, last_t + interval - time.monotonic()))
            results[index] = (left, err)
            continue
        except queue.Empty:
            pass
        now = time.monotonic()
        done = sum(counts[i] for i in range(0, len(counts), _SLOTS))
        retries = sum(counts[i] for i in range(1, len(counts), _SLOTS))
        d, r = done - last[0], retries - last[1]
        echo(f"  {now - start:5.1f}   {d:10}   {d / (now - last_t):5.0f}   {r:7}  {r / max(d, 1):10.2f}")
        last_t, last = now, (done, retries)
    elapsed = time.monotonic() - start
    for p in procs:
        p.join(timeout=10)
    with TableClient(native, table) as t:
        final = t.get_entity(pk, "stock")["stock"]
    values = sorted(v for left, _ in results.values() for v in left)
    errors = [err for _, err in results.values() if err]
    seen = set(values)
    retries = sum(counts[i] for i in range(1, len(counts), _SLOTS))
    res = {"via": via, "mode": mode, "clients": clients, "stock": stock, "final": final,
           "decrements": len(values), "doubled": len(values) - len(seen), "lost": stock - len(seen & set(range(stock))),
           "retries": retries, "seconds": round(elapsed, 2), "ops_s": round(len(values) / elapsed, 1),
           "retries_per_op": round(retries / max(len(values), 1), 2), "errors": errors}
    res["ok"] = not errors and final == 0 and values == list(range(stock))
    echo(f"  {via} {mode}: {res['decrements']} decrements in {res['seconds']} s = {res['ops_s']} ops/s, "
         f"{res['retries_per_op']} retries/op; final stock {final}, lost {res['lost']}, doubled {res['doubled']}"
         f"{', errors: ' + '; '.join(errors[:3]) if errors else ''} -> {'PASS' if res['ok'] else 'FAIL'}")
    return res
