"""Small files written whole: a reader sees the old content or the new, never a torn one."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any


def write_json_atomic(path: str, doc: Any, *, private: bool = False, indent: int | None = None,
                      sync: bool = False) -> None:
    """Write ``doc`` as JSON to ``path`` through ``path.tmp`` and a rename.

    ``private``: mode 0600 from the start (the file holds keys); ``sync``: fsync before the rename
    (the file must survive a crash of the host, as a backup's manifest must).
    """
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    if private:
        os.fchmod(fd, 0o600)  # an earlier .tmp may have had wider permissions
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=indent)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def remove_stale(root: str, older_than_s: float, now: float, prefix: str = "") -> None:
    """Delete the entries of ``root`` whose name starts with ``prefix`` and that were last changed more than
    ``older_than_s`` before ``now`` (leftovers of a process that died); a missing ``root`` is nothing to do."""
    try:
        names = [n for n in os.listdir(root) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            if now - os.stat(path).st_mtime > older_than_s:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass
