"""``rangetable backup``: an online copy of the whole data root, run as one controller job.

The job runs on the controller thread like a split or a move, so no other change of the map (split,
merge, move, failover, table create/delete) happens while it runs: the map the backup records is the
map every range checkpoint belongs to. Steps:

1. under the coordinator's lock: copy the map and checkpoint the meta store (catalog, map, ACLs,
   events) into ``DIR/coordinator``;
2. ask each range's owner for a checkpoint of that range into ``DIR/ranges/<id>`` (the ``checkpoint``
   control command; the range keeps serving, see :mod:`rangetable.checkpoint`);
3. write ``DIR/backup.json`` last, so a directory without it is an incomplete backup.

On any failure the directory is removed: a backup is either complete or absent. Each range is
consistent at its own instant (between two of its acknowledged writes); the instants of different
ranges lie within the job's duration, not at one cluster-wide point (see docs/operations.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import TYPE_CHECKING, Any

from rangetable.errors import TableError
from rangetable.files import write_json_atomic

if TYPE_CHECKING:
    from coordinator.interfaces import Commands, MapWriter
    from rangetable.messages import CheckpointAnswer

log = logging.getLogger("rangetable.coordinator")

MANIFEST = "backup.json"
FORMAT = 1
CHECKPOINT_TIMEOUT_S = 120.0  # one range's flush + links; far more than a 64 MiB memtable needs


def _prepare_dir(dest: str) -> bool:
    """Create ``dest``; it must be absent or an empty directory. True when this created it."""
    if not os.path.isabs(dest):
        raise TableError("InvalidInput", f"backup directory must be an absolute path: {dest!r}")
    if os.path.lexists(dest):
        if not os.path.isdir(dest) or os.listdir(dest):
            raise TableError("InvalidInput", f"backup directory {dest} exists and is not empty")
    created = not os.path.lexists(dest)
    try:
        os.makedirs(os.path.join(dest, "ranges"), exist_ok=True)
    except OSError as exc:
        raise TableError("InvalidInput", f"cannot create {dest}: {exc}") from None
    return created


def _remove(dest: str, created: bool) -> None:
    """Undo a failed backup: the directory if this job created it, else only what it wrote inside."""
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for name in os.listdir(dest) if os.path.isdir(dest) else []:
        full = os.path.join(dest, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            os.unlink(full)


def backup(co: MapWriter, ctl: Commands, dest: str) -> dict[str, Any]:
    """Write a complete backup of the cluster into ``dest``; returns the manifest."""
    created = _prepare_dir(dest)
    t0 = time.monotonic()
    try:
        with co.lock:
            ranges = sorted((dict(r) for r in co.pmap.ranges.values()), key=lambda r: r["id"])
            tables = sorted(co.pmap.tables.values(), key=str.lower)
            version = co.pmap.version
            meta = co.meta_store().checkpoint(os.path.join(dest, "coordinator"))
        busy = [r["id"] for r in ranges if r["state"] != "serving" or not co.is_alive(r["owner"])]
        if busy:
            raise TableError("ServerBusy", f"ranges without a serving owner: {', '.join(busy)}; retry the backup")
        out = []
        for r in ranges:
            path = os.path.join(dest, "ranges", r["id"])
            info: CheckpointAnswer = ctl.call(r["owner"], {"op": "checkpoint", "range": r["id"], "epoch": r["epoch"], "path": path},
                            timeout=CHECKPOINT_TIMEOUT_S)
            out.append({"id": r["id"], "table": r["table"], "low": r["low"], "high": r["high"], "epoch": r["epoch"],
                        "owner": r["owner"], "taken_at": time.time(), **info})
        manifest = {
            "format": FORMAT,
            "created": time.time(),
            "map_version": version,
            "tables": tables,
            "coordinator": meta,
            "ranges": out,
            "seconds": round(time.monotonic() - t0, 3),
            "entities_estimate": sum(r["entities_estimate"] for r in out),  # RocksDB's key estimates: rough after a split
            "bytes": meta["bytes"] + sum(r["bytes"] for r in out),
        }
        write_json_atomic(os.path.join(dest, MANIFEST), manifest, indent=1, sync=True)
    except BaseException:
        _remove(dest, created)
        raise
    co.event("backup", dir=dest, ranges=len(out), bytes=manifest["bytes"],
             duration_ms=round(manifest["seconds"] * 1e3, 1))
    log.info("backup into %s: %d ranges in %.2f s", dest, len(out), manifest["seconds"])
    return manifest
