"""Replica sets: where a range's replicas go and who becomes primary. Pure functions over plain data,
unit-tested in ``tests/unit/test_replica_sets.py``; the jobs that act on them are in
:mod:`coordinator.replica_ops`.

A replicated range's map record carries, besides ``owner`` (its primary) and ``epoch``:

* ``replicas``: the servers holding a copy, primary included, N of them when N servers are alive;
* ``insync``: the replicas every acknowledged write has reached (primary included). Only the
  coordinator changes it; the primary acknowledges a write once every member holds it, so any member
  can take over without losing one (Vertical Paxos II; Kafka's ISR).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable


def is_replicated(rec: dict) -> bool:
    """True for a range kept as a replica set (a cluster started with ``--replicas`` > 1)."""
    return "replicas" in rec


def config_token(secret: bytes, rid: str, epoch: int) -> str:
    """The token of range ``rid``'s configuration at ``epoch``: every replication message between its
    replicas carries it, so a peer holding the (shared) partition-server key but not told the configuration
    by the coordinator cannot pass for the primary or a follower. Derived from the coordinator's secret key,
    so every coordinator (and every call) gives the same token for one configuration."""
    return hmac.new(secret, f"repl/{rid}/{epoch}".encode(), hashlib.sha256).hexdigest()[:32]


def choose_replicas(n: int, counts: dict[str, int], zones: dict[str, str] | None = None,
                    keep: list[str] | None = None) -> list[str]:
    """Up to ``n`` distinct servers for a range: ``keep`` first (the replicas it has), then the live servers
    holding the fewest replicas (``counts``; ties: the smaller id), preferring zones not used yet when the
    servers carry zone labels (``zones``: server → zone; a server without one is a zone of its own)."""
    zones = zones or {}
    chosen = [s for s in (keep or []) if s in counts][:n]
    used = {zones.get(s, s) for s in chosen}
    rest = sorted((s for s in counts if s not in chosen), key=lambda s: (counts[s], s))
    for s in rest:  # distinct zones first …
        if len(chosen) >= n:
            break
        if zones.get(s, s) not in used:
            chosen.append(s)
            used.add(zones.get(s, s))
    for s in rest:  # … then any server, when there are fewer zones than replicas
        if len(chosen) >= n:
            break
        if s not in chosen:
            chosen.append(s)
    return chosen


def promotion(rec: dict, positions: dict[str, int], prefer: str | None = None) -> str | None:
    """The replica to promote: of the in-sync replicas that answered the seal (``positions``: server →
    the last batch it holds), the one that got furthest; on a tie ``prefer`` (a transfer's target), then the
    current primary, then the smaller id. None when no in-sync replica answered (the range waits: an
    out-of-sync copy may lack acknowledged writes, so it is never promoted)."""
    candidates = [s for s in rec.get("insync", []) if s in positions]
    if not candidates:
        return None
    return min(candidates, key=lambda s: (-positions[s], s != prefer, s != rec["owner"], s))


def next_epoch(epoch: int, answered: Iterable[int]) -> int:
    """The epoch of a new configuration: past the recorded ``epoch`` and past every epoch a replica said it
    had adopted when sealed (``answered``). They differ only when the map lost a change (a coordinator
    taking over from a store without the last write): reusing an epoch a primary already holds would make
    two configurations of one epoch."""
    return max([epoch, *answered]) + 1


def after_promotion(rec: dict, primary: str, positions: dict[str, int], committed: int = -1) -> dict:
    """The replica set once ``primary`` leads: the replicas that answered the seal stay (the others may
    hold batches the new primary never had, so they are dropped and rebuilt); the in-sync set is what
    was in sync, answered, and holds at least the old primary's last reported commit point ``committed``
    (a replica below it lost committed batches — a wiped disk, a lost WAL tail — and rejoins once caught up)."""
    replicas = [primary] + [s for s in rec["replicas"] if s != primary and s in positions]
    insync = [s for s in replicas
              if s == primary or (s in rec.get("insync", []) and positions[s] >= committed)]
    return {"owner": primary, "replicas": replicas, "insync": insync}


def without(rec: dict, server: str) -> dict:
    """The replica set after losing a follower (dead, or its copy is unusable)."""
    return {"replicas": [s for s in rec["replicas"] if s != server],
            "insync": [s for s in rec.get("insync", []) if s != server]}


def insync_change(rec: dict, lagging: list[str], joining: list[str]) -> list[str] | None:
    """The new in-sync set given the primary's report, or None when it does not change: lagging
    followers leave it, caught-up replicas join it; the primary always stays."""
    cur = rec.get("insync", [])
    new = [s for s in cur if s not in lagging or s == rec["owner"]]
    for s in joining:
        if s in rec["replicas"] and s not in new and s not in lagging:
            new.append(s)
    return new if new != cur else None


def repair(rec: dict, n: int, missing_s: dict[str, float], grace_s: float, counts: dict[str, int],
           zones: dict[str, str] | None = None) -> dict | None:
    """The replica set of an under-replicated range after re-replication, or None when nothing is to do.

    ``missing_s``: server → seconds since it was last heard of, for the replicas on servers not alive;
    ``counts``: the live servers (with a replication endpoint) and how many replicas each holds. A follower
    missing for ``grace_s`` or longer counts as lost: it is dropped, and so it can come back in time from
    a restart or a pause with its disk, it is kept until then. New replicas (live servers not holding a
    copy, fewest replicas first, distinct zones first) fill the set up to ``n``; they join the in-sync set
    only once caught up. A range whose primary is gone is left to the failover. The result has
    ``replicas``, ``insync`` and ``added`` (the servers to rebuild a copy on)."""
    if rec["owner"] in missing_s or rec["owner"] not in counts:
        return None
    lost = [s for s in rec["replicas"] if s != rec["owner"] and missing_s.get(s, 0.0) >= grace_s]
    keep = [s for s in rec["replicas"] if s not in lost]
    if len(keep) >= n and not lost:
        return None
    pool = {**counts, **dict.fromkeys((s for s in keep if s not in counts), 0)}  # waiting ones keep their place
    chosen = choose_replicas(n, pool, zones, keep=keep)
    added = [s for s in chosen if s not in keep]
    if not added and not lost:
        return None
    return {"replicas": keep + added, "insync": [s for s in rec.get("insync", []) if s in keep], "added": added}
