"""The set of ranges one partition server serves, and the requests it runs against them.

A range record (from the coordinator) is ``{"id", "table", "low", "high", "epoch", "path"}``;
``high`` is None for the last range of a table. A served range is open (its RocksDB directory
locked by this process) in one of these states: ``serving``, ``pending`` — the two halves of a
split waiting for the coordinator to commit them (they answer ``RangeBusy``) —, and for a replicated
range ``following`` (a follower's copy: ``NotPrimary``, except for a read marked ``"secondary": true``,
which it serves from its copy as it is: eventually consistent) or ``draining`` (a primary being sealed:
``RangeBusy``).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from partition_server.backup_source import BackupSource
from partition_server.data_requests import ALL_WRITES, DATA_OPS, GEO_WRITES
from partition_server.metrics import RangeTotals
from partition_server.replication.replicator import Replicator
from partition_server.served import FULL_REPORT_S, LAT_SAMPLES, Deferred, Load, Served, only_changed
from partition_server.split_job import SplitJob
from partition_server.store.counts import Counts
from partition_server.store.range_store import RangeStore
from partition_server.table_config import TableConfig
from partition_server.throttle import PartitionThrottle
from rangetable.errors import TableError
from rangetable.kernel.crash import crash_point
from rangetable.kernel.stats import StepClock, percentile_ms
from rangetable.keys import range_bounds
from rangetable.messages import is_replicated

log = logging.getLogger("rangetable.partition_server")

DRAIN_S = 2.0  # a replicated primary being sealed or split waits this long at most for its followers


class RangeSet:
    """Ranges open in this process, keyed by range id; the replicated ranges' commands (seal, a follower's split,
    a primary's split drain, the rebuild of a lost replica) at the end."""

    CONTROL_OPS = frozenset({"load", "unload", "prepare", "split", "split_key", "merge", "destroy", "status",
                             "backup_open", "backup_chunk", "backup_close", "table_settings", "seal"})

    def __init__(self, data_dir: str, *, sync: bool = False, scan_budget_ms: int = 200,
                 partition_target: float = 0.0, request_window: tuple[float, int, int] = (600.0, 100_000, 64 << 20),
                 geo_writes: str = "all") -> None:
        self.data_dir = data_dir
        self.throttle = PartitionThrottle(partition_target)
        self.sync = sync
        seconds, count, nbytes = request_window  # seconds, records, bytes: see RangeStore
        self.store_kw: dict[str, Any] = {"sync": sync, "request_window_s": seconds, "request_window_max": count,
                                         "request_window_bytes": nbytes}
        self.scan_budget_s = scan_budget_ms / 1000.0
        self.open: dict[str, Served] = {}
        self.closing: dict[str, threading.Thread] = {}  # split parents closing in the background
        self.splits: dict[str, SplitJob] = {}  # splits being prepared, by parent range id
        self.notify: Callable[[], None] = lambda: None  # wakes the server's loop (a split is ready)
        self.totals = RangeTotals()  # what every open range served since it opened (Prometheus metrics)
        self.tables = TableConfig()  # the tables' TTLs and this server's shares of reserved throughput
        self.geo_epoch = -1  # the cluster's geo role as the last lease said (coordinator/map/geo_role.py) …
        self.geo_writes = geo_writes  # … and the writes it takes: "all", "source" (a secondary's appliers' only),
        # "none" (fenced: a seal only), or "unknown" (a partition server's until its first lease says)
        self.version = 0  # highest map version seen in a command
        self._last_report = time.monotonic()
        self._sent: dict[str, dict] = {}  # the last load report sent per range
        self._full_at = float("-inf")  # when every range's report was last sent
        self.repl: Replicator | None = None  # this server's replicated ranges (a cluster with --replicas > 1)
        self.backups = BackupSource(data_dir)  # checkpoints of backups under way (rangetable backup)

    def report_all_next(self) -> None:
        """Send every range's load report with the next heartbeat (a new coordinator leads)."""
        self._full_at = float("-inf")

    def _path(self, record: dict) -> str:
        return os.path.join(self.data_dir, record["path"])

    # --- control ------------------------------------------------------------------------------

    def control(self, op: str, req: dict) -> Any:
        """Run a coordinator command."""
        self.version = max(self.version, int(req.get("version", 0)))
        if op == "load":
            if self.tables.learn(req):
                self.apply_settings()
            return self.load(req["range"])
        if op == "table_settings":  # answered once every open range applies them
            if self.tables.learn(req):
                self.apply_settings()
            return None
        if op == "unload":
            return self.unload(req["range"], int(req.get("epoch", -1)))
        if op == "split":  # answered when the job is ready: see Deferred
            rid, epoch = req["range"], int(req["epoch"])
            if self.repl is not None and rid in self.repl.following:
                return self.split_follower(rid, epoch, req["key"], req["left"], req["right"], int(req["seq"]),
                                           req.get("counts"))
            job = self.split_start(rid, epoch, req["key"], req["left"], req["right"])
            return Deferred(self._split_ready(rid, job), lambda: self.split_finish(rid, epoch, req["left"], req["right"]))
        if op == "merge":
            return self.merge(req["left"], req["right"], req["out"])
        if op == "destroy":
            return self.destroy(req["range"])
        if op == "seal":
            return self.seal(req["range"], int(req["epoch"]), req.get("path"))
        if op == "prepare":
            # Flush while still serving, so the offline window of the move or split that follows
            # only has a small memtable to flush and replay.
            self._served(req["range"], int(req.get("epoch", -1))).store.flush()
            return None
        if op == "backup_open":  # rangetable backup: a consistent copy while the range keeps serving
            return self.backup_open(str(req["range"]), int(req["epoch"]), str(req["backup"]))
        if op == "backup_chunk":
            return self.backups.chunk(str(req["range"]), str(req["backup"]), str(req["id"]), str(req["file"]),
                                      int(req["offset"]))
        if op == "backup_close":
            return self.backups.close(str(req["backup"]))
        if op == "split_key":
            return self._served(req["range"], int(req.get("epoch", -1))).store.split_key()
        return self.report()

    def load(self, record: dict) -> None:
        """Open (or activate) a range at the record's epoch."""
        rid = record["id"]
        self._await_close(rid)
        cur = self.open.get(rid)
        if cur is not None:
            state = self._replicator().attach(rid, record, cur.store) if is_replicated(record) else None
            cur.reset(record)  # after attach, which refuses a stale configuration
            if state is not None:
                cur.state = state
            self.tables.apply(rid, cur)
            self._compact_later(cur.store)
            return
        if self._needs_rebuild(record):  # a new replica, or this server came back without its copy
            self._replicator().rebuild(rid, record, self._path(record))
            return
        self._refuse_empty_primary(record)
        t0 = time.monotonic()
        crash_point("ps.load.before_open", self.data_dir)
        try:
            store = RangeStore.open(self._path(record), **self.store_kw)
        except Exception as exc:  # a lock still held by a paused process, a missing disk …
            raise TableError("RangeBusy", f"cannot open range {rid}: {exc}") from None
        lo, hi = range_bounds(record["low"], record["high"])
        state = "serving"
        if is_replicated(record):
            try:
                state = self._replicator().attach(rid, record, store)
            except Exception:
                store.close()
                raise
        self.open[rid] = Served(dict(record), store, state, lo, hi)
        self.tables.apply(rid, self.open[rid])
        log.info("loaded range %s epoch %s (%s) in %.1f ms", rid, record["epoch"], state,
                 (time.monotonic() - t0) * 1e3)
        self._compact_later(store)

    def serving_stores(self) -> list[RangeStore]:
        """The stores of the ranges serving now (called from the reclaimer's thread)."""
        return [s.store for s in list(self.open.values()) if s.state == "serving"]

    def apply_settings(self) -> None:
        """Give every open range its table's current settings (after they changed)."""
        for rid, served in self.open.items():
            self.tables.apply(rid, served)

    def on_lease(self, answer: dict) -> None:
        """Take the table settings (when newer), capacity shares and geo role a lease answer carries."""
        geo = answer.get("geo")
        if isinstance(geo, dict) and type(geo.get("epoch")) is int and geo["epoch"] >= self.geo_epoch:
            writes = geo.get("writes")
            self.geo_epoch, self.geo_writes = geo["epoch"], writes if writes in ("all", "source", "none") else "none"
        if self.tables.learn(answer):
            self.apply_settings()
        if "shares" in answer:
            self.tables.set_shares(answer["shares"], self.open)

    @staticmethod
    def _compact_later(store: RangeStore) -> None:
        """Compact away the half a split dropped, in the background while the range serves
        (RocksDB compacts without the GIL; ``close()`` stops it between slices, the next open resumes it)."""
        if store.compaction_pending:
            threading.Thread(target=store.compact_pending, name="compact", daemon=True).start()

    def unload(self, rid: str, epoch: int = -1) -> None:
        """Stop serving a range and close its store (the lock is released on return); a split of it
        in preparation is given up first (its thread uses the store)."""
        job = self.splits.pop(rid, None)
        if job is not None:
            job.abort()
        served = self.open.pop(rid, None)
        self.tables.forget(rid)
        if self.repl is not None:
            self.repl.detach(rid)
        if served is not None:
            served.store.close()
            crash_point("ps.unload.after_close", self.data_dir)

    def unload_all(self) -> int:
        """Close every range (giving up splits in preparation, waiting for background closes);
        returns how many were open."""
        for job in self.splits.values():
            job.abort()
        self.splits.clear()
        n = len(self.open)
        for rid in list(self.open):
            self.unload(rid)
        for rid in list(self.closing):
            self._await_close(rid)
        return n

    def _retire(self, rid: str) -> None:
        """Stop serving ``rid`` at once and close its store on a background thread.

        For a split's parent: no one opens its directory again (the halves are new directories), so
        its close — which waits for a running compaction slice and for RocksDB's background jobs,
        up to seconds on a multi-GB range — stays out of the split's offline window and off the
        loop. ``load``, ``destroy`` and ``unload_all`` wait for it.
        """
        served = self.open.pop(rid, None)
        if served is not None:
            closer = threading.Thread(target=served.store.close, name=f"close-{rid}", daemon=True)
            closer.start()
            self.closing[rid] = closer

    def _await_close(self, rid: str) -> None:
        closer = self.closing.pop(rid, None)
        if closer is not None:
            closer.join()

    def split_start(self, rid: str, epoch: int, key: str, left: dict, right: dict) -> SplitJob:
        """Begin splitting a served range at PartitionKey ``key``: the halves are prepared on a
        background thread while the range serves (:mod:`partition_server.split_job`); the server's
        loop calls :meth:`split_finish` once the job's ``notify`` fires."""
        served = self._served(rid, epoch)
        if not (served.record["low"] < key and (served.record["high"] is None or key < served.record["high"])):
            raise TableError("InvalidInput", f"split key {key!r} is not strictly inside range {rid}")
        if rid in self.splits:
            raise TableError("RangeBusy", f"range {rid} is already being split")
        for rec in (left, right):
            if rec["id"] in self.open:
                self.unload(rec["id"])
        job = SplitJob(served.store, key, self._path(left), self._path(right), self.notify)
        self.splits[rid] = job
        return job.start()

    def split_finish(self, rid: str, epoch: int, left: dict, right: dict) -> dict:
        """Switch a prepared split over (on the loop: no write in flight): the last writes replayed,
        the parent retired, the halves pending until the coordinator loads them."""
        job = self.splits.pop(rid, None)
        served = self.open.get(rid)
        if job is None or served is None or served.store is not job.parent or served.epoch != epoch:
            if job is not None:
                job.abort()  # the range was unloaded meanwhile (lease lapse, a newer command)
            raise TableError("NotPrimary", f"range {rid} epoch {epoch} stopped being served during its split")
        p = self.repl.primaries.get(rid) if self.repl is not None else None
        if p is not None and p.committed < p.outbox.seq:
            job.abort()
            served.state = "serving"
            raise TableError("ServerBusy", f"the followers of {rid} did not catch up within {DRAIN_S} s; split later")
        halves = job.finish()
        if p is not None:  # both halves continue the parent's log from its last batch
            for half in halves:
                half.set_position(p.epoch, p.outbox.seq)
            self._replicator().detach(rid)
        crash_point("ps.split.after_split", self.data_dir)
        clock = StepClock(job.steps)
        self._retire(rid)
        self.tables.inherit([rid], [left["id"], right["id"]])
        for rec, store in zip((left, right), halves, strict=True):
            lo, hi = range_bounds(rec["low"], rec["high"])
            self.open[rec["id"]] = Served(dict(rec), store, "pending", lo, hi)
            self.tables.apply(rec["id"], self.open[rec["id"]])
        clock.step("retire")
        steps = job.steps
        offline = round(steps["switch"] + steps["retire"], 2)
        log.info("split %s at %r into %s and %s: offline %.1f ms (%s)", rid, job.split_key.decode(), left["id"],
                 right["id"], offline, ", ".join(f"{k} {v:.1f}" for k, v in steps.items()))
        return {"ms": round(sum(steps.values()), 2), "offline_ms": offline, "steps": steps,
                "seq": p.outbox.seq if p is not None else 0, "counts": [list(h.counts()) for h in halves]}

    def split(self, rid: str, epoch: int, key: str, left: dict, right: dict) -> dict:
        """Split a served range at ``key`` into two pending ranges, waiting for the preparation (for
        callers without a loop; the server uses :meth:`split_start` and :meth:`split_finish`)."""
        self.split_start(rid, epoch, key, left, right).done.wait()
        return self.split_finish(rid, epoch, left, right)

    def merge(self, left: dict, right: dict, out: dict) -> dict:
        """Merge two adjacent ranges served here into one pending range."""
        for rec in (left, right):
            self._served(rec["id"], int(rec["epoch"]))
        repl = self.repl
        replicated = repl is not None and (left["id"] in repl.primaries or left["id"] in repl.following)
        t0 = time.monotonic()
        self.unload(left["id"])
        self.unload(right["id"])
        if out["id"] in self.open:
            self.unload(out["id"])
        RangeStore.merge(self._path(left), self._path(right), self._path(out))
        self.tables.inherit([left["id"], right["id"]], [out["id"]])
        crash_point("ps.merge.after_merge", self.data_dir)
        store = RangeStore.open(self._path(out), **self.store_kw)
        if replicated:  # every replica merged the same batches: the merged range's log starts afresh
            store.set_position(int(out["epoch"]), 0)
        lo, hi = range_bounds(out["low"], out["high"])
        self.open[out["id"]] = Served(dict(out), store, "pending", lo, hi)
        self.tables.apply(out["id"], self.open[out["id"]])
        return {"ms": round((time.monotonic() - t0) * 1e3, 2)}

    def backup_open(self, rid: str, epoch: int, backup: str) -> dict:
        """Checkpoint a range this server serves as its primary (or only copy) for a backup
        (:mod:`partition_server.backup_source`; its chunks leave once the batch it holds is committed)."""
        served = self._served(rid, epoch)
        if served.state != "serving":
            code = "NotPrimary" if served.state == "following" else "ServerBusy"
            raise TableError(code, f"range {rid} is {served.state} here: a backup copies a serving primary")
        if rid in self.splits:
            raise TableError("ServerBusy", f"range {rid} is being split: retry the backup once the split is done")
        if self.repl is not None and is_replicated(served.record) and rid not in self.repl.primaries:
            raise TableError("NotPrimary", f"range {rid} is not led here")
        return self.backups.open(rid, backup, served.store)

    def destroy(self, record: dict) -> None:
        """Delete a range's directory (after the coordinator dropped it from the map); a split parent
        still closing in the background is deleted by a thread once it has closed."""
        rid, path = record["id"], self._path(record)
        self.unload(rid)
        closer = self.closing.pop(rid, None)
        if closer is None:
            shutil.rmtree(path, ignore_errors=True)
            return

        def remove_after_close() -> None:
            closer.join()
            shutil.rmtree(path, ignore_errors=True)

        remover = threading.Thread(target=remove_after_close, name=f"destroy-{rid}", daemon=True)
        remover.start()
        self.closing[rid] = remover

    # --- data ---------------------------------------------------------------------------------

    def _served(self, rid: Any, epoch: int) -> Served:
        served = self.open.get(rid)
        if served is None or (epoch >= 0 and served.epoch != epoch):
            raise TableError("NotPrimary", f"range {rid} epoch {epoch} is not served here")
        return served

    def _refuse_for_geo_role(self, op: str) -> None:
        """A write the cluster's geo role does not take (:meth:`_serving`)."""
        if self.geo_writes == "unknown":
            raise TableError("ServerBusy", "This server has not learnt the cluster's geo role yet.")
        if op in GEO_WRITES:
            raise TableError("SourceFenced", f"This cluster's geo role takes no {op} now (its appliers stopped).")
        raise TableError("InsufficientAccountPermissions", "This cluster is a secondary of another, or is failing "
                         "over to its secondary: it takes no writes.")

    def _serving(self, req: dict, pk: str | None, cost: int = 1, write: bool = False) -> Served:
        rid = req.get("range")
        served = self._served(rid, int(req.get("epoch", -2)))
        assert isinstance(rid, str)  # a key of self.open, or _served raised NotPrimary
        if served.state != "serving":
            if served.state != "following":
                served.load.busy += 1
                raise TableError("RangeBusy", f"range {served.record['id']} is {served.state}")
            if write or not req.get("secondary"):  # a follower's copy serves the -secondary endpoint's reads only
                raise TableError("NotPrimary", f"range {rid} is only followed here")
        if write and self.geo_writes not in GEO_WRITES.get(req.get("op"), ALL_WRITES):  # type: ignore[arg-type]
            self._refuse_for_geo_role(str(req.get("op")))
        if write and self.repl is not None and not self.repl.writable(rid):
            served.load.busy += 1
            raise TableError("ServerBusy", f"range {rid} has fewer in-sync replicas than --min-insync: "
                             "a write would be held by too few disks")
        if pk is not None:
            if not served.contains_pk(pk):
                raise TableError("NotPrimary", f"PartitionKey {pk!r} is outside range {served.record['id']}")
            if self.throttle.target > 0:
                try:
                    self.throttle.admit(pk, cost)
                except TableError:
                    served.load.busy += 1
                    raise
        cap = self.tables.capacity.get(rid) if self.tables.capacity else None
        if cap is not None:
            try:
                cap.admit(write, cost)
            except TableError:
                served.load.busy += 1
                raise
        return served

    def data(self, op: str, req: dict, nbytes: int = 0) -> Any:
        """Run a data request against the range it names (the handlers are in
        :mod:`partition_server.data_requests`); the one place where requests are counted as load."""
        t0 = time.perf_counter()
        kind = DATA_OPS[op]
        if kind.target is not None:  # counted before it runs: a request refused by its precondition is load too
            pk, n = kind.target(req)
            served = self._serving(req, pk, n or 1, not kind.reads)
            ld = served.load
            if kind.reads:
                ld.reads += 1
            else:
                ld.writes += 1
            ld.note(pk, n)
            result = kind.run(served, req, self.scan_budget_s)
            ld.entities += n
        else:  # a scan: counted once it ran, by the partition of its first entity
            served = self._serving(req, None)
            page = kind.run(served, req, self.scan_budget_s)
            ld = served.load
            if page.counts:
                ld.reads += 1
                if page.sampled is not None:
                    ld.note(*page.sampled)
            ld.entities += page.entities
            if page.entities > 1 and self.tables.capacity:
                cap = self.tables.capacity.get(req.get("range"))  # type: ignore[arg-type]
                if cap is not None:
                    cap.charge(False, page.entities - 1)  # admitted for one entity
            result = page.result
        dt = time.perf_counter() - t0
        ld.lat_sum += dt
        if dt > ld.lat_max:
            ld.lat_max = dt
        ld.bytes_in += nbytes
        ld.timed += 1
        if len(ld.lats) < LAT_SAMPLES:
            ld.lats.append(dt)
        else:
            ld.lats[int(random.random() * LAT_SAMPLES)] = dt
        return result

    # --- reports ------------------------------------------------------------------------------

    def report(self) -> list[list]:
        """``[[range id, epoch, state], …]`` for the heartbeat."""
        out = [[rid, s.record["epoch"], s.state] for rid, s in self.open.items()]
        if self.repl is not None:  # replicas being rebuilt count as followed (the coordinator sent them)
            out += [[rid, p.record["epoch"], "following"] for rid, p in self.repl.pulls.items()]
        return out

    def load_report(self) -> dict[str, dict]:
        """Per-range load since the last report (rates per second), then reset the counters.

        Fields that are zero (or empty) are left out, so an idle range reports only its size
        (readers take a missing field as 0)."""
        now = time.monotonic()
        dt = max(now - self._last_report, 1e-3)
        self._last_report = now
        out: dict[str, dict] = {}
        for rid, s in self.open.items():
            if s.state == "following":  # its primary reports the load; the -secondary reads it served are
                s.load = Load()  # not counted (the balancer places primaries), nor kept for a promotion
                continue
            ld = s.load
            try:
                st = s.store.stats()
            except Exception:
                st = {"entities": 0, "bytes": 0}
            out[rid] = {
                "reads_s": round(ld.reads / dt, 1),
                "writes_s": round(ld.writes / dt, 1),
                "entities_s": round(ld.entities / dt, 1),
                "busy_s": round(ld.busy / dt, 1),
                "lat_avg_ms": round(ld.lat_sum / ld.timed * 1e3, 3) if ld.timed else 0.0,
                "lat_max_ms": round(ld.lat_max * 1e3, 3),
                "lat_p99_ms": percentile_ms(ld.lats, 0.99, 3),
                "bytes_s": round(ld.bytes_in / dt, 1),
                "compacting": bool(st.get("compaction_pending", False)),
                "entities": st.get("entities", 0),
                "bytes": st.get("bytes", 0),
                "feed_records": st.get("feed_records", 0),
                "feed_bytes": st.get("feed_bytes", 0),
                "pending_compaction_bytes": st.get("pending_compaction_bytes", 0),
                "expired": s.store.expiry.reclaimed,  # entities the TTL reclaimed since the range opened
                "sample": list(ld.sample),
            }
            cap = self.tables.capacity.get(rid)
            if cap is not None:
                out[rid].update(cap.report(dt))
            self.totals.add(rid, s.record["table"], ld, out[rid])
            out[rid] = {k: v for k, v in out[rid].items() if v}
            s.load = Load()
        self.totals.retain(self.open)
        return out

    def changed_load_report(self, full_s: float = FULL_REPORT_S) -> dict[str, dict]:
        """:meth:`load_report`, keeping only ranges whose report changed since it was last sent,
        plus every range once per ``full_s`` (see :func:`only_changed`)."""
        now = time.monotonic()
        full = now - self._full_at >= full_s
        if full:
            self._full_at = now
        return only_changed(self.load_report(), self._sent, full)

    # --- replicated ranges: seal, a follower's split, a primary's split drain, rebuilds --------------------

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
        if not is_replicated(record) or repl is None or record["primary"] == repl.me:
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
        if (not is_replicated(record) or repl is None or record["primary"] != repl.me or record.get("create")
                or os.path.isdir(self._path(record))):
            return
        raise TableError("NotPrimary", f"no copy of range {record['id']} here (its directory is gone: a lost disk?); "
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
            raise TableError("NotPrimary", f"the replica of range {rid} here is being rebuilt")
        if not path:
            raise TableError("NotPrimary", f"range {rid} is not open here")
        try:
            store = RangeStore.open(os.path.join(self.data_dir, path), create=False, **self.store_kw)
        except Exception as exc:
            raise TableError("NotPrimary", f"no copy of range {rid} here: {exc}") from None
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
