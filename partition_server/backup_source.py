"""A partition server's side of ``rangetable backup``: checkpoints of the ranges it leads, read out chunk by chunk.

The backup never names a path on this host: the coordinator (a controller job) asks each range's primary for a
checkpoint (``backup_open``), then relays the ``rangetable backup`` command's chunk requests (``backup_chunk``)
over its control socket, and finally ``backup_close`` drops the checkpoints. These are control commands, so
only the coordinator's CURVE key may send them; the coordinator takes them from the admin key alone.

* ``backup_open {range, epoch, backup}``: the primary of a serving range (at ``--replicas 1``, its one copy)
  checkpoints it into ``<data-dir>/backups/`` on its loop, between two requests, with the
  :class:`~partition_server.replication.snapshot.Source` that serves rebuilding followers (flush + hard links), without a
  log pin. The checkpoint holds the store's batch ``seq`` (``META_REPL``).
* ``backup_chunk {range, backup, id, file, offset}``: at most :data:`~partition_server.replication.snapshot.CHUNK` bytes
  with their CRC-32. While this server leads the range, the loop holds the answer until every batch written so
  far is committed (every in-sync replica has it), as it holds a write's acknowledgement: no byte of a
  checkpoint leaves before the batch it holds is committed, so a backup holds committed batches only (a primary
  that lost its place first answers nothing and the backup fails). One that no longer leads the range handed it
  over at a seal or split, which waits until its followers hold its last batch. The controller thread of the
  coordinator never waits for a commit (it would hold up the in-sync changes a commit may need).
* ``backup_close {backup}``: delete every checkpoint of that backup. A backup abandoned half-way is deleted
  after :data:`IDLE_S` without a chunk request.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from partition_server.replication.snapshot import Source
from partition_server.store.range_store import RangeStore
from rangetable.errors import TableError
from rangetable.files import remove_stale

log = logging.getLogger("rangetable.partition_server")

IDLE_S = 600.0  # a backup's checkpoint no chunk was asked of for this long is deleted
STALE_S = 3600.0  # leftovers of a process that died, found at start (a shared --replicas 1 root: other servers' too)
DIR = "backups"


class BackupSource:
    """The checkpoints this server keeps for backups under way, by (range id, backup id)."""

    def __init__(self, data_dir: str) -> None:
        self.source = Source(os.path.join(data_dir, DIR))
        remove_stale(self.source.root, STALE_S, time.time())

    def open(self, rid: str, backup: str, store: RangeStore) -> dict[str, Any]:
        """Checkpoint ``store`` for backup ``backup``; returns the files, the batch it holds and its figures."""
        if not backup or os.sep in backup or backup in (".", ".."):
            raise TableError("InvalidInput", f"bad backup id {backup!r}")
        self.expire(time.monotonic())
        try:
            ans = self.source.start(rid, backup, store, None)
        except OSError as exc:
            raise TableError("InternalError", f"checkpoint of {rid} for backup {backup}: {exc}") from None
        info = ans["info"]
        epoch, seq = store.position()
        log.info("backup %s: checkpoint of %s at batch %d (epoch %d) in %.1f ms, %d files, %.1f MB", backup, rid,
                 seq, epoch, info["ms"], len(ans["files"]), info["bytes"] / 1e6)
        return {"id": ans["id"], "files": ans["files"], "seq": seq, "store_epoch": epoch, "ms": info["ms"],
                "bytes": info["bytes"], "last_ts": info["last_ts"], "entities_estimate": info["entities_estimate"]}

    def chunk(self, rid: str, backup: str, sid: str, name: str, offset: int) -> dict[str, Any]:
        """One chunk of a checkpoint file: ``{"data", "crc", "offset"}``; ResourceNotFound when it is gone."""
        ans = self.source.chunk(rid, backup, sid, name, offset)
        if "error" in ans:
            raise TableError("ResourceNotFound", f"backup {backup}: no checkpoint {sid} of {rid} with file {name!r} "
                                                 f"at offset {offset} here (closed, or idle past {IDLE_S:.0f} s)")
        return {"data": ans["data"], "crc": ans["crc"], "offset": ans["offset"]}

    def close(self, backup: str) -> int:
        """Delete every checkpoint of ``backup``; returns how many."""
        keys = [k for k in self.source.sessions if k[1] == backup]
        for rid, b in keys:
            self.source.drop(rid, b)
        return len(keys)

    def expire(self, now: float) -> None:
        """Drop checkpoints idle past :data:`IDLE_S`."""
        if self.source.sessions:
            self.source.expire(now, None, IDLE_S)

    def close_all(self) -> None:
        """Drop every checkpoint (the process stops); the directory stays (a shared root's other servers)."""
        for rid, b in list(self.source.sessions):
            self.source.drop(rid, b)
