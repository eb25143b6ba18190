"""The coordinator's durable state in etcd (``--meta etcd://...``), with the MetaStore interface.

Keys live under ``<prefix>/meta/``, values are msgpack as in the RocksDB store. Every commit is one
etcd transaction that *compares the term key* with the term of the leader writing: a deposed
leader's commit is refused by etcd (real fencing, not only a check before and after). etcd limits a
transaction to ``--max-txn-ops`` operations (128 by default) and a request to
``--max-request-bytes`` (1.5 MiB): run etcd with room for the largest commit (registering every
server at once, deleting a table with all its ranges).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from coordinator.etcd.client import (
    COMMIT_FIRST_TRY_S,
    COMMIT_TIMEOUT_S,
    EtcdClient,
    delete_op,
    put_op,
    value_is,
)
from coordinator.leadership.etcd_election import META_NAME, EtcdLeadership, term_key
from rangetable.errors import TableError


class EtcdMetaStore:
    """Atomic, term-fenced writes of msgpack values under byte keys, kept in etcd."""

    def __init__(self, client: EtcdClient, prefix: str, term: int, guard: Callable[[], None] | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.term = term
        self.name = META_NAME
        self.guard = guard or (lambda: None)
        self._root = f"{prefix}/meta/".encode()

    def items(self, prefix: bytes = b"") -> list[tuple[bytes, Any]]:
        """Every (key, value) under a prefix, in key order (one consistent revision)."""
        kvs, _ = self.client.scan(self._root + prefix)  # pages get SCAN_TIMEOUT_S, not the election's
        n = len(self._root)
        return [(k[n:], msgpack.unpackb(v, raw=False, strict_map_key=False)) for k, v in kvs]

    def revision(self) -> int:
        """etcd's current revision (grows with every write anywhere in etcd)."""
        return self.client.get(term_key(self.prefix))[1]

    def commit(self, puts: dict[bytes, Any], deletes: Sequence[bytes] = ()) -> None:
        """Write puts and deletes as one transaction, refused unless this leader's term is current."""
        self.guard()
        ops = [delete_op(self._root + k) for k in deletes]
        ops += [put_op(self._root + k, msgpack.packb(v, use_bin_type=True)) for k, v in puts.items()]
        ok, _ = self.client.txn([value_is(term_key(self.prefix), str(self.term).encode())], ops,
                                timeout_s=COMMIT_TIMEOUT_S,  # a commit gets more than the election's timeout
                                first_try_s=COMMIT_FIRST_TRY_S)
        if not ok:
            raise TableError("NotLeader", f"etcd refused a write of term {self.term}: a later term was won")
        self.guard()

    def checkpoint(self, path: str) -> dict[str, Any]:
        """A consistent copy of the store as a RocksDB meta store at ``path`` (for backups)."""
        from coordinator.meta.store import MetaStore

        t0 = time.monotonic()
        items = self.items()
        copy = MetaStore(os.path.dirname(path), os.path.basename(path))
        try:
            copy.commit(dict(items))
        finally:
            copy.close()
        return {"ms": round((time.monotonic() - t0) * 1000, 1), "files": 0, "bytes": 0, "linked": 0, "keys": len(items)}

    def close(self) -> None:
        """Nothing to release (each request is its own HTTP call)."""


def open_etcd_for_term(leadership: EtcdLeadership, guard: Callable[[], None]) -> tuple[EtcdMetaStore, dict]:
    """The meta store a leader elected in etcd writes, as ``meta_store.open_for_term`` answers
    (nothing to copy: a paused leader's writes are refused by etcd). ``seq`` is the revision at which
    the term was won: the meta store is as of it until this leader writes (the previous leader's
    later writes are refused), so a warm copy at that revision is exact (:mod:`coordinator.etcd.watch`);
    ``revision`` is etcd's revision when the store was opened."""
    t0 = time.monotonic()
    store = EtcdMetaStore(leadership.client, leadership.prefix, leadership.term, guard)
    now = store.revision()
    return store, {"copied": None, "ms": round((time.monotonic() - t0) * 1000, 1),
                   "seq": leadership.won_revision or now, "revision": now}
