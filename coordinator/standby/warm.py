"""A standby's warm copy of the leader's meta store, so that a takeover does not load cold.

A standby opens the leader's meta store as a RocksDB *secondary* instance (it tails the primary's
MANIFEST and WAL without taking its lock, so the leader is not disturbed) and, whenever the store's
sequence number moved, reads it again and applies only the keys that changed to a decoded copy of
every item and to a :class:`PartitionMap` (decoding and indexing 100,000 ranges is what made a
cold takeover slow; reading the raw bytes again is cheap).

The new leader acts only on the durable store's truth: at takeover it reads the raw items of the
store it opened (or copied, see ``meta_store.open_for_term``) and brings the warm copy to exactly
them, decoding only the keys that differ (equal sequence numbers were not enough: see
:meth:`WarmFollower.take`). A follower error makes the leader load cold as before.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import msgpack

from coordinator.map.partition_map import PartitionMap
from coordinator.meta.store import open_secondary
from rangetable.kernel.crash import fault_armed

log = logging.getLogger("rangetable.coordinator")
FOLLOW_S = 0.25  # how often a standby catches up with the leader's store
DUTY = 0.1  # at most this share of a core spent re-reading the store (100,000 ranges: ~0.1 s a read)
MAX_WAIT_S = 2.0  # the longest a standby goes without catching up


@dataclass
class WarmState:
    """The leader's meta store as of one sequence number, decoded: every item and the map."""

    meta: str  # the store directory followed, relative to the data root
    seq: int
    items: dict[bytes, Any]
    pmap: PartitionMap

    def events(self, limit: int) -> list[dict]:
        """The last ``limit`` events in key (= sequence) order."""
        keys = sorted(k for k in self.items if k.startswith(b"event/"))[-limit:] if limit > 0 else []
        return [self.items[k] for k in keys]

    def servers(self) -> dict[str, dict]:
        """The partition servers recorded in the store, by id."""
        return {k[len(b"server/"):].decode(): v for k, v in self.items.items() if k.startswith(b"server/")}

    @classmethod
    def build(cls, meta: str, seq: int, puts: dict[bytes, Any]) -> WarmState:
        """The state of a store holding exactly ``puts`` (decoded), as of ``seq``: the map built once."""
        return cls(meta, seq, puts, PartitionMap.load(sorted(puts.items())))

    def apply(self, puts: dict[bytes, Any], removed: list[bytes], meta: str, seq: int) -> None:
        """Apply decoded writes and deletes (one follower step, RocksDB or etcd), keeping the map's
        indexes (:meth:`PartitionMap.apply`); the state is then store ``meta`` as of ``seq``."""
        for k in removed:
            self.items.pop(k, None)
        self.items.update(puts)
        self.pmap.apply(puts, removed)
        self.meta, self.seq = meta, seq


def decode(raw: dict[bytes, bytes]) -> dict[bytes, Any]:
    """Meta-store values (msgpack) decoded, by key."""
    return {k: msgpack.unpackb(v, raw=False, strict_map_key=False) for k, v in raw.items()}


def diff_raw(old: dict[bytes, bytes], new: dict[bytes, bytes]) -> tuple[dict[bytes, bytes], list[bytes]]:
    """(keys added or changed with their new bytes, keys removed) from ``old`` to ``new``."""
    changed = {k: v for k, v in new.items() if old.get(k) != v}
    removed = [k for k in old if k not in new]
    return changed, removed


