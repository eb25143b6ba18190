"""``rangetable backup``, the coordinator's part: a consistent set of checkpoints, and a relay that reads them out.

No path is shared between hosts: the checkpoints stay on the hosts that took them, and the ``rangetable backup``
command pulls them, chunk by chunk, over its CURVE connection to the coordinator, which relays each chunk request
to the partition server holding it over its control socket (only the coordinator's key may send control
commands). The backup ops are taken from the **admin key** alone (``curve.may("coordinator", "backup", …)``):
frontends and client keys are refused, because a backup reads every table.

1. ``backup`` (a controller job, so no split, merge, move or failover runs while it takes the checkpoints; it is
   refused with ``ServerBusy`` while a split or merge runs, or when a range has no serving primary): under the
   map's lock, the map and table list are copied and the meta store (catalog, map, ACLs, client keys,
   table settings, events) is checkpointed into ``<data-dir>/backups/coordinator-<id>``; then every range's
   primary checkpoints it (``backup_open``, all at once; the batch it holds must be committed before a byte of
   it leaves the primary, see :mod:`partition_server.backup_source`). The answer is the *plan*: every store's
   files and sizes.
2. ``backup_chunk {backup, range, file, offset}`` (``range`` "" for the meta store): one chunk of at most 1 MiB
   with its CRC-32, read here or relayed to the range's primary; relayed on a thread of its own (a second
   :class:`~coordinator.control.controller.Controller`), so chunks never wait behind a split.
3. ``backup_end {backup, ok}``: the checkpoints are deleted everywhere; ``ok`` records a ``backup`` event.
   A backup abandoned half-way is deleted after :data:`IDLE_S` without a chunk request (on the coordinator at
   its next backup op, on a partition server by its heartbeat loop).

The CLI writes the files, a SHA-256 of each into the manifest, and the manifest last (:mod:`cli.commands.backup_pull`).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from rangetable import protocol
from rangetable.errors import TableError
from rangetable.files import remove_stale
from rangetable.kernel.checkpoint import listing
from rangetable.kernel.chunks import chunk_fields

if TYPE_CHECKING:
    from coordinator.control.controller import Controller, JobReply
    from coordinator.state.cluster import Cluster
    from rangetable.messages import BackupOpenAnswer

log = logging.getLogger("rangetable.coordinator")

MANIFEST = "backup.json"
FORMAT = 2  # 2: pulled over the sockets, SHA-256 per file, one copy per range (1: written in place, sizes only)
OPS = frozenset({"backup", "backup_chunk", "backup_end"})
OPEN_TIMEOUT_S = 120.0  # one range's flush + links + its batch's commit; far more than a 64 MiB memtable needs
CHUNK_TIMEOUT_S = 30.0
CHUNK = 1 << 20  # bytes per chunk, as a rebuild's (partition_server.replication.snapshot.CHUNK)
IDLE_S = 600.0  # a backup no chunk was asked of for this long is dropped
STALE_S = 3600.0  # checkpoint directories older than this, left by a coordinator that died, are removed
DIR = "backups"


class Session:
    """One backup under way: where each store's checkpoint is."""

    def __init__(self, bid: str, path: str, ranges: dict[str, tuple[str, str, dict[str, int]]],
                 meta_files: dict[str, int]) -> None:
        self.id = bid
        self.path = path  # the meta store's checkpoint, here
        self.ranges = ranges  # range id -> (server, its checkpoint id, {file: size})
        self.meta_files = meta_files
        self.used_at = time.monotonic()
        self.bytes = 0

    @property
    def servers(self) -> set[str]:
        """The servers holding a checkpoint of this backup."""
        return {s for s, _, _ in self.ranges.values()}


