"""The geo drill's workload and what it checks (``rangetable drill geo``, issue 35, ``docs/geo.md``).

One writer upserts rows ``r000``…``r{ROWS-1}`` of one partition with ``n`` = 1, 2, 3 … back to back at the cluster
that takes writes, moving to the other one when refused (``InsufficientAccountPermissions``: a fenced or a
secondary cluster); one write at a time, so the order of ``n`` is the history's linearization. A reader reads
the whole partition (one page: one cut) at the secondary again and again. The checks are pure functions of
that history:

* :func:`prefix_violation`: a read at a secondary is the state after the writes ``n <= k`` for its highest ``k``
  (never a later write without an earlier one), of the history that survived (after a forced failover, without
  the writes the old primary acknowledged after the cut: its loss ledger);
* :func:`state_after`: the state the history says a cluster holds;
* :func:`ledger_check`: a forced failover's loss ledger against the writes the old primary acknowledged after
  the cut, which must be the same, in the same order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from rangetable.client.blocking import TableServiceClient
from rangetable.edm import ticks_from_etag
from rangetable.errors import TableError

ROWS = 100  # rows the writer cycles over: a read of them all is one page, so one cut
PK = "g"


class Write(NamedTuple):
    """One acknowledged write: the cluster that acknowledged it, its row, ``n`` and its Timestamp (ticks)."""

    cluster: str
    row: str
    n: int
    ts: int


def state_after(writes: Iterable[Write], upto: int | None = None) -> dict[str, int]:
    """Row -> ``n`` of the last of ``writes`` (in ``n`` order) with ``n <= upto`` (all without ``upto``)."""
    out: dict[str, int] = {}
    for w in sorted(writes, key=lambda w: w.n):
        if upto is None or w.n <= upto:
            out[w.row] = w.n
    return out


def prefix_violation(read: dict[str, int], acked: list[Write], unsure: set[int]) -> str | None:
    """Why ``read`` (row -> ``n``) is not the state after a prefix of the history, or None when it is. ``unsure``:
    writes whose answer was lost (they may or may not have happened: rows whose last write up to the read's
    highest ``n`` is one of them are not judged)."""
    if not read:
        return None
    k = max(read.values())
    want = state_after(acked, k)
    last_unsure: dict[str, int] = {}
    for n in sorted(unsure):
        if n <= k:
            last_unsure[f"r{n % ROWS:03d}"] = n
    for row in sorted(set(read) | set(want)):
        if last_unsure.get(row, -1) > want.get(row, -1):
            continue
        if read.get(row) != want.get(row):
            return (f"read at the secondary shows write n={k} but row {row} holds n={read.get(row)}, where the "
                    f"history up to n={k} says n={want.get(row)}")
    return None


def ledger_check(ledger: list[tuple[str, int]], acked_after: list[Write]) -> str | None:
    """Why the loss ledger (``(row, n)`` in its order) is not exactly the writes the old primary acknowledged
    after the cut, in order; None when it is."""
    want = [(w.row, w.n) for w in sorted(acked_after, key=lambda w: w.n)]
    if ledger == want:
        return None
    listed, acked = set(ledger), set(want)
    missing = [x for x in want if x not in listed]
    extra = [x for x in ledger if x not in acked]
    parts = []
    if missing:
        parts.append(f"{len(missing)} acknowledged there are missing from it (the first: row {missing[0][0]} "
                     f"n={missing[0][1]}; the last: row {missing[-1][0]} n={missing[-1][1]})")
    if extra:
        parts.append(f"{len(extra)} in it were never acknowledged there (e.g. row {extra[0][0]} n={extra[0][1]})")
    if not parts:
        parts.append("the same writes, out of their order")
    return (f"the ledger lists {len(ledger)} writes, the old primary acknowledged {len(want)} after the cut: "
            + "; ".join(parts))


class Writer(threading.Thread):
    """The drill's writer (see the module docstring)."""

    def __init__(self, clients: dict[str, TableServiceClient], table: str, first: str) -> None:
        super().__init__(name="geo-writer", daemon=True)
        self.tables = {name: c.get_table_client(table) for name, c in clients.items()}
        self.at = first  # the cluster written to now
        self.acked: list[Write] = []
        self.unsure: set[int] = set()  # writes whose answer was lost
        self.refused = 0
        self.n = 0
        self.stop = threading.Event()
        self.paused = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.02)
                continue
            self.n += 1
            n, at = self.n, self.at
            row = f"r{n % ROWS:03d}"
            try:
                got = self.tables[at].upsert_entity({"PartitionKey": PK, "RowKey": row, "n": n})
                self.acked.append(Write(at, row, n, ticks_from_etag(got["etag"])))
            except TableError as exc:
                if exc.error_code == "InsufficientAccountPermissions":  # refused: nothing written
                    self.refused += 1
                    self.at = next(c for c in self.tables if c != at)
                else:
                    self.unsure.add(n)
                time.sleep(0.05)

    def acked_by(self, cluster: str) -> list[Write]:
        """The writes ``cluster`` acknowledged."""
        return [w for w in self.acked if w.cluster == cluster]


class Reader(threading.Thread):
    """Reads the whole partition at the secondary ``target`` (None: nowhere) and judges every read."""

    def __init__(self, clients: dict[str, TableServiceClient], table: str, writer: Writer) -> None:
        super().__init__(name="geo-reader", daemon=True)
        self.tables = {name: c.get_table_client(table) for name, c in clients.items()}
        self.writer = writer
        self.target: str | None = None
        self.lost: Callable[[Write], bool] = lambda w: False  # writes the history lost (a forced failover's ledger)
        self.reads = 0
        self.violations: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            target = self.target
            if target is None:
                continue
            try:
                got = {e["RowKey"]: int(e["n"]) for e in self.tables[target].query_entities(f"PartitionKey eq '{PK}'")}
            except TableError:
                continue  # a secondary busy at a failover's moment: no read, nothing to judge
            latest, lost = self.writer.n, self.lost
            acked, unsure = [w for w in self.writer.acked if not lost(w)], set(self.writer.unsure)
            top = self.writer.acked[-1].n if self.writer.acked else 0
            unsure.update(range(top + 1, latest + 1))  # in flight: its answer may not have been taken yet
            why = prefix_violation(got, acked, unsure)
            self.reads += 1
            if why is not None:
                self.violations.append(f"{target}: {why}")


def read_state(client: TableServiceClient, table: str) -> dict[str, int]:
    """Row -> ``n`` of the drill's partition at a cluster now (a secondary: at its cut)."""
    return {e["RowKey"]: int(e["n"]) for e in client.get_table_client(table).query_entities(f"PartitionKey eq '{PK}'")}


def summary(values: list[float]) -> dict[str, Any]:
    """p50 and max of a sample (None when empty)."""
    if not values:
        return {"p50": None, "max": None}
    s = sorted(values)
    return {"p50": round(s[len(s) // 2], 3), "max": round(s[-1], 3)}
