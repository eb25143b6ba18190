"""Rebuilding a lost replica: a checkpoint of the primary streamed file by file, then the log from its point.

A replica that was lost (its server dead past the grace, its disk gone, or its copy dropped because it
could not catch up from the primary's log) is rebuilt on another server, or on the same one come back
empty. The new replica pulls, over the replication endpoints (one way each, as every replication message):

* follower → primary ``{"op": "snap", "range", "epoch", "from"}``: the primary takes a RocksDB checkpoint
  of the range (flush + hard links, under the store's lock) into ``<data-dir>/snapshots/``, pins its
  :class:`~partition_server.store.replica_log.ReplicaLog` at the batch it had written before (so every batch after
  the checkpoint stays available) and answers ``{"op": "snap_files", "id", "files": [[name, size], …], "seq"}``;
* follower → primary ``{"op": "snap_chunk", "id", "file", "offset"}`` → ``{"op": "snap_data", "id", "file",
  "offset", "data", "crc"}``: at most :data:`CHUNK` bytes, one request outstanding at a time, paced by the
  follower (``--rebuild-mb-s``; 0: no limit), so the primary's loop reads one chunk per request and never more;
* a session the primary cannot serve (gone, another epoch) answers ``{"op": "snap_data", "error"}`` and the
  follower starts over.

The follower writes into ``<range dir>.rebuild``, checks each chunk's CRC-32 and each file's size, renames
the directory into place, opens it and becomes a plain follower at the checkpoint's position (``META_REPL``):
its hello tells the primary to send from there, out of the pinned log. The primary drops the checkpoint
and the pin once the follower acknowledges that position, or after :data:`SESSION_IDLE_S` without a request.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import ReplicaLog
from rangetable.kernel.chunks import chunk_fields, intact

log = logging.getLogger("rangetable.partition_server")

CHUNK = 1 << 20  # bytes per chunk request
ASK_RESEND_S = 3.0  # a snapshot request unanswered this long is sent again (the primary may not know us yet)
CHUNK_RESEND_S = 3.0  # a chunk request unanswered this long is sent again
SESSION_IDLE_S = 60.0
BURST_S = 0.1  # the pace may catch up this much time (the loop wakes up every few tens of ms)  # a checkpoint no follower asked a chunk of for this long is deleted


@dataclass
class Session:
    """One checkpoint the primary serves to one rebuilding follower."""

    id: str
    rid: str
    follower: str
    path: str
    files: dict[str, int]
    seq: int  # the log is pinned here: every batch after it is kept until the follower has it
    log: ReplicaLog | None  # None: a backup's checkpoint (nothing pinned)
    used_at: float = field(default_factory=time.monotonic)


class Source:
    """The primary's side: checkpoints taken for rebuilding followers, served chunk by chunk."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.sessions: dict[tuple[str, str], Session] = {}
        self.served = 0  # bytes served since the process started

    def start(self, rid: str, follower: str, store: RangeStore, rlog: ReplicaLog | None) -> dict[str, Any]:
        """Checkpoint ``store`` for ``follower`` (replacing an earlier checkpoint of it) and pin the log
        (``rlog`` None: a backup's checkpoint, no log to pin); returns the ``snap_files`` answer, with the
        checkpoint's figures under ``info``."""
        self.drop(rid, follower)
        sid = f"{rid}-{follower}-{time.time_ns()}".replace("/", "_").replace(":", "_")
        path = os.path.join(self.root, sid)
        seq = rlog.last_seq if rlog is not None else store.position()[1]
        if rlog is not None:
            rlog.pin(sid, seq)  # before the checkpoint: it holds every batch up to seq, maybe a few more
        try:
            info = store.checkpoint(path)
        except Exception:
            if rlog is not None:
                rlog.unpin(sid)
            shutil.rmtree(path, ignore_errors=True)
            raise
        files = {f["name"]: int(f["size"]) for f in info["files"]}
        self.sessions[(rid, follower)] = Session(sid, rid, follower, path, files, seq, rlog)
        log.info("snapshot %s of %s for %s: %d files, %.1f MB, from batch %d (checkpoint %.1f ms)", sid, rid,
                 follower, len(files), sum(files.values()) / 1e6, seq, info["ms"])
        return {"op": "snap_files", "range": rid, "id": sid, "seq": seq, "files": sorted(files.items()), "info": info}

    def chunk(self, rid: str, follower: str, sid: str, name: str, offset: int) -> dict[str, Any]:
        """The ``snap_data`` answer to a chunk request (an ``error`` one when the session is gone)."""
        s = self.sessions.get((rid, follower))
        if s is None or s.id != sid or name not in s.files or not 0 <= offset <= s.files[name]:
            return {"op": "snap_data", "range": rid, "id": sid, "error": "no such snapshot or file"}
        s.used_at = time.monotonic()
        with open(os.path.join(s.path, name), "rb") as fh:
            fh.seek(offset)
            data = fh.read(min(CHUNK, s.files[name] - offset))
        self.served += len(data)
        return {"op": "snap_data", "range": rid, "id": sid, "file": name, "offset": offset, **chunk_fields(data)}

    def acked(self, rid: str, follower: str, seq: int) -> None:
        """A follower acknowledged ``seq``: once that is at least its checkpoint's position, drop it."""
        s = self.sessions.get((rid, follower))
        if s is not None and seq >= s.seq:
            self.drop(rid, follower)

    def drop(self, rid: str, follower: str) -> None:
        """Delete a follower's checkpoint and unpin the log."""
        s = self.sessions.pop((rid, follower), None)
        if s is not None:
            if s.log is not None:
                s.log.unpin(s.id)
            shutil.rmtree(s.path, ignore_errors=True)

    def expire(self, now: float, primaries: set[str] | None, idle_s: float = SESSION_IDLE_S) -> None:
        """Drop checkpoints idle past ``idle_s`` or of ranges this server no longer leads (``primaries``
        None: keep those, as a backup's checkpoint stays valid after a move or split)."""
        for rid, follower in [k for k, s in self.sessions.items()
                              if now - s.used_at > idle_s or (primaries is not None and s.rid not in primaries)]:
            self.drop(rid, follower)

    def close(self) -> None:
        """Drop every checkpoint (and leftovers of an earlier run)."""
        for rid, follower in list(self.sessions):
            self.drop(rid, follower)
        shutil.rmtree(self.root, ignore_errors=True)