class BackupSessions:
    """The backups under way on this coordinator, and the relay thread that reads their chunks."""

    def __init__(self, data_dir: str, make_relay: Callable[[], Controller]) -> None:
        self.root = os.path.join(data_dir, DIR)
        self.live: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.make_relay = make_relay
        self.relay: Controller | None = None
        remove_stale(self.root, STALE_S, time.time(), prefix="coordinator-")

    def relay_for(self) -> Controller:
        """The relay thread (started on first use)."""
        if self.relay is None:
            self.relay = self.make_relay()
            self.relay.start()
        return self.relay

    def get(self, bid: str) -> Session:
        """A live backup; ResourceNotFound when it ended or expired."""
        with self.lock:
            s = self.live.get(bid)
        if s is None:
            raise TableError("ResourceNotFound", f"no backup {bid!r} under way here (ended, or idle past "
                                                 f"{IDLE_S:.0f} s, or the coordinator restarted)")
        s.used_at = time.monotonic()
        return s

    def expired(self, now: float) -> list[Session]:
        """Remove and return the backups idle past :data:`IDLE_S`."""
        with self.lock:
            old = [s for s in self.live.values() if now - s.used_at > IDLE_S]
            for s in old:
                del self.live[s.id]
        return old

    def stop(self) -> None:
        """Stop the relay thread and drop this coordinator's checkpoints."""
        if self.relay is not None:
            self.relay.stopping = True
            if self.relay.is_alive():
                self.relay.join(timeout=5)
        with self.lock:
            for s in self.live.values():
                shutil.rmtree(s.path, ignore_errors=True)
            self.live.clear()


def refuse_busy(cl: Cluster) -> None:
    """ServerBusy while a split, merge or move is under way or a range has no serving primary (checked when the
    request arrives, and again by the job)."""
    with cl.map.lock:
        ranges = list(cl.map.pmap.ranges.values())
        busy = [f"{r['id']} is {r['state']}" for r in ranges if r["state"] != "serving"]
        busy += [f"{r['id']} has a replica move under way" for r in ranges if r.get("move")]
        busy += [f"{r['id']} has no live primary ({r['primary']} is dead)" for r in ranges
                 if r["state"] == "serving" and not cl.registry.is_alive(r["primary"])]
    if busy:
        raise TableError("ServerBusy", "a backup needs every range served by a live primary and no split, merge "
                                       f"or move under way: {'; '.join(sorted(busy)[:5])}; retry the backup")


def _close_everywhere(ctl: Controller, bid: str, servers: set[str]) -> None:
    if servers:
        ctl.call_many([(s, {"op": "backup_close", "backup": bid}) for s in sorted(servers)], timeout=10.0)


def start(cl: Cluster, ctl: Controller, sessions: BackupSessions) -> dict[str, Any]:
    """The ``backup`` job: checkpoint the meta store and every range at a committed batch; returns the plan."""
    for old in sessions.expired(time.monotonic()):
        shutil.rmtree(old.path, ignore_errors=True)
        _close_everywhere(ctl, old.id, old.servers)
    refuse_busy(cl)
    bid = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
    path = os.path.join(sessions.root, f"coordinator-{bid}")
    t0 = time.monotonic()
    try:
        with cl.map.lock:
            ranges = sorted((dict(r) for r in cl.map.pmap.ranges.values()), key=lambda r: r["id"])
            tables = sorted(cl.map.pmap.tables.values(), key=str.lower)
            version = cl.map.pmap.version
            meta = cl.map.meta_store().checkpoint(path)
    except OSError as exc:
        shutil.rmtree(path, ignore_errors=True)
        raise TableError("InternalError", f"checkpoint of the meta store into {path}: {exc}") from None
    calls: list[tuple[str, Any]] = [(r["primary"], {"op": "backup_open", "range": r["id"], "epoch": r["epoch"],
                                                  "backup": bid}) for r in ranges]
    answers = ctl.call_many(calls, timeout=OPEN_TIMEOUT_S)
    failed = [(r["id"], a) for r, a in zip(ranges, answers, strict=True) if isinstance(a, TableError)]
    if failed:
        shutil.rmtree(path, ignore_errors=True)
        _close_everywhere(ctl, bid, {r["primary"] for r in ranges})
        rid, first = failed[0]
        code = "ServerBusy" if first.error_code in ("NotPrimary", "RangeBusy", "OperationTimedOut") else first.error_code
        raise TableError(code, f"backup refused: the checkpoint of {rid} failed ({first.error_code}: {first.message})"
                               + (f", and {len(failed) - 1} more" if len(failed) > 1 else "") + "; retry the backup")
    out = []
    held: dict[str, tuple[str, str, dict[str, int]]] = {}
    for r, a in zip(ranges, answers, strict=True):
        ans = cast("BackupOpenAnswer", a)
        files: list[tuple[str, int]] = [(str(n), int(sz)) for n, sz in ans["files"]]
        held[r["id"]] = (r["primary"], ans["id"], dict(files))
        out.append({"id": r["id"], "table": r["table"], "low": r["low"], "high": r["high"], "epoch": r["epoch"],
                    "primary": r["primary"], "replicas": list(r.get("replicas") or []), "seq": ans["seq"],
                    "store_epoch": ans["store_epoch"], "files": files, "bytes": ans["bytes"], "ms": ans["ms"],
                    "last_ts": ans["last_ts"], "entities_estimate": ans["entities_estimate"]})
    # etcd's store is copied into a RocksDB store (coordinator/meta/etcd_store.py), which lists no files: list them here
    meta_list = meta["files"] if isinstance(meta.get("files"), list) else listing(path)
    meta_files = {f["name"]: int(f["size"]) for f in meta_list}
    meta_bytes = sum(meta_files.values())
    with sessions.lock:
        sessions.live[bid] = Session(bid, path, held, meta_files)
    seconds = round(time.monotonic() - t0, 3)
    log.info("backup %s: %d ranges checkpointed in %.2f s, ready to be pulled", bid, len(out), seconds)
    return {"backup": bid, "format": FORMAT, "map_version": version, "tables": tables, "replicas": cl.cfg.replicas,
            "coordinator": {"files": sorted([n, sz] for n, sz in meta_files.items()), "bytes": meta_bytes},
            "ranges": out, "chunk": CHUNK, "checkpoint_seconds": seconds,
            "bytes": meta_bytes + sum(r["bytes"] for r in out)}


