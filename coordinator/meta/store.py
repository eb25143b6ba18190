"""The coordinator's durable state: catalog, partition map, operation intents and events.

One RocksDB (opened through the one raw-mode helper) under ``<data-dir>/coordinator``; values are
msgpack. Every change is one synced WriteBatch, so a crash leaves either the old or the new state.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import msgpack
import rocksdict
from rocksdict import WriteBatch, WriteOptions

from rangetable.kernel.storage import open_range_db

COPY_BATCH = 4096  # keys per WriteBatch when a new leader copies the meta store


class MetaStore:
    """Atomic, synced writes of msgpack values under byte keys.

    ``guard`` (the leader's fencing check) runs before and after every write: a leader deposed
    between the two never acts on what it wrote, and the next leader read the store after the
    deposition, so it either has the write or nobody acted on it.
    """

    def __init__(self, data_dir: str, name: str = "coordinator", guard: Callable[[], None] | None = None) -> None:
        self.path = os.path.join(data_dir, name)
        self.name = name
        os.makedirs(data_dir, exist_ok=True)
        self.db = open_range_db(self.path)
        self.guard = guard or (lambda: None)
        self._wo = WriteOptions()
        self._wo.sync = True

    def items(self, prefix: bytes = b"") -> list[tuple[bytes, Any]]:
        """Every (key, value) under a prefix, in key order."""
        out: list[tuple[bytes, Any]] = []
        for k, v in self.db.items(from_key=prefix):
            key = cast(bytes, k)  # a raw-mode Rdict: keys are bytes
            if not key.startswith(prefix):
                break
            out.append((key, msgpack.unpackb(v, raw=False, strict_map_key=False)))
        return out

    def commit(self, puts: dict[bytes, Any], deletes: Sequence[bytes] = ()) -> None:
        """Write puts and deletes as one synced batch (fenced by ``guard`` on both sides)."""
        self.guard()
        wb = WriteBatch(raw_mode=True)
        for k in deletes:
            wb.delete(k)
        for k, v in puts.items():
            wb.put(k, msgpack.packb(v, use_bin_type=True))
        self.db.write(wb, self._wo)
        self.guard()

    def checkpoint(self, path: str) -> dict[str, Any]:
        """A consistent copy of the meta store at ``path`` (flush, then hard links); returns
        ``{"ms", "files", "bytes", "linked"}``. Call under the coordinator's lock."""
        from rangetable.kernel.checkpoint import checkpoint_db

        self.db.flush(True)
        return checkpoint_db(self.db, path)

    def close(self) -> None:
        """Release the directory."""
        self.db.close()


def is_lock_error(exc: BaseException) -> bool:
    """True for RocksDB's answer to opening a directory another process holds open."""
    return "lock" in str(exc).lower()


def open_secondary(path: str, secondary_dir: str) -> rocksdict.Rdict:
    """The store at ``path`` as a RocksDB secondary instance (``secondary_dir`` holds its own info
    files): it reads without taking the writer's lock and sees new writes after
    ``try_catch_up_with_primary()``."""
    return open_range_db(path, create=False, secondary=secondary_dir)


def copy_store(src_path: str, dst_path: str) -> tuple[int, int]:
    """Copy every key of the RocksDB at ``src_path`` (opened read-only: its writer may still hold
    it, paused) into a fresh store at ``dst_path``, synced; returns (keys, the source's sequence
    number: which writes the copy holds)."""
    src = open_range_db(src_path, create=False, read_only=True)
    seq = src.latest_sequence_number()
    shutil.rmtree(dst_path, ignore_errors=True)
    dst = open_range_db(dst_path)
    wo = WriteOptions()
    wo.sync = True
    n = 0
    try:
        wb = WriteBatch(raw_mode=True)
        for k, v in src.items():
            wb.put(k, v)
            n += 1
            if len(wb) >= COPY_BATCH:
                dst.write(wb, wo)
                wb = WriteBatch(raw_mode=True)
        dst.write(wb, wo)
    finally:
        src.close()
        dst.close()
    return n, seq


def open_for_term(data_dir: str, prev: str, fresh: str, guard: Callable[[], None]) -> tuple[MetaStore, dict]:
    """The meta store a new leader writes, and how it got it (``{"copied", "ms", "seq"}``: ``seq``
    is the sequence number of the store it holds, of ``prev`` when copied from it).

    The previous leader's store ``prev`` is opened read-write when its writer is gone (a crash or a
    kill releases RocksDB's lock). A paused leader still holds that lock, so its store is then
    copied, read-only, into ``fresh`` (written under ``.tmp`` and renamed, so a crash mid-copy
    leaves no half store under the real name) and the new leader writes there. Writes the paused
    leader makes later land in a store nobody reads.
    """
    t0 = time.monotonic()

    def opened(name: str, copied: int | None = None, seq: int | None = None) -> tuple[MetaStore, dict]:
        """Open the store ``name`` and say how it was obtained (copied keys, time, sequence number)."""
        store = MetaStore(data_dir, name, guard)
        seq = store.db.latest_sequence_number() if seq is None else seq
        return store, {"copied": copied, "ms": round((time.monotonic() - t0) * 1000, 1), "seq": seq}

    if prev != fresh:
        try:
            return opened(prev)
        except Exception as exc:
            if not is_lock_error(exc):
                raise
    if prev == fresh or not os.path.isdir(os.path.join(data_dir, prev)):
        return opened(fresh)
    tmp = os.path.join(data_dir, fresh + ".tmp")
    n, seq = copy_store(os.path.join(data_dir, prev), tmp)
    shutil.rmtree(os.path.join(data_dir, fresh), ignore_errors=True)
    os.rename(tmp, os.path.join(data_dir, fresh))
    return opened(fresh, n, seq)
