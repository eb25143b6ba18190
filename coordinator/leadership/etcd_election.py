"""Leader election through etcd (``--meta etcd://host:port[/prefix]``): the optional alternative to
the lock on the data root (:mod:`coordinator.leadership.lock_election`), with the same interface.

* **Winning term n + 1** is one etcd transaction: *if* ``<prefix>/leader`` does not exist and
  ``<prefix>/term`` still holds ``n``, put the leader's record (bound to a lease of this process)
  and ``term = n + 1``. etcd's Raft makes the transaction atomic, so two coordinators never win
  one term, and the term counter never goes back.
* **Liveness** is the lease: the leader keeps it alive every ``BEAT_S`` (the beat); a leader that
  dies or pauses stops renewing it, etcd deletes the leader key when its TTL runs out, and a
  standby wins the next term.
* **Fencing.** A leader is deposed as soon as the leader key no longer names its term (read by the beat,
  after each keep-alive), or when no keep-alive got through for a whole TTL. :meth:`EtcdLeadership.deposed`
  only reads what the beat found: the coordinator's loop asks it on every turn, and a loop waiting on etcd
  there (the client's timeout on each member, when the one it talks to is cut off) answers no heartbeat, so
  the partition servers' leases would lapse. Every write
  to the meta store in etcd (:mod:`coordinator.meta.etcd_store`) is a transaction that compares the
  term key, so a deposed leader's commit is refused by etcd itself.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from dataclasses import asdict

from coordinator.etcd.client import EtcdClient, absent, parse_url, put_op, value_is
from coordinator.leadership.lock_election import Leadership, TermRecord, parse_record
from rangetable.config import CoordinatorConfig
from rangetable.errors import TableError

META_NAME = "etcd"  # what a term record names as its meta store


def leader_key(prefix: str) -> bytes:
    """The key holding the current leader's record (bound to its lease)."""
    return f"{prefix}/leader".encode()


def term_key(prefix: str) -> bytes:
    """The key holding the last term won (a counter)."""
    return f"{prefix}/term".encode()


class EtcdLeadership:
    """One coordinator's view of an election held in etcd: standby until it wins a term."""

    def __init__(self, url: str, endpoint: str, pub: str, timeout_s: float = 0.8) -> None:
        base, self.prefix = parse_url(url)
        self.client = EtcdClient(base, timeout_s=min(1.0, timeout_s))
        self.endpoint = endpoint
        self.pub = pub
        self.ttl_s = max(1, math.ceil(timeout_s))  # etcd leases count whole seconds
        self.term = 0
        self.record: TermRecord | None = None
        self.lease = 0
        self.won_revision = 0  # etcd's revision of the transaction that won this term (warm takeover)
        self._lost = False  # the lease expired under this leader (it paused past its TTL)
        self._renewed = 0.0  # when the last successful grant or keep-alive was *sent* (monotonic)
        self._lock = threading.Lock()

    def read_latest(self) -> TermRecord | None:
        """The record of the leader holding the leader key (None while nobody leads)."""
        raw, _ = self.client.get(leader_key(self.prefix))
        return parse_record(raw) if raw else None

    def leader(self) -> TermRecord | None:
        """The leader as far as this process knows (itself when it leads)."""
        return self.record if self.term else self.read_latest()

    def poll(self, meta_hint: str | None = None) -> TermRecord | None:
        """One standby step: when nobody holds the leader key, try to win the next term."""
        try:
            if self.read_latest() is not None:
                return None
            raw, _ = self.client.get(term_key(self.prefix))
            last = int(raw) if raw else 0
            sent = time.monotonic()
            lease, _ = self.client.grant(self.ttl_s)
            rec = TermRecord(last + 1, self.endpoint, self.pub, META_NAME, os.getpid(), socket.gethostname())
            won, res = self.client.txn(
                [absent(leader_key(self.prefix)),
                 value_is(term_key(self.prefix), raw) if raw else absent(term_key(self.prefix))],
                [put_op(leader_key(self.prefix), json.dumps(asdict(rec)).encode(), lease),
                 put_op(term_key(self.prefix), str(rec.term).encode())])
        except TableError:
            return None  # etcd unreachable: stay standby
        if not won:
            return None
        self.term, self.record, self.lease, self._renewed = rec.term, rec, lease, sent
        self.won_revision = int(res.get("header", {}).get("revision", 0))
        return rec

    def beat(self) -> None:
        """Keep the lease alive, then read the leader key (the beat, from a thread of its own): a lease found
        expired, or a leader key that no longer names this term, deposes this leader for good."""
        with self._lock:
            if not self.lease or self._lost:
                return
            sent = time.monotonic()
            try:
                ttl = self.client.keepalive(self.lease)
            except TableError:
                return  # etcd unreachable: deposed() counts from the last renewal that got through
            if ttl <= 0:
                self._lost = True
                return
            self._renewed = sent
            try:
                cur = self.read_latest()
            except TableError:
                return  # read again at the next beat
            if cur is None or cur.term != self.term:
                self._lost = True

    def deposed(self) -> bool:
        """True once the beat found the leader key no longer naming this term (lease lapsed, or a later term
        won), or when no keep-alive got through for a whole TTL (etcd may have expired the lease: a leader cut
        off from etcd stops by its own clock, counted from when its last renewal was sent). Never waits on
        etcd: meta-store writes in between are fenced by etcd's transactions."""
        return self.term <= 0 or self._lost or time.monotonic() - self._renewed > self.ttl_s

    def set_meta(self, meta: str) -> None:
        """The meta store is in etcd: nothing to record."""

    def collect(self, keep: int = 3) -> None:
        """Nothing to collect: etcd keeps one leader key and one counter."""


def leadership_for(cfg: CoordinatorConfig, endpoint: str, pub: str) -> Leadership | EtcdLeadership:
    """The election ``cfg`` asks for: etcd with ``--meta etcd://...``, else the lock on the data root."""
    if cfg.meta:
        return EtcdLeadership(cfg.meta, endpoint, pub, cfg.leader_timeout_s)
    return Leadership(cfg.data_dir, endpoint, pub, cfg.leader_timeout_s)
