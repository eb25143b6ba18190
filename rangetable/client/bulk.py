"""Bulk import: upsert an iterable of entities as fast as the cluster allows.

Entities are grouped by PartitionKey into entity group transactions of up to 100 operations (and
under 4 MiB), and up to ``window`` transactions are kept in flight on one socket (pipelining), so the
import is limited by the servers, not by round trips. Every transaction carries its own request id
and is re-sent with the same id after a retriable error, so nothing is applied twice. Transactions
ask for no entities back (``echo: false``): the answer, and the request record the partition server
keeps for a retry, is only their Timestamp.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import zmq

from rangetable import curve, protocol
from rangetable.errors import TableError
from rangetable.values import entity_to_typed

if TYPE_CHECKING:
    from rangetable.messages import BatchRequest, WriteKind, WriteOp

MAX_OPS = 100
MAX_BYTES = 3 * 1024 * 1024  # below the 4 MiB limit, leaving room for framing


@dataclass
class BulkResult:
    """What an import did."""

    entities: int = 0
    batches: int = 0
    retries: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Entities per second."""
        return self.entities / self.seconds if self.seconds else 0.0


Typed = tuple[str, str, dict[str, list]]  # (PartitionKey, RowKey, typed props) as entity_to_typed gives


def _batches(entities: Iterable[Mapping[str, Any]] | Iterable[Typed], mode: str,
             typed: bool = False) -> Iterable[tuple[str, list[WriteOp]]]:
    """Consecutive entities of one PartitionKey, cut at 100 operations or ~3 MiB; ``typed``: the
    entities are already ``(pk, rk, typed props)`` (the servers validate them all the same)."""
    kind: WriteKind = "insert_or_merge" if mode == "merge" else "insert_or_replace"
    rows: Iterable[Typed] = (cast("Iterable[Typed]", entities) if typed
                             else map(entity_to_typed, cast("Iterable[Mapping[str, Any]]", entities)))
    cur_pk = ""  # the PartitionKey of ``ops`` (read only while ops is not empty)
    ops: list[WriteOp] = []
    size = 0
    seen: set[str] = set()
    for pk, rk, props in rows:
        op: WriteOp = {"op": kind, "pk": pk, "rk": rk, "props": props, "if_match": None}
        est = len(protocol.pack(op))
        if ops and (pk != cur_pk or len(ops) >= MAX_OPS or size + est > MAX_BYTES or rk in seen):
            yield cur_pk, ops
            ops, size, seen = [], 0, set()
        cur_pk = pk
        ops.append(op)
        seen.add(rk)
        size += est
    if ops:
        yield cur_pk, ops


def bulk_upsert(endpoint: str, table: str, entities: Iterable[Mapping[str, Any]] | Iterable[Typed], *,
                mode: str = "replace", window: int = 16, timeout: float = 30.0, max_attempts: int = 8,
                typed: bool = False, progress: Callable[[int], None] | None = None) -> BulkResult:
    """Upsert every entity (sorted or grouped by PartitionKey works best); returns counts and time.

    ``typed``: the entities are ``(pk, rk, typed props)`` triples, saving the conversion (bulk loads
    of generated data). ``progress`` is called with the entities of every acknowledged batch.
    Raises the first non-retriable TableError (with the failing operation's index in its message).
    """
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    curve.connect(sock, endpoint)
    ids = itertools.count(1)
    inflight: dict[bytes, tuple[BatchRequest, int, float]] = {}
    res = BulkResult()
    t0 = time.monotonic()
    source = iter(_batches(entities, mode, typed))

    def send(body: BatchRequest, attempt: int) -> None:
        rid = b"%d" % next(ids)
        inflight[rid] = (body, attempt, time.monotonic())
        protocol.send_frames(sock, [rid, protocol.pack(body)])

    try:
        exhausted = False
        while True:
            while not exhausted and len(inflight) < window:
                nxt = next(source, None)
                if nxt is None:
                    exhausted = True
                    break
                send({"op": "batch", "table": table, "ops": nxt[1], "rid": uuid.uuid4().hex, "echo": False}, 1)
            if not inflight:
                break
            if not sock.poll(int(timeout * 1000)):
                raise TableError("OperationTimedOut", f"no answer within {timeout} s ({len(inflight)} in flight)")
            rid, raw = protocol.recv_frames(sock)
            entry = inflight.pop(rid, None)
            if entry is None:
                continue
            body, attempt, _ = entry
            try:
                protocol.result(raw)
            except TableError as exc:
                if exc.retriable and attempt < max_attempts:
                    res.retries += 1
                    time.sleep(min(0.05 * 2**attempt, 2.0))
                    send(body, attempt + 1)  # same request id: applied at most once
                    continue
                raise
            res.batches += 1
            res.entities += len(body["ops"])
            if progress is not None:
                progress(len(body["ops"]))
    finally:
        sock.close(0)
        res.seconds = time.monotonic() - t0
    return res
