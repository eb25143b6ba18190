"""Queries through a drill table's secondary index while the drill's faults go on.

:class:`IndexWatch` declares the index (on ``v``, which the workload writes) before the load starts, runs a
reader thread that asks value ranges of it — ``v ge 't3-' and v lt 't3.'``: the rows one workload thread wrote
last, or every workload value — and keeps each answer with when it ran on the history's clock; at the end it
runs the index's check (``rangetable table index check``) once the index applied every acknowledged write,
and judges the answers against the history (:func:`cli.workload.verify.index.check_queries`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from cli.commands.tables import run_index_check
from cli.coordinator_client import Connections, call
from cli.workload.verify.history import Op
from cli.workload.verify.index import IndexQuery, check_queries
from rangetable.errors import TableError

INDEX = "ByV"
PAUSE_S = 0.05  # between queries
TIMEOUT_S = 5.0


class IndexWatch(threading.Thread):
    """The drill's index: declared, queried during the faults, checked at the end."""

    def __init__(self, native: str, table: str, clock: Callable[[], float], *, seed: int = 0, threads: int = 4) -> None:
        super().__init__(daemon=True, name="index-reader")
        self.native, self.table, self.clock, self.threads = native, table, clock, threads
        self.rng = random.Random(seed)
        self.queries: list[IndexQuery] = []
        self.errors = 0
        self.stop = threading.Event()

    def declare(self, timeout: float = 30.0) -> None:
        """Declare the index on ``v`` and wait until it is ready (the table is empty: its build is short)."""
        call(self.native, {"op": "create_index", "table": self.table, "name": INDEX, "on": ["v"], "include": []})
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            defs = call(self.native, {"op": "list_indexes", "table": self.table})["indexes"]
            if any(d["name"] == INDEX and d["state"] == "ready" for d in defs):
                return
            time.sleep(0.1)
        raise TimeoutError(f"index {INDEX} of {self.table} not ready after {timeout:g} s")

    def _bounds(self) -> tuple[str, str]:
        if self.rng.random() < 0.2:
            return "t", "u"  # every value the workload writes (fresh rows hold "x")
        j = self.rng.randrange(self.threads)
        return f"t{j}-", f"t{j}."

    def query(self, conns: Connections) -> None:
        """One query through the index, every page of it."""
        lo, hi = self._bounds()
        q = IndexQuery(lo, hi, self.clock(), 0.0, {})
        token = None
        try:
            while True:
                page = call(self.native, {"op": "query", "table": self.table, "filter": q.filter, "top": 1000,
                                          "next": token}, timeout=TIMEOUT_S, conns=conns)
                plan = page.get("plan") or {}  # a fallback (the index behind or rebuilt) scans the base table
                q.through = q.through and plan.get("index") == INDEX and plan.get("fallback") is None
                for pk, rk, _, props in page["entities"]:
                    q.rows[(pk, rk)] = (props.get("v") or [None, None])[1]
                token = page.get("next")
                if token is None:
                    break
        except TableError:
            self.errors += 1  # a fault: the query is not judged
            return
        q.end = self.clock()
        self.queries.append(q)

    def run(self) -> None:
        """Query until stopped."""
        conns = Connections()
        try:
            while not self.stop.is_set():
                self.query(conns)
                self.stop.wait(PAUSE_S)
        finally:
            conns.close()

    def finish(self, last_ack_ticks: int, timeout: float = 60.0) -> dict[str, Any]:
        """Stop querying, then check the index once it applied ``last_ack_ticks`` (the check's cursor at or past
        it); the check's report (``error`` when it could not run)."""
        self.stop.set()
        self.join(timeout=TIMEOUT_S * 2)
        end = time.monotonic() + timeout
        rep: dict[str, Any] = {}
        while time.monotonic() < end:
            try:
                rep = run_index_check(self.native, self.table, INDEX, timeout_s=max(end - time.monotonic(), 1.0))
            except (TableError, TimeoutError) as exc:
                rep = {"error": str(exc)}
                time.sleep(0.5)
                continue
            if rep["cursor_ts"] >= last_ack_ticks:
                break
            time.sleep(0.2)
        return rep

    def verdict(self, history: Iterable[Op], check: dict[str, Any]) -> dict[str, Any]:
        """The index part of a drill's report (``passed`` says it all)."""
        counts, fails = check_queries(history, self.queries)
        passed = (not fails and not check.get("error") and check.get("differences") == 0
                  and counts["through"] > 0)
        return {"indexes": 1, "name": INDEX, **counts, "errors": self.errors, "check": check,
                "failures": [{"kind": f.kind, "key": list(f.key) if isinstance(f.key, tuple) else f.key,
                              "text": f.text, "window": list(f.window)} for f in fails[:50]],
                "passed": passed}
