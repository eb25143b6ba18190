"""A verifying workload (in the spirit of toyDB's ``bank``): mixed operations whose history is checked.

Worker threads run reads, unconditional writes, conditional writes (read, then update with the ETag),
inserts, deletes and entity group transactions over a fixed set of keys, recording each operation in a
:class:`~cli.workload.verify.history.Recorder`. Every written value is unique, so an ETag match is a
value match and the history checks as a register per key. Each thread also inserts fresh entities
(keys never used before): one answered ``EntityAlreadyExists`` was applied twice — a duplicate
application of a retried request — and one answered OK must exist at the end.

At the end :meth:`Workload.verify` reads every key back and runs the acknowledged-write-loss checker
and the per-key linearizability checker.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from cli.workload.verify import check, check_ack_loss
from cli.workload.verify.explain import lin_verdict
from cli.workload.verify.history import Op, Recorder, dump_history
from rangetable.client import TableClient, TableServiceClient
from rangetable.client.models import MatchConditions, UpdateMode
from rangetable.client.retry import ExponentialRetry
from rangetable.errors import TableError
from rangetable.kernel.stats import percentile_ms
from rangetable.values import TablesDatetime

FAIL_STATUSES = frozenset({404, 409, 412})
SABOTAGE = ("rogue-write", "lost-write")
SLOW_OP_S = 3.0  # the design's bound on a range going unserved: slower operations are listed with their faults
MAX_SLOW_OPS = 200


def outcome_of(exc: TableError) -> str:
    """How an error counts in the history: definite failure, unknown, or aborted."""
    if exc.error_code == "TableNotFound":
        return "aborted"  # nothing was applied, and it says nothing about the entity
    if exc.status_code in FAIL_STATUSES:
        return "fail"
    if exc.retriable or exc.status_code >= 500:
        return "unknown"
    return "aborted"


class CountingRetry(ExponentialRetry):
    """The workload's retry policy, counting each thread's client-side retries (``local.retries``) so a
    slow operation can say how often the client itself tried again (the rest of its wait was in the frontend)."""

    def __init__(self, local: threading.local, **kw: Any) -> None:
        super().__init__(**kw)
        self._counts = local

    def delays(self) -> Iterator[float]:
        """The back-off delays, counting each one taken."""
        for pause in super().delays():
            self._counts.retries = getattr(self._counts, "retries", 0) + 1
            yield pause


@dataclass
class Stats:
    """Counters of a workload run."""

    ops: int = 0
    ok: int = 0
    fail: int = 0
    unknown: int = 0
    aborted: int = 0
    slow: int = 0  # operations that took longer than one second (retried across a failover)
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary with latency percentiles in ms."""
        lat = self.latencies
        return {"ops": self.ops, "ok": self.ok, "fail": self.fail, "unknown": self.unknown,
                "aborted": self.aborted, "slow_over_1s": self.slow, "errors": dict(self.errors),
                "latency_ms": {"p50": percentile_ms(lat, 0.5, 1), "p99": percentile_ms(lat, 0.99, 1),
                               "max": percentile_ms(lat, 1.0, 1)}}


