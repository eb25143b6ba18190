"""Replica sets: where a range's replicas go and who becomes primary. Pure functions over plain data,
unit-tested in ``tests/unit/test_replica_sets.py``; the jobs that act on them are in
:mod:`coordinator.control.replica_ops`.

A replicated range's map record carries, besides ``primary`` (its primary) and ``epoch``:

* ``replicas``: the servers holding a copy, primary included, N of them when N servers are alive;
* ``insync``: the replicas every acknowledged write has reached (primary included). Only the
  coordinator changes it; the primary acknowledges a write once every member holds it, so any member
  can take over without losing one (Vertical Paxos II; Kafka's ISR).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from rangetable.errors import TableError
from rangetable.messages import is_replicated


def health(rec: Mapping[str, Any], live: set[str] | frozenset[str], want: int) -> dict[str, Any]:
    """A replicated range's health: the one definition that the coordinator's status and metrics, ``rangetable
    ranges`` and ``status``, the dashboard and the drills render (``live``: the servers alive; ``want``: the
    replicas each range should have, ``--replicas``).

    * ``copies``: in-sync replicas / replicas (``3/3``), as every view prints it;
    * ``out_of_sync``: replicas outside the in-sync set (lagging, or being rebuilt);
    * ``on_dead``: replicas on servers that are not alive;
    * ``in_sync_live``: the in-sync replicas on live servers, the copies a write is safe on now;
    * ``under_replicated``: fewer than ``want`` replicas, or one on a server not alive: what re-replication
      (:func:`repair`) restores once the server has been missing for its grace;
    * ``full_strength``: serving, with ``want`` in-sync replicas on live servers: what a drill waits to see again.
    """
    replicas = list(rec["replicas"])
    insync = set(rec.get("insync") or [])
    in_sync_live = [s for s in replicas if s in insync and s in live]
    on_dead = [s for s in replicas if s not in live]
    return {"copies": f"{len(insync.intersection(replicas))}/{len(replicas)}",
            "out_of_sync": [s for s in replicas if s not in insync], "on_dead": on_dead,
            "in_sync_live": in_sync_live, "under_replicated": len(replicas) < want or bool(on_dead),
            "full_strength": rec.get("state", "serving") == "serving" and len(in_sync_live) >= want}


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
    return min(candidates, key=lambda s: (-positions[s], s != prefer, s != rec["primary"], s))


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
    return {"primary": primary, "replicas": replicas, "insync": insync}


def without(rec: dict, server: str) -> dict:
    """The replica set after losing a follower (dead, or its copy is unusable)."""
    return {"replicas": [s for s in rec["replicas"] if s != server],
            "insync": [s for s in rec.get("insync", []) if s != server]}


def insync_change(rec: dict, lagging: list[str], joining: list[str], dead: Collection[str] = ()) -> list[str] | None:
    """The new in-sync set given the primary's report, or None when it does not change: lagging
    followers leave it, caught-up replicas join it unless ``dead`` (servers declared dead: a report of one as
    caught up is older than its death, and every write would wait for it until it is reported lagging again, as
    the netsplit drill found); the primary always stays."""
    cur = rec.get("insync", [])
    new = [s for s in cur if s not in lagging or s == rec["primary"]]
    for s in joining:
        if s in rec["replicas"] and s not in new and s not in lagging and s not in dead:
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
    if rec["primary"] in missing_s or rec["primary"] not in counts:
        return None
    lost = [s for s in rec["replicas"] if s != rec["primary"] and missing_s.get(s, 0.0) >= grace_s]
    keep = [s for s in rec["replicas"] if s not in lost]
    if len(keep) >= n and not lost:
        return None
    pool = {**counts, **dict.fromkeys((s for s in keep if s not in counts), 0)}  # waiting ones keep their place
    chosen = choose_replicas(n, pool, zones, keep=keep)
    added = [s for s in chosen if s not in keep]
    if not added and not lost:
        return None
    return {"replicas": keep + added, "insync": [s for s in rec.get("insync", []) if s in keep], "added": added}


# --- replica moves (balancing data: add a replica, let it catch up, remove the old one) -----------------

def check_move(rec: dict, source: str, target: str, live: set[str], zones: dict[str, str] | None = None) -> None:
    """Raise a TableError (Azure's codes) unless replica ``source`` of range ``rec`` may move to ``target``:
    the range is replicated, serving and not already moving a replica; ``source`` holds a copy; ``target`` is
    a live server with a replication endpoint (``live``) that holds none; and when servers carry zones,
    ``target`` is in no zone another remaining replica is in (a server without one is a zone of its own)."""
    if not is_replicated(rec):
        raise TableError("InvalidInput", f"range {rec['id']} has one copy (replicas 1): move it with `rangetable move`")
    if rec.get("move"):
        m = rec["move"]
        raise TableError("ServerBusy", f"range {rec['id']} is already moving a replica ({m['source']} -> {m['target']})")
    if rec.get("state", "serving") != "serving":
        raise TableError("ServerBusy", f"range {rec['id']} is {rec['state']}")
    if source not in rec["replicas"]:
        raise TableError("InvalidInput", f"{source} holds no replica of {rec['id']} "
                         f"(its replicas: {', '.join(rec['replicas'])})")
    if target in rec["replicas"]:
        raise TableError("InvalidInput", f"{target} already holds a replica of {rec['id']}")
    if target not in live:
        raise TableError("ResourceNotFound", f"partition server {target} is not a live replication server")
    zones = zones or {}
    clash = zone_clash(rec, source, target, zones)
    if clash:
        raise TableError("InvalidInput", f"{target} is in zone {zones.get(target, target)!r} like {', '.join(clash)}, "
                         f"another replica of {rec['id']}: replicas of a range go to distinct zones")


def zone_clash(rec: Mapping[str, Any], source: str, target: str, zones: dict[str, str]) -> list[str]:
    """The replicas of ``rec`` other than ``source`` in ``target``'s zone (``zones``: server -> zone; a server
    without one is a zone of its own): where a replica moving from ``source`` to ``target`` may not go."""
    zone = zones.get(target, target)
    return [s for s in rec["replicas"] if s != source and zones.get(s, s) == zone]


def move_step(rec: dict, alive: set[str], now: float, min_insync: int) -> str:
    """What a range's replica move (``rec["move"]``: source, target, deadline) does next: ``"wait"`` (the
    target is still catching up), ``"finish"`` (the target is in sync: drop the source), ``"abandon"`` (the
    target died, or missed the deadline: drop the target, keep the source), or ``"done"`` (the move is moot:
    the target was dropped by something else, or the source is gone already; only the intent is cleared).

    The source is dropped only when the in-sync set keeps at least ``min_insync`` members without it (it
    never shrinks below what it was before the move: the target joined it first)."""
    m = rec["move"]
    src, dst = m["source"], m["target"]
    if dst not in rec["replicas"]:
        return "done"
    if dst not in alive:
        return "abandon"
    if dst in rec.get("insync", []):
        if src not in rec["replicas"]:
            return "done"
        rest = [s for s in rec["insync"] if s != src]
        if len(rest) >= min_insync:
            return "finish"
    return "abandon" if now >= m["deadline"] else "wait"


def new_leader(rec: dict, leaving: str, alive: set[str], primaries: dict[str, int] | None = None) -> str | None:
    """The in-sync replica to transfer the primary of ``rec`` to before its copy on ``leaving`` goes: a live
    one that stays, leading the fewest ranges (``primaries``; ties: the smaller id); None when there is none."""
    cands = [s for s in rec.get("insync", []) if s != leaving and s in alive]
    if not cands:
        return None
    counts = primaries or {}
    return min(cands, key=lambda s: (counts.get(s, 0), s))


def finished(rec: dict) -> dict:
    """The replica set once a move's target is in sync: the source leaves it, the intent is cleared."""
    src = rec["move"]["source"]
    return {"replicas": [s for s in rec["replicas"] if s != src],
            "insync": [s for s in rec.get("insync", []) if s != src], "move": None}


def abandoned(rec: dict) -> dict:
    """The replica set when a move gives up: the target leaves it (its partial copy is deleted), the source
    stays, the intent is cleared."""
    dst = rec["move"]["target"]
    return {"replicas": [s for s in rec["replicas"] if s != dst],
            "insync": [s for s in rec.get("insync", []) if s != dst], "move": None}
