"""``rangetable backup``, the pulling side: the checkpoints of a running cluster copied, over the coordinator's CURVE
socket, into a directory on the machine that runs the command.

1. ``{"op": "backup"}`` to the coordinator (the admin key of ``cluster.json``; no other key may): it checkpoints the
   meta store and every range at a committed batch of its primary and answers with the plan, every store's
   files and sizes (:mod:`coordinator.backup`);
2. each file, chunk by chunk (``backup_chunk``, ≤ 1 MiB, CRC-32 checked), written under ``DIR/coordinator`` and
   ``DIR/ranges/<range id>``, fsynced, its SHA-256 computed as it arrives;
3. ``DIR/backup.json``, the manifest, written last and fsynced: a directory without it is not a backup;
4. ``backup_end``: the checkpoints are deleted on every host.

A failure at any step removes what was written (the directory, or its content if it existed empty) and ends the
backup on the cluster. Nothing here reads a path of another host.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from cli.coordinator_client import call
from coordinator.backup import FORMAT, MANIFEST
from rangetable.errors import TableError
from rangetable.files import write_json_atomic
from rangetable.kernel.chunks import intact

CHUNK_TIMEOUT_S = 60.0


def prepare_dir(dest: str) -> bool:
    """Create ``dest``; it must be absent or an empty directory (InvalidInput otherwise). True when this created it."""
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise TableError("InvalidInput", f"backup directory {dest} exists and is not empty: a backup needs a new "
                                         "or empty directory")
    created = not os.path.lexists(dest)
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as exc:
        raise TableError("InvalidInput", f"cannot create {dest}: {exc}") from None
    return created


def remove(dest: str, created: bool) -> None:
    """Undo a failed backup: the directory if this created it, else what was written inside."""
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for name in os.listdir(dest) if os.path.isdir(dest) else []:
        full = os.path.join(dest, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            os.unlink(full)


def _safe_name(name: str) -> str:
    if not name or os.sep in name or name in (".", "..") or (os.altsep and os.altsep in name):
        raise TableError("InternalError", f"the cluster named a checkpoint file {name!r}: refused")
    return name


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pull_file(endpoint: str, bid: str, rid: str, name: str, size: int, path: str) -> dict[str, Any]:
    """Copy one checkpoint file chunk by chunk into ``path``; returns ``{"name", "size", "sha256"}``."""
    digest = hashlib.sha256()
    offset = 0
    with open(path, "wb") as fh:
        while offset < size:
            ans = call(endpoint, {"op": "backup_chunk", "backup": bid, "range": rid, "file": name, "offset": offset},
                       timeout=CHUNK_TIMEOUT_S)
            data = intact(ans, offset, size) if int(ans["offset"]) == offset else None
            if data is None:
                raise TableError("InternalError", f"a damaged chunk of {rid or 'the meta store'}'s {name} at offset "
                                                  f"{offset} ({len(bytes(ans['data']))} bytes, CRC mismatch or wrong "
                                                  "length)")
            fh.write(data)
            digest.update(data)
            offset += len(data)
        fh.flush()
        os.fsync(fh.fileno())
    return {"name": name, "size": size, "sha256": digest.hexdigest()}


def pull_backup(endpoint: str, dest: str, timeout: float,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Take a backup of the cluster whose coordinator is ``endpoint`` into ``dest``; returns the manifest."""
    dest = os.path.abspath(dest)
    created = prepare_dir(dest)
    t0 = time.monotonic()
    try:
        plan = call(endpoint, {"op": "backup"}, timeout=timeout)
    except BaseException:
        remove(dest, created)
        raise
    bid = str(plan["backup"])
    ok = False
    try:
        t_pull = time.monotonic()
        stores: list[tuple[str, str, list]] = [("coordinator", "", plan["coordinator"]["files"])]
        stores += [(os.path.join("ranges", _safe_name(r["id"])), r["id"], r["files"]) for r in plan["ranges"]]
        written: dict[str, list[dict[str, Any]]] = {}
        total = 0
        for rel, rid, files in stores:
            os.makedirs(os.path.join(dest, rel))
            written[rel] = []
            for name, size in files:
                path = os.path.join(dest, rel, _safe_name(str(name)))
                written[rel].append(pull_file(endpoint, bid, rid, str(name), int(size), path))
                total += int(size)
            _fsync_dir(os.path.join(dest, rel))
            if progress is not None:
                progress(f"{rid or 'meta store'}: {len(files)} files, {sum(int(s) for _, s in files)} bytes")
        pull_s = time.monotonic() - t_pull
        ranges = [{**{k: v for k, v in r.items() if k != "files"},
                   "files": written[os.path.join("ranges", r["id"])]} for r in plan["ranges"]]
        manifest = {
            "format": FORMAT,
            "backup": bid,
            "created": time.time(),
            "map_version": plan["map_version"],
            "replicas": plan["replicas"],
            "tables": plan["tables"],
            "coordinator": {"files": written["coordinator"], "bytes": plan["coordinator"]["bytes"]},
            "ranges": ranges,
            "bytes": total,
            "entities_estimate": sum(int(r["entities_estimate"]) for r in ranges),  # exact counts, under the old name
            "checkpoint_seconds": plan["checkpoint_seconds"],
            "pull_seconds": round(pull_s, 3),
            "seconds": round(time.monotonic() - t0, 3),
        }
        write_json_atomic(os.path.join(dest, MANIFEST), manifest, indent=1, sync=True)
        _fsync_dir(dest)
        ok = True
    except BaseException:
        remove(dest, created)
        raise
    finally:
        try:
            call(endpoint, {"op": "backup_end", "backup": bid, "ok": ok,
                            "stats": {"seconds": round(time.monotonic() - t0, 3), "to": dest}}, timeout=30)
        except TableError:
            pass  # the cluster drops the checkpoints itself after a while (coordinator/backup.py: IDLE_S)
    return manifest
