"""The commands a partition server runs on replicated ranges: seal, a follower's split, a primary's
split drain and the rebuild of a lost replica (the protocol is in :mod:`partition_server.replication.protocol`).

A mixin of :class:`partition_server.ranges.RangeSet`, which provides the attributes and methods declared
below for the type checker.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partition_server.replication.replicator import Replicator
from partition_server.served import Deferred, Served
from partition_server.split_job import SplitJob
from partition_server.store.counts import Counts
from partition_server.store.range_store import RangeStore
from partition_server.table_config import TableConfig
from rangetable.errors import TableError
from rangetable.keys import range_bounds

log = logging.getLogger("rangetable.partition_server")

DRAIN_S = 2.0  # a replicated primary being sealed or split waits this long at most for its followers


class ReplicaRanges:
    """Replicated ranges' commands, mixed into :class:`~partition_server.ranges.RangeSet`."""

    if TYPE_CHECKING:
        open: dict[str, Served]
        repl: Replicator | None
        data_dir: str
        store_kw: dict[str, Any]
        tables: TableConfig

        def _path(self, record: dict) -> str: ...
        def _served(self, rid: Any, epoch: int) -> Served: ...
        def load(self, record: dict) -> None: ...
        def unload(self, rid: str, epoch: int = -1) -> None: ...
        @staticmethod
        def _compact_later(store: RangeStore) -> None: ...

    def _replicator(self) -> Replicator:
        if self.repl is None:
            raise TableError("InvalidInput", "this partition server was started without --replication")
        return self.repl

    def _needs_rebuild(self, record: dict) -> bool:
        """True for a follower's replica to pull from its primary: the coordinator says so (a new
        replica), or it is being pulled already, or its directory is missing (its disk was lost), unless
        the range is new (``create``: every replica starts empty). An in-sync follower that lost its disk
        is rebuilt too rather than opened empty: empty, it would answer a seal (batch 0) and, the only
        in-sync replica to answer after its primary died, be promoted with none of the acknowledged
        writes; being rebuilt, it answers no seal."""
        repl = self.repl
        if "primary" not in record or repl is None or record["primary"] == repl.me:
            return False
        if record.get("rebuild") or record["id"] in repl.pulls:
            return True
        return not record.get("create") and not os.path.isdir(self._path(record))

    def _refuse_empty_primary(self, record: dict) -> None:
        """A replicated range's primary is never opened on an empty directory, except for a new range
        (``create``: the coordinator's first configuration of a new table's range). Found by the replicated
        chaos drill: a primary killed with its disk and restarted by the supervisor was sent its unchanged
        configuration (a follower's in-sync change) before the coordinator had replaced it; it created an
        empty store, served reads of nothing, acknowledged writes on top of it and reported its real
        followers lagging — 1722 acknowledged writes lost. Refused, the range is promoted elsewhere."""
        repl = self.repl
        if ("primary" not in record or repl is None or record["primary"] != repl.me or record.get("create")
                or os.path.isdir(self._path(record))):
            return
        raise TableError("NotOwner", f"no copy of range {record['id']} here (its directory is gone: a lost disk?); "
                                     "a primary is never opened empty")

    def rebuilt(self, rid: str, record: dict) -> None:
        """A replica pulled from its primary is in place: open it and follow from its position."""
        try:
            self.load({k: v for k, v in record.items() if k != "rebuild"})
        except TableError as exc:
            log.warning("opening the rebuilt replica of %s failed: %s", rid, exc)

    def seal(self, rid: str, epoch: int, path: str | None) -> dict | Deferred:
        """Refuse a replicated range's batches of epochs below ``epoch`` and say how far this replica got
        (a store on disk that is not open, after a restart, is only read). A primary stops taking requests
        and answers once its in-sync followers hold its last batch (or after :data:`DRAIN_S`)."""
        repl = self._replicator()
        p = repl.primaries.get(rid)
        served = self.open.get(rid)
        if p is not None and served is not None:
            served.state = "draining"  # RangeBusy until the coordinator's next configuration
            until = time.monotonic() + DRAIN_S
            return Deferred(lambda: p.committed >= p.outbox.seq or time.monotonic() > until,
                            lambda: repl.seal(rid, epoch))
        if rid in self.open:
            return repl.seal(rid, epoch)
        if rid in repl.pulls:
            raise TableError("NotOwner", f"the replica of range {rid} here is being rebuilt")
        if not path:
            raise TableError("NotOwner", f"range {rid} is not open here")
        try:
            store = RangeStore.open(os.path.join(self.data_dir, path), create=False, **self.store_kw)
        except Exception as exc:
            raise TableError("NotOwner", f"no copy of range {rid} here: {exc}") from None
        try:
            applied_epoch, seq = store.position()
        finally:
            store.close()
        return {"seq": seq, "epoch": applied_epoch}

    def _split_ready(self, rid: str, job: SplitJob) -> Callable[[], bool]:
        """When a split may switch over: its halves are prepared and, for a replicated primary, the parent
        takes no more writes and every in-sync follower holds its last batch (so each can split its copy
        at that batch), or :data:`DRAIN_S` passed (the switch-over then fails; the range serves again)."""
        drained_by: list[float] = []

        def ready() -> bool:
            if not job.done.is_set():
                return False
            p = self.repl.primaries.get(rid) if self.repl is not None else None
            served = self.open.get(rid)
            if p is None or served is None:
                return True
            if not drained_by:
                served.state = "draining"  # RangeBusy until the switch-over: frontends retry
                drained_by.append(time.monotonic() + DRAIN_S)
            return p.committed >= p.outbox.seq or time.monotonic() > drained_by[0]

        return ready

    def split_follower(self, rid: str, epoch: int, key: str, left: dict, right: dict, seq: int,
                       counts: list[list[int]] | None = None) -> dict:
        """Split a followed range's copy at ``key`` after its batch ``seq`` (where the primary split): two
        pending halves at that position, the parent closed (the coordinator destroys it after the commit).
        ``counts``: the halves' entities and bytes at that batch, as the primary counted them (without
        them each half is counted here)."""
        served = self._served(rid, epoch)
        f = self._replicator().following.get(rid)
        if f is None or f.applied != seq:
            raise TableError("RangeBusy", f"this replica of {rid} holds batch {f.applied if f else None}, not {seq}")
        t0 = time.monotonic()
        for rec in (left, right):
            if rec["id"] in self.open:
                self.unload(rec["id"])
        halves = None if counts is None else (Counts(*counts[0]), Counts(*counts[1]))
        served.store.split(key, self._path(left), self._path(right), compact=False, counts=halves)
        self.unload(rid)
        self.tables.inherit([rid], [left["id"], right["id"]])
        for rec in (left, right):
            lo, hi = range_bounds(rec["low"], rec["high"])
            store = RangeStore.open(self._path(rec), **self.store_kw)
            self.open[rec["id"]] = Served(dict(rec), store, "pending", lo, hi)
            self._compact_later(store)
        return {"ms": round((time.monotonic() - t0) * 1e3, 2), "seq": seq}