class Workload:
    """Mixed verifying workload against one table through the native client."""

    def __init__(self, endpoint: str, table: str, *, threads: int = 6, partitions: int = 8, rows: int = 4,
                 seed: int = 0, timeout: float = 3.0, batches: bool = True,
                 endpoints: list[str] | None = None, history_dir: str | None = None,
                 rate: float | None = None) -> None:
        self.endpoint = endpoint
        self.rate = rate  # steps per second of all threads together; None: each thread as fast as answers come
        self.endpoints = list(endpoints or [endpoint])  # thread i goes through endpoints[i % len]
        self.acks: list[tuple[float, str, str]] = []  # (monotonic time, endpoint, PartitionKey) of each acked write
        self._local = threading.local()
        self.table = table
        self.threads = threads
        self.keys = [(f"p{p:02d}", f"k{r}") for p in range(partitions) for r in range(rows)]
        self.seed = seed
        self.timeout = timeout
        self.batches = batches
        self.t0 = time.monotonic()  # the history's clock: seconds since the workload was made
        self.wall0 = time.time()  # the wall clock at t0 (logs and coordinator events are stamped with it)
        self.recorder = Recorder(clock=self.clock)
        self.history_dir = history_dir
        self.stats = Stats()
        self.fresh: dict[tuple[str, str], str] = {}  # fresh key -> outcome of its insert
        self.fresh_recorder = Recorder(clock=self.clock)  # the fresh inserts, for the feed check
        self.last_ack_ticks = 0  # the highest Timestamp an acknowledged write got (the feed must pass it)
        self.duplicates: list[tuple[str, str]] = []
        self.slow_ops: list[dict[str, Any]] = []  # operations slower than SLOW_OP_S (history clock)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []

    def clock(self) -> float:
        """The history's clock: seconds since the workload was made."""
        return time.monotonic() - self.t0

    def client(self, endpoint: str | None = None) -> TableClient:
        """A client with the workload's timeout and retry policy (retries reuse request ids)."""
        svc = TableServiceClient(endpoint or self.endpoint, timeout=self.timeout,
                                 retry_policy=CountingRetry(self._local, initial=0.05, base=0.1, max_delay=1.0,
                                                            max_attempts=8))
        return svc.get_table_client(self.table)

    # --- running ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker threads."""
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), name=f"workload-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self) -> None:
        """Stop the workers and wait for their last operation."""
        self._stop.set()
        for t in self._workers:
            t.join(timeout=60)

    def _note(self, outcome: str, t0: float, err: TableError | None = None, written: str | None = None,
              what: str = "", answer: Any = None) -> None:
        now = time.monotonic()
        dt = now - t0
        with self._lock:
            for meta in answer if isinstance(answer, list) else [answer]:
                stamp = meta.get("timestamp") if isinstance(meta, dict) else None
                if isinstance(stamp, TablesDatetime):
                    self.last_ack_ticks = max(self.last_ack_ticks, stamp.ticks)
            if dt > SLOW_OP_S and len(self.slow_ops) < MAX_SLOW_OPS:
                self.slow_ops.append({"t": round(t0 - self.t0, 3), "until": round(now - self.t0, 3),
                                      "what": what, "outcome": outcome,
                                      "client_retries": getattr(self._local, "retries", 0),
                                      "error": None if err is None else f"{err.error_code}: {err}"[:300]})
            if outcome == "ok" and written is not None:
                self.acks.append((now, getattr(self._local, "endpoint", self.endpoint), written))
            s = self.stats
            s.ops += 1
            setattr(s, outcome, getattr(s, outcome) + 1)
            s.latencies.append(dt)
            if dt > 1.0:
                s.slow += 1
            if err is not None:
                s.errors[err.error_code] = s.errors.get(err.error_code, 0) + 1

    def _do(self, key: Any, kind: str, fn: Any, value: Any = None, expected: Any = None) -> tuple[str, Any]:
        op = self.recorder.invoke(key, kind, value=value, expected=expected)
        self._local.retries = 0
        t0 = time.monotonic()
        try:
            res = fn()
        except TableError as exc:
            outcome = outcome_of(exc)
            self.recorder.complete(op, outcome)
            self._note(outcome, t0, exc, what=f"{kind} {key}")
            return outcome, exc
        self.recorder.complete(op, "ok", value=res if kind == "read" else None)
        self._note("ok", t0, written=None if kind == "read" else key[0], what=f"{kind} {key}",
                   answer=None if kind == "read" else res)
        return "ok", res

    def _read(self, c: TableClient, key: tuple[str, str]) -> tuple[str, Any]:
        holder: dict[str, Any] = {}

        def get() -> Any:
            try:
                e = c.get_entity(*key)
            except TableError as exc:
                if exc.error_code == "ResourceNotFound":  # not TableNotFound: that says nothing of the entity
                    return None
                raise
            holder["etag"] = e.metadata["etag"]
            return e["v"]

        outcome, value = self._do(key, "read", get)
        return outcome, (value, holder.get("etag"))

    def _run(self, tid: int) -> None:
        rnd = random.Random(self.seed * 1000 + tid)
        self._local.endpoint = self.endpoints[tid % len(self.endpoints)]
        c = self.client(self._local.endpoint)
        gap = self.threads / self.rate if self.rate else 0.0
        due = time.monotonic() + gap * tid / self.threads  # paced threads start spread over one gap
        n = 0
        while not self._stop.is_set():
            if gap:  # an open schedule: a thread that fell behind goes on at once, without a burst to catch up
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    break
                due = max(due + gap, time.monotonic())
            n += 1
            self._step(c, rnd, tid, n)

    def _step(self, c: TableClient, rnd: random.Random, tid: int, n: int) -> None:
        """One randomly chosen operation."""
        val = f"t{tid}-{n}"
        key = rnd.choice(self.keys)
        pk, rk = key
        r = rnd.random()
        if r < 0.30:
            self._read(c, key)
        elif r < 0.50:
            self._do(key, "write", lambda: c.upsert_entity({"PartitionKey": pk, "RowKey": rk, "v": val},
                                                           mode=UpdateMode.REPLACE), value=val)
        elif r < 0.70:
            outcome, (cur, etag) = self._read(c, key)
            if outcome != "ok":
                return
            if cur is None:
                self._do(key, "insert", lambda: c.create_entity({"PartitionKey": pk, "RowKey": rk, "v": val}),
                         value=val)
            else:
                self._do(key, "cas", lambda: c.update_entity(
                    {"PartitionKey": pk, "RowKey": rk, "v": val}, mode=UpdateMode.REPLACE, etag=etag,
                    match_condition=MatchConditions.IfNotModified), value=val, expected=cur)
        elif r < 0.78:
            self._do(key, "delete", lambda: c.delete_entity(pk, rk), value=None)
        elif r < 0.88 and self.batches:
            self._batch(c, rnd, pk, val)
        else:
            self._fresh(c, tid, n)

    def _batch(self, c: TableClient, rnd: random.Random, pk: str, val: str) -> None:
        rks = sorted(rnd.sample([rk for p, rk in self.keys if p == pk], k=min(3, len(self.keys))))
        ops = [self.recorder.invoke((pk, rk), "write", value=f"{val}-{rk}") for rk in rks]
        self._local.retries = 0
        t0 = time.monotonic()
        try:
            answer = c.submit_transaction([("upsert", {"PartitionKey": pk, "RowKey": rk, "v": f"{val}-{rk}"},
                                            {"mode": UpdateMode.REPLACE}) for rk in rks])
        except TableError as exc:
            outcome = outcome_of(exc)
            for op in ops:
                self.recorder.complete(op, outcome)
            self._note(outcome, t0, exc, what=f"batch of {len(rks)} on {pk}")
            return
        for op in ops:
            self.recorder.complete(op, "ok")
        self._note("ok", t0, written=pk, what=f"batch of {len(rks)} on {pk}", answer=answer)

    def _fresh(self, c: TableClient, tid: int, n: int) -> None:
        key = (f"fresh{tid}", f"{n:08d}")
        op = self.fresh_recorder.invoke(key, "insert", value="x")
        self._local.retries = 0
        t0 = time.monotonic()
        try:
            answer = c.create_entity({"PartitionKey": key[0], "RowKey": key[1], "v": "x"})
            outcome = "ok"
            self._note("ok", t0, written=key[0], what=f"insert fresh {key}", answer=answer)
        except TableError as exc:
            outcome = outcome_of(exc)
            self._note(outcome, t0, exc, what=f"insert fresh {key}")
            if exc.error_code == "EntityAlreadyExists":
                with self._lock:
                    self.duplicates.append(key)
        self.fresh_recorder.complete(op, outcome)
        with self._lock:
            self.fresh[key] = outcome

    # --- sabotage: a FAIL on purpose, to see it explained ----------------------------------------

    def sabotage(self, kind: str) -> str:
        """Break the store behind the workload's back (the history does not see it); returns what it did.

        ``rogue-write``: write a value no recorded operation wrote to one key, as a deposed primary
        applying a stale write would (reads of it cannot be linearized). ``lost-write``: delete an
        acknowledged key, as a lost WAL would (call it after :meth:`stop`: the check finds it missing).
        """
        c = self.client()
        if kind == "rogue-write":  # on a key of its own: a recorded write, the rogue one, a recorded read
            key = (self.keys[0][0], "sabotaged")
            entity = {"PartitionKey": key[0], "RowKey": key[1]}
            self._do(key, "write", lambda: c.upsert_entity({**entity, "v": "before"}, mode=UpdateMode.REPLACE),
                     value="before")
            c.upsert_entity({**entity, "v": "rogue"}, mode=UpdateMode.REPLACE)
            self._read(c, key)
            return f"wrote v='rogue' to {key} outside the history, between a recorded write and read"
        if kind == "lost-write":
            state, _fresh = self.final_state()
            acked = {(op.key, op.value) for op in self.recorder.history() if op.is_mutation and op.outcome == "ok"}
            held = sorted(k for k, v in state.items() if (k, v) in acked)
            if not held:
                return "lost-write: no key holds an acknowledged value to lose"
            pk, rk = held[0]
            c.delete_entity(pk, rk)
            return f"deleted {(pk, rk)} (holding {state[(pk, rk)]!r}) outside the history"
        raise ValueError(f"unknown sabotage {kind!r} (rogue-write or lost-write)")

    # --- verifying ----------------------------------------------------------------------------

    def writes(self) -> list[Op]:
        """The history with the fresh inserts (numbered after it): every write the feed may carry."""
        history = self.recorder.history()
        return history + [replace(op, id=len(history) + op.id) for op in self.fresh_recorder.history()]

    def final_state(self) -> tuple[dict, set]:
        """Every register key's value and the set of fresh keys present, read back at the end."""
        c = self.client()
        state: dict = {}
        fresh: set = set()
        for e in c.list_entities():
            key = (e["PartitionKey"], e["RowKey"])
            if key[0].startswith("fresh"):
                fresh.add(key)
            else:
                state[key] = e["v"]
        return state, fresh

    def verify(self, lin_timeout_s: float = 60.0) -> dict[str, Any]:
        """Check the run: acknowledged writes not lost, no duplicate application, linearizable.

        A failed run keeps its history on disk (``history_file``; in ``history_dir``, else a new
        temporary directory) for ``rangetable verify history``; times in the verdict are seconds
        since the workload started (``t0_monotonic`` says when that was).
        """
        history = self.recorder.history()
        state, fresh = self.final_state()
        ack = check_ack_loss(history, state)
        lost_fresh = [k for k, o in self.fresh.items() if o == "ok" and k not in fresh]
        lin = check(history, timeout_s=lin_timeout_s)
        verdict: dict[str, Any] = {
            "lost_writes": len(ack.lost) + len(lost_fresh),
            "lost_detail": [x.describe() for x in ack.lost][:5] + [f"fresh insert {k} missing" for k in lost_fresh][:5],
            "duplicate_applications": len(self.duplicates),
            **lin_verdict(history, lin, detail_chars=8000),
            "history_ops": len(history),
            "slow_ops": list(self.slow_ops),
            "t0_monotonic": self.t0,
            "history_file": None,
        }
        if verdict["lost_writes"] or verdict["duplicate_applications"] or not lin.ok:
            folder = self.history_dir or tempfile.mkdtemp(prefix="rangetable-history-")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"history-{self.table}-seed{self.seed}.jsonl")
            dump_history(history, path)
            verdict["history_file"] = path
        return verdict

