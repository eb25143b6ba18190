"""Pure parts of following etcd: the ZeroMQ guide's *Clone* pattern with etcd's revision as the number.

A follower reads the whole meta prefix once at one revision (the snapshot), then watches
``<prefix>/`` from that revision + 1 (the numbered updates). etcd numbers every write with a
revision that grows by one per transaction and delivers a watch's events in revision order, a whole
transaction in one response. So a follower that has applied every event up to revision R holds the
store exactly as it was at R.

The watch covers ``<prefix>/``, not only ``<prefix>/meta/``: the transaction that wins a term puts
``<prefix>/term`` and the leader key at revision W, so once the follower has seen W it has seen every
meta write of the previous leader (they came before W; later ones are refused by the term
comparison). That is the check a new leader makes at takeover (:func:`ready`).

Nothing here does I/O: lines of the JSON gateway's ``/v3/watch`` stream come in, decisions come out
(:mod:`coordinator.standby.etcd_follower` is the thread that moves the bytes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from coordinator.etcd.client import b64, prefix_end, unb64


@dataclass(frozen=True)
class WatchEvent:
    """One change of one key: ``value`` None for a delete."""

    key: bytes
    value: bytes | None
    revision: int


@dataclass(frozen=True)
class WatchBatch:
    """One message of a watch stream."""

    events: tuple[WatchEvent, ...] = ()
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0  # > 0: the revisions asked for were compacted away (reload)
    reason: str = ""


@dataclass
class Position:
    """Where a follower stands in etcd's numbered history."""

    rev: int = 0  # every event of the watched prefix up to this revision is applied
    meta_rev: int = 0  # the revision of the last meta-key change applied (0: none since the snapshot)
    events: int = 0  # events applied since the snapshot (for logs and tests)
    reloads: int = 0  # snapshots read (1 + one per compaction that outran the follower)
    gaps: list[int] = field(default_factory=list)  # compact revisions that forced a reload


def watch_request(prefix: bytes, start_revision: int) -> dict:
    """The body of a ``/v3/watch`` create request for every key under ``prefix`` from ``start_revision``."""
    return {"create_request": {"key": b64(prefix), "range_end": b64(prefix_end(prefix)),
                               "start_revision": str(start_revision)}}


def parse_watch(line: bytes) -> WatchBatch:
    """One line of the gateway's watch stream; ValueError for an error message or a line that is not one."""
    doc = json.loads(line)
    if "error" in doc:
        err = doc["error"]
        raise ValueError(f"etcd watch error: {err.get('message', err) if isinstance(err, dict) else err}")
    res = doc.get("result")
    if not isinstance(res, dict):
        raise ValueError(f"not a watch response: {line[:200]!r}")
    events = tuple(
        WatchEvent(unb64(ev["kv"]["key"]), None if ev.get("type") == "DELETE" else unb64(ev["kv"].get("value", "")),
                   int(ev["kv"]["mod_revision"]))
        for ev in res.get("events", ()))
    return WatchBatch(events, bool(res.get("created")), bool(res.get("canceled")),
                      int(res.get("compact_revision", 0)), str(res.get("cancel_reason", "")))


def fold(events: tuple[WatchEvent, ...], root: bytes, pos: Position) -> tuple[dict[bytes, bytes], list[bytes], Position]:
    """Fold a batch of events into (meta keys put, with their raw values; meta keys deleted; the new
    position). Keys are returned without ``root``; events at or below ``pos.rev`` are skipped (a
    watch re-opened from ``pos.rev + 1`` never sends them, this only makes that certain); keys outside
    ``root`` (the term and leader keys) only move the position. The last change of a key wins."""
    puts: dict[bytes, bytes] = {}
    dels: dict[bytes, None] = {}
    rev, meta_rev, n = pos.rev, pos.meta_rev, 0
    for ev in events:
        if ev.revision <= pos.rev:
            continue
        rev = max(rev, ev.revision)
        n += 1
        if not ev.key.startswith(root):
            continue
        meta_rev = max(meta_rev, ev.revision)
        k = ev.key[len(root):]
        if ev.value is None:
            puts.pop(k, None)
            dels[k] = None
        else:
            dels.pop(k, None)
            puts[k] = ev.value
    return puts, list(dels), Position(rev, meta_rev, pos.events + n, pos.reloads, pos.gaps)


def after_cancel(batch: WatchBatch, pos: Position) -> str:
    """What a canceled watch means: ``reload`` (the history it needs was compacted: read a new
    snapshot) or ``reconnect`` (watch again from ``pos.rev + 1``)."""
    if batch.compact_revision > 0 and batch.compact_revision > pos.rev + 1:
        return "reload"
    return "reconnect"


def ready(pos: Position, won: int) -> bool:
    """True when a follower at ``pos`` holds the meta store exactly as of revision ``won`` (the
    revision at which the new leader's term was won): it has seen ``won`` itself, and no meta key
    changed after it (nobody writes between the win and the takeover: the old leader is fenced by
    the term, the new one has not started)."""
    return won > 0 and pos.rev >= won and pos.meta_rev <= won
