"""Online checkpoints of a range store, for ``rangetable backup``.

A checkpoint is RocksDB's own: the memtable is flushed, then every live SST file is hard-linked into
the new directory (copied when it lies on another filesystem) and MANIFEST, CURRENT, OPTIONS and the
live WAL are copied, so the directory is a consistent RocksDB of the store as it was at one instant.
The partition server takes it between two requests on its one loop, so that instant falls between
two acknowledged writes of the range: every acknowledged write before it is in, none after it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import rocksdict

SST_SUFFIX = ".sst"


def listing(path: str) -> list[dict[str, Any]]:
    """The regular files of a directory (not recursive) as ``[{"name", "size"}]``, sorted by name."""
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            out.append({"name": name, "size": os.path.getsize(full)})
    return out


def create_checkpoint(db: rocksdict.Rdict, path: str) -> None:
    """RocksDB's checkpoint of the open ``db`` at ``path`` (hard links where it can)."""
    cp = rocksdict.Checkpoint(db)
    try:
        cp.create_checkpoint(path)
    finally:
        del cp  # a Checkpoint holds the DB: it must not outlive this call (close() needs the LOCK free)


def checkpoint_db(db: rocksdict.Rdict, path: str) -> dict[str, Any]:
    """Write a checkpoint of the open ``db`` at ``path`` (which must not exist yet).

    Returns ``{"ms", "files", "bytes", "linked"}``: how long it took, the files written, their total
    size and how many of them share their inode with the live store (hard links). Raises
    FileExistsError when ``path`` exists, and the RocksDB error otherwise.
    """
    if os.path.lexists(path):
        raise FileExistsError(f"checkpoint target {path} already exists")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    t0 = time.perf_counter()
    create_checkpoint(db, path)
    ms = round((time.perf_counter() - t0) * 1e3, 2)
    files = listing(path)
    linked = sum(1 for f in files if os.stat(os.path.join(path, f["name"])).st_nlink > 1)
    return {"ms": ms, "files": files, "bytes": sum(f["size"] for f in files), "linked": linked}
