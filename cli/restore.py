"""Restore a backup written by ``rangetable backup`` into a new data root.

SST files are immutable in RocksDB, so they are hard-linked from the backup (copied when the backup
lies on another filesystem); every other file (MANIFEST, CURRENT, OPTIONS, WAL, config) is copied,
because RocksDB and rocksdict may write those in place and the backup must stay as it was. The
restored meta store keeps the partition map, the catalog and which server owned each range, but
forgets the servers' endpoints: they belonged to the source cluster, and the new cluster's servers
register their own when they start (until then nothing is routed to an old address).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from typing import Any

from coordinator.backup import FORMAT, MANIFEST
from rangetable.checkpoint import SST_SUFFIX


class RestoreError(Exception):
    """The backup is incomplete or damaged, or the target is not an empty directory."""


def read_manifest(src: str) -> dict[str, Any]:
    """The manifest of a complete backup; raises RestoreError for a missing, torn or unknown one."""
    path = os.path.join(src, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise RestoreError(f"{src} holds no {MANIFEST}: not a backup, or an incomplete one") from None
    except (OSError, ValueError) as exc:
        raise RestoreError(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise RestoreError(f"{path} is not a backup manifest of format {FORMAT}")
    return manifest


def stores(manifest: dict[str, Any]) -> list[tuple[str, list[dict]]]:
    """Every store of a backup as (directory relative to the backup and the data root, its files)."""
    out = [("coordinator", manifest["coordinator"]["files"])]
    out += [(os.path.join("ranges", r["id"]), r["files"]) for r in manifest["ranges"]]
    return out


def missing_files(src: str, manifest: dict[str, Any]) -> list[str]:
    """Files the manifest lists that are absent from ``src`` or have another size (pure check, no writes)."""
    bad = []
    for rel, files in stores(manifest):
        for f in files:
            p = os.path.join(src, rel, f["name"])
            try:
                size = os.path.getsize(p)
            except OSError:
                bad.append(f"{p} is missing")
                continue
            if size != f["size"]:
                bad.append(f"{p} has {size} bytes, the manifest says {f['size']}")
    return bad


def _place(src: str, dst: str) -> bool:
    """Hard-link an SST file (True), or copy any other file, or an SST across filesystems (False)."""
    if src.endswith(SST_SUFFIX):
        try:
            os.link(src, dst)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
    shutil.copy2(src, dst)
    return False


def _forget_endpoints(data_dir: str) -> int:
    """Blank the source cluster's server endpoints in the restored meta store; returns how many."""
    from coordinator.meta_store import MetaStore

    meta = MetaStore(data_dir)
    try:
        servers = meta.items(b"server/")
        meta.commit({k: {**v, "endpoint": "", "pid": 0} for k, v in servers})
        return len(servers)
    finally:
        meta.close()


def restore(src: str, data_dir: str) -> dict[str, Any]:
    """Lay the backup at ``src`` out as the data root ``data_dir`` (absent or empty); returns a summary.

    Raises RestoreError before writing anything when the backup is incomplete or ``data_dir`` is in
    use; a failure while writing removes what was written.
    """
    manifest = read_manifest(src)
    bad = missing_files(src, manifest)
    if bad:
        raise RestoreError(f"the backup in {src} is damaged: " + "; ".join(bad[:5]))
    if os.path.lexists(data_dir) and (not os.path.isdir(data_dir) or os.listdir(data_dir)):
        raise RestoreError(f"{data_dir} exists and is not empty: restore needs a new data root")
    created = not os.path.lexists(data_dir)
    t0 = time.monotonic()
    linked = copied = 0
    try:
        for rel, files in stores(manifest):
            os.makedirs(os.path.join(data_dir, rel))
            for f in files:
                if _place(os.path.join(src, rel, f["name"]), os.path.join(data_dir, rel, f["name"])):
                    linked += 1
                else:
                    copied += 1
        servers = _forget_endpoints(data_dir)
    except BaseException:
        if created:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            for name in os.listdir(data_dir):
                shutil.rmtree(os.path.join(data_dir, name), ignore_errors=True)
        raise
    return {"from": src, "data_dir": data_dir, "tables": manifest["tables"], "ranges": len(manifest["ranges"]),
            "linked": linked, "copied": copied, "servers": servers,
            "backup_created": manifest["created"], "seconds": round(time.monotonic() - t0, 3)}