class WarmFollower:
    """Keeps a :class:`WarmState` of the store named by the current leader's record, from a thread."""

    def __init__(self, data_dir: str, every_s: float = FOLLOW_S) -> None:
        self.data_dir = data_dir
        self.every_s = every_s
        self.target: str | None = None  # the store the leader writes, as its record names it
        self.state: WarmState | None = None
        self.refreshes = 0  # catch-ups that found new writes (for tests and logs)
        self._db: Any = None
        self._db_meta: str | None = None
        self._sec_dir: str | None = None
        self._raw: dict[bytes, bytes] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, meta: str | None) -> None:
        """Follow the store ``meta`` from now on (the loop calls it with each record it reads)."""
        self.target = meta

    def start(self) -> None:
        """Catch up every ``every_s`` in a daemon thread until :meth:`take` or :meth:`close`."""
        self._thread = threading.Thread(target=self._run, name="warm-standby", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self.every_s
        while not self._stop.wait(wait):
            t0 = time.monotonic()
            try:
                self.refresh()
                wait = min(max(self.every_s, (time.monotonic() - t0) / DUTY), MAX_WAIT_S)
            except Exception:  # a store deleted or switched under us: start over with the next record
                log.warning("following the leader's meta store failed; starting over", exc_info=True)
                with self._lock:
                    self._reset()
                wait = MAX_WAIT_S  # no warning every 0.25 s when the store cannot be followed at all

    def refresh(self) -> WarmState | None:
        """Catch up with the target store and apply what changed; returns the warm state."""
        with self._lock:
            target = self.target
            if target != self._db_meta:
                self._reset()
                if target is None or not os.path.isdir(os.path.join(self.data_dir, target)):
                    return None
                self._sec_dir = tempfile.mkdtemp(prefix="rt-warm-")
                self._db = open_secondary(os.path.join(self.data_dir, target), self._sec_dir)
                self._db_meta = target
            if self._db is None or target is None:  # no store followed (both None together: _reset)
                return None
            self._db.try_catch_up_with_primary()
            seq = self._db.latest_sequence_number()
            if self.state is not None and self.state.seq == seq:
                return self.state
            raw = dict(self._db.items())
            if fault_armed("warm.freeze", self.data_dir):  # a test's stand-in for a secondary that misses writes
                raw = self._raw
            self._apply(target, seq, raw)
            self.refreshes += 1
            return self.state

    def _apply(self, meta: str, seq: int, raw: dict[bytes, bytes]) -> None:
        """Make the warm state exactly ``raw`` (store ``meta`` at ``seq``), decoding only what changed."""
        changed, removed = diff_raw(self._raw, raw)
        self._raw = raw
        puts = decode(changed)
        if self.state is None:
            self.state = WarmState.build(meta, seq, puts)
        else:
            self.state.apply(puts, removed, meta, seq)

    def take(self, meta: str, seq: int, truth: dict[bytes, bytes] | None = None) -> WarmState | None:
        """Stop following and hand over the warm state if it is exactly store ``meta`` at sequence
        number ``seq`` (the durable truth the new leader opened); None means load cold.

        ``truth``: the raw items of the store the new leader opened. Given, the warm state is made equal
        to them (only the keys that differ are decoded) instead of trusting equal sequence numbers: the
        replicated chaos drill found both standbys' warm maps missing a range's record written 0.2 s
        before the leader was killed (a leadership transfer at epoch 14; the warm map still had epoch
        13) while their secondary instances reported the durable store's sequence number. rocksdict's
        reads of a secondary instance are not reliable (a point read there was measured stale after a
        catch-up that reported the writer's last sequence number)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.target = meta
            state = self.refresh()
        except Exception:
            log.warning("the warm copy could not catch up; loading cold", exc_info=True)
            state = None
        with self._lock:
            if truth is not None and state is not None:
                self._apply(meta, seq, truth)
                state = self.state
            self._reset(keep_state=True)
        if state is None or state.meta != meta or state.seq != seq:
            log.info("warm copy %s differs from the durable store %s@%d: loading cold",
                     (state.meta, state.seq) if state else None, meta, seq)
            self.state = None
            return None
        self.state = None
        return state

    def close(self) -> None:
        """Stop following and release the secondary instance."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            self._reset()

    def _reset(self, keep_state: bool = False) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except Exception:
                pass
        if self._sec_dir is not None:
            shutil.rmtree(self._sec_dir, ignore_errors=True)
        self._db, self._db_meta, self._sec_dir, self._raw = None, None, None, {}
        if not keep_state:
            self.state = None