class Pull:
    """The follower's side: a replica being rebuilt from its primary's checkpoint."""

    def __init__(self, rid: str, record: dict, path: str, rate_bytes_s: float) -> None:
        self.rid = rid
        self.record = record
        self.path = path
        self.tmp = path.rstrip("/") + ".rebuild"
        self.rate = rate_bytes_s if rate_bytes_s > 0 else math.inf  # 0: no limit
        self.started = time.monotonic()
        self.done = False
        self.bytes = 0
        self.attempts = 0
        self._restart()

    @property
    def primary(self) -> str:
        """The server pulled from."""
        return str(self.record["primary"])

    @property
    def endpoint(self) -> str:
        """The primary's replication endpoint."""
        return str((self.record.get("peers") or {}).get(self.primary, ""))

    def _restart(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        self.attempts += 1
        self.state = "ask"
        self.sid = ""
        self.files: list[tuple[str, int]] = []
        self.idx = 0
        self.offset = 0
        self.sent_at = float("-inf")
        self.next_at = 0.0
        self.waiting = False
        self.total = 0

    def retarget(self, record: dict) -> None:
        """A new configuration: a new primary or epoch starts the pull over."""
        old = (self.record["primary"], int(self.record["epoch"]))
        self.record = record
        if (record["primary"], int(record["epoch"])) != old:
            self._restart()

    def due(self, me: str, now: float) -> dict[str, Any] | None:
        """The request to send now, if any (a snapshot request, or the next chunk when the rate allows)."""
        head = {"range": self.rid, "epoch": int(self.record["epoch"]), "from": me, "token": self.record.get("token", "")}
        if self.state == "ask":
            if now - self.sent_at < ASK_RESEND_S:
                return None
            self.sent_at = now
            return {"op": "snap", **head}
        if self.state != "pull" or (self.waiting and now - self.sent_at < CHUNK_RESEND_S) or now < self.next_at:
            return None
        self.waiting, self.sent_at = True, now
        return {"op": "snap_chunk", **head, "id": self.sid, "file": self.files[self.idx][0], "offset": self.offset}

    def on_files(self, msg: dict, now: float) -> None:
        """The primary's checkpoint: its files and sizes."""
        if self.state != "ask":
            return
        files = [(str(n), int(sz)) for n, sz in msg["files"]]
        for name, _ in files:
            if os.sep in name or name in ("", ".", ".."):
                raise ValueError(f"bad file name {name!r}")
        self.sid, self.files, self.state = str(msg["id"]), files, "pull"
        self.next_at = now  # the pace starts now (no burst saved up while asking)
        self.total = sum(sz for _, sz in files)
        self._skip_empty()

    def _skip_empty(self) -> None:
        while self.idx < len(self.files) and self.offset >= self.files[self.idx][1]:
            open(os.path.join(self.tmp, self.files[self.idx][0]), "ab").close()
            self.idx += 1
            self.offset = 0

    def on_data(self, msg: dict, now: float) -> bool:
        """One chunk (or an error: start over); True once the whole checkpoint is in place."""
        if self.state != "pull" or msg.get("id") != self.sid:
            return False
        if "error" in msg:
            log.warning("rebuild of %s from %s: %s; starting over", self.rid, self.primary, msg["error"])
            self._restart()
            return False
        name, size = self.files[self.idx]
        if msg["file"] != name or int(msg["offset"]) != self.offset:
            return False  # an answer to an earlier (resent) request
        data = intact(msg, self.offset, size)
        if data is None:
            log.warning("rebuild of %s: a bad chunk of %s at %d; starting over", self.rid, name, self.offset)
            self._restart()
            return False
        with open(os.path.join(self.tmp, name), "ab") as fh:
            fh.write(data)
        self.offset += len(data)
        self.bytes += len(data)
        self.waiting = False
        self.next_at = max(now - BURST_S, self.next_at) + len(data) / self.rate
        if self.offset == size:
            if os.path.getsize(os.path.join(self.tmp, name)) != size:
                log.warning("rebuild of %s: %s has the wrong size; starting over", self.rid, name)
                self._restart()
                return False
            self.idx += 1
            self.offset = 0
            self._skip_empty()
        if self.idx < len(self.files):
            return False
        os.replace(self.tmp, self.path)
        self.done, self.state = True, "done"
        return True

    def progress(self, now: float) -> dict[str, Any]:
        """How far the pull got, for the heartbeat and the logs."""
        secs = max(now - self.started, 1e-3)
        return {"rebuilding": True, "primary": self.primary, "bytes": self.bytes, "total": self.total,
                "mb_s": round(self.bytes / secs / 1e6, 2), "attempts": self.attempts}

    def cancel(self) -> None:
        """Give up (the range was unloaded): remove what was pulled."""
        shutil.rmtree(self.tmp, ignore_errors=True)