def _read_local(s: Session, name: str, offset: int) -> dict[str, Any]:
    size = s.meta_files.get(name)
    if size is None or not 0 <= offset <= size:
        raise TableError("InvalidInput", f"backup {s.id}: the meta store has no file {name!r} with offset {offset}")
    with open(os.path.join(s.path, name), "rb") as fh:
        fh.seek(offset)
        data = fh.read(min(CHUNK, size - offset))
    return {**chunk_fields(data), "offset": offset}


def chunk(ctl: Controller, sessions: BackupSessions, bid: str, rid: str, name: str, offset: int) -> dict[str, Any]:
    """The ``backup_chunk`` relay job: one chunk of the meta store's checkpoint (``rid`` "") or of a range's."""
    s = sessions.get(bid)
    if not rid:
        ans = _read_local(s, name, offset)
    else:
        held = s.ranges.get(rid)
        if held is None:
            raise TableError("InvalidInput", f"backup {bid} holds no range {rid!r}")
        server, sid, files = held
        if name not in files:
            raise TableError("InvalidInput", f"backup {bid}: range {rid} has no file {name!r}")
        ans = ctl.call(server, {"op": "backup_chunk", "range": rid, "backup": bid, "id": sid, "file": name,
                                "offset": offset}, timeout=CHUNK_TIMEOUT_S)
    s.bytes += len(ans["data"])
    return ans


def end(cl: Cluster, ctl: Controller, sessions: BackupSessions, bid: str, ok: bool, stats: dict) -> dict[str, Any]:
    """The ``backup_end`` relay job: delete the backup's checkpoints everywhere; ``ok`` records the event."""
    s = sessions.get(bid)
    with sessions.lock:
        sessions.live.pop(bid, None)
    shutil.rmtree(s.path, ignore_errors=True)
    _close_everywhere(ctl, bid, s.servers)
    if ok:
        cl.events.record("backup", backup=bid, ranges=len(s.ranges), bytes=s.bytes,
                 duration_ms=round(float(stats.get("seconds", 0.0)) * 1e3, 1), to=str(stats.get("to", "")))
    log.info("backup %s %s: %d bytes relayed", bid, "complete" if ok else "abandoned", s.bytes)
    return {"backup": bid, "ok": ok, "bytes": s.bytes}


def dispatch(cl: Cluster, controller: Controller, sessions: BackupSessions, req: dict, reply: JobReply) -> None:
    """Queue a backup op: ``backup`` on the controller (after refusing a busy map at once), the chunk relay and
    the end on the relay thread."""
    op = req["op"]
    if op == "backup":
        refuse_busy(cl)
        controller.submit(start, cl, controller, sessions, reply=reply)
        return
    relay = sessions.relay_for()
    bid = protocol.field(req, "backup", str)
    if op == "backup_chunk":
        relay.submit(chunk, relay, sessions, bid, protocol.field(req, "range", str, ""), protocol.field(req, "file", str),
                     protocol.field(req, "offset", int), reply=reply)
    else:
        relay.submit(end, cl, relay, sessions, bid, bool(req.get("ok")), protocol.field(req, "stats", dict, {}), reply=reply)


