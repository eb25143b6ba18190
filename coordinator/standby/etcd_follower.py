"""A standby's warm copy of the meta store in etcd (``--meta etcd://``), so a takeover is not a cold load.

The ZeroMQ guide's *Clone* pattern, with etcd's revision as the sequence number
(:mod:`coordinator.etcd.watch` holds the pure parts): a thread reads every key under
``<prefix>/meta/`` once at one revision R (the snapshot), then watches ``<prefix>/`` from R + 1
through the JSON gateway's streaming ``/v3/watch`` (one HTTP POST, one JSON line per message) and
applies each change to a decoded copy of every item and to a :class:`PartitionMap`, exactly as the
RocksDB follower does (:class:`coordinator.standby.warm.WarmState`).

Why a watch, not polling: a range request with ``min_mod_revision`` finds keys put since R, but never
the keys deleted (a split or merge deletes ranges, events are pruned); a watch delivers both, in order.

Failures: a stream that breaks or stays silent for ``read_timeout_s`` (etcd restarted, idle) is
opened again from the last applied revision + 1, so nothing is missed or applied twice; a watch
canceled because that revision was compacted away means the history is gone: read a new snapshot.

At takeover (:meth:`EtcdFollower.take`) the new leader passes the revision at which it won its term;
the follower hands its state over once it has applied that revision (it waits a little for the
stream to deliver it), or None (load cold).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from typing import Any

from coordinator.etcd.client import EtcdClient
from coordinator.etcd.watch import Position, after_cancel, fold, parse_watch, ready, watch_request
from coordinator.standby.warm import WarmState, decode
from rangetable.errors import TableError

log = logging.getLogger("rangetable.coordinator")
READ_TIMEOUT_S = 2.0  # a watch silent this long is opened again (an etcd gone quiet is noticed)
TAKE_WAIT_S = 2.0  # how long a new leader waits for the stream to deliver the revision it won at
RETRY_S = 0.5  # pause after a failed snapshot or watch before the next try


class EtcdFollower:
    """Keeps a :class:`WarmState` of ``<prefix>/meta/`` in etcd, from a thread (``start``)."""

    def __init__(self, base: str, prefix: str, meta_name: str = "etcd", read_timeout_s: float = READ_TIMEOUT_S) -> None:
        self.client = EtcdClient(base)  # base: one member or several, comma-separated
        self.watched = f"{prefix}/".encode()
        self.root = f"{prefix}/meta/".encode()
        self.meta_name = meta_name
        self.read_timeout_s = read_timeout_s
        self.state: WarmState | None = None
        self.pos = Position()
        self.refreshes = 0  # watch messages that changed something (for tests and logs)
        self._taken = False
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, meta: str | None) -> None:
        """Nothing to switch: the meta store in etcd is always ``<prefix>/meta/`` (RocksDB follower's interface)."""

    def start(self) -> None:
        """Follow from a daemon thread until :meth:`take` or :meth:`close`."""
        self._thread = threading.Thread(target=self._run, name="etcd-standby", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.state is None:
                    self.snapshot()
                self.watch()
            except (OSError, TableError, ValueError, KeyError) as exc:
                log.info("following etcd at %s: %s; again in %.1f s", self.client.base, exc, RETRY_S)
                self.client.current += 1  # the next member (a watch is one member's stream; snapshots fail over anyway)
                self._stop.wait(RETRY_S)

    def snapshot(self) -> None:
        """Read every meta key at one revision and make it the state (the Clone pattern's snapshot)."""
        t0 = time.monotonic()
        kvs, rev = self.client.scan(self.root)
        n = len(self.root)
        state = WarmState.build(self.meta_name, rev, decode({k[n:]: v for k, v in kvs}))
        with self._cond:
            if self._taken:
                return
            self.state = state
            self.pos = Position(rev, 0, 0, self.pos.reloads + 1, self.pos.gaps)
            self._cond.notify_all()
        log.info("standby read %d meta keys from etcd at revision %d in %.0f ms", len(kvs), rev,
                 (time.monotonic() - t0) * 1000)

    def watch(self) -> None:
        """Apply the watch stream from the applied revision + 1 until it ends, breaks or stays silent."""
        req = urllib.request.Request(f"{self.client.base}/v3/watch",
                                     data=json.dumps(watch_request(self.watched, self.pos.rev + 1)).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.read_timeout_s) as resp:
            while not self._stop.is_set():
                try:
                    line = resp.readline()
                except TimeoutError:
                    return  # silent: open it again (cheap), so a dead etcd cannot hang us
                if not line:
                    return  # etcd closed the stream (restart)
                batch = parse_watch(line)
                if batch.canceled:
                    if after_cancel(batch, self.pos) == "reload":
                        log.warning("etcd compacted past revision %d (to %d): reading a new snapshot",
                                    self.pos.rev, batch.compact_revision)
                        with self._cond:
                            self.pos.gaps.append(batch.compact_revision)
                            self.state = None
                    return
                if batch.events:
                    self._apply(batch.events)

    def _apply(self, events: Any) -> None:
        puts, removed, pos = fold(events, self.root, self.pos)
        decoded = decode(puts)
        with self._cond:
            if self._taken or self.state is None:
                return
            if puts or removed:
                self.state.apply(decoded, removed, self.meta_name, pos.rev)
                self.refreshes += 1
            self.state.seq = pos.rev
            self.pos = pos
            self._cond.notify_all()

    def take(self, meta: str, seq: int, truth: dict[bytes, bytes] | None = None) -> WarmState | None:
        """Stop following and hand over the state if it is exactly the meta store as of revision ``seq``
        (the revision at which this coordinator won its term), waiting up to TAKE_WAIT_S for the stream
        to deliver it; None means load cold. ``truth`` is not used: etcd's watch is exact."""
        deadline = time.monotonic() + TAKE_WAIT_S
        with self._cond:
            while meta == self.meta_name and not ready(self.pos, seq) and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            ok = meta == self.meta_name and self.state is not None and ready(self.pos, seq)
            state, pos = self.state, self.pos
            self._taken = True
            self.state = None
        self._stop.set()
        if not ok or state is None:
            log.info("warm copy at revision %d (meta changed at %d) is not the store at revision %d: loading cold",
                     pos.rev, pos.meta_rev, seq)
            return None
        state.seq = seq
        return state

    def close(self) -> None:
        """Stop following (the thread ends at its next message or read timeout)."""
        with self._cond:
            self._taken = True
            self.state = None
        self._stop.set()
