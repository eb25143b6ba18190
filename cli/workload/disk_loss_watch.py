"""What the disk-loss drill and ``bench replicas`` measure: when each range answered clients again after
the kill (from the workload's own history), and when each range had N in-sync replicas on live servers
again (by polling the coordinator's status). The functions are pure and unit-tested
(tests/tools/unit/test_disk_loss_watch.py); :class:`RestoreWatch` is the thin thread that feeds them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from cli.coordinator_client import call
from cli.workload.verify.history import Op
from coordinator.replicas.sets import health
from rangetable.errors import TableError


def range_of(pk: str, ranges: list[dict]) -> str | None:
    """The id of the range of ``ranges`` (one table) holding PartitionKey ``pk``."""
    for r in ranges:
        if r["low"] <= pk and (r["high"] is None or pk < r["high"]):
            return str(r["id"])
    return None


def served_again(history: Iterable[Op], ranges: list[dict], kill_t: float) -> dict[str, dict[str, float | None]]:
    """Per range, seconds from the kill (``kill_t``, on the history's clock) until a read invoked after it
    returned, until a write invoked after it was acknowledged, and ``served``: the later of the two
    (None when either never happened). What the clients saw, retries included."""
    out: dict[str, dict[str, float | None]] = {r["id"]: {"read": None, "write": None, "served": None} for r in ranges}
    for op in history:
        if op.outcome != "ok" or op.end is None or op.start < kill_t or not isinstance(op.key, tuple):
            continue
        rid = range_of(str(op.key[0]), ranges)
        if rid is None:
            continue
        slot = "read" if op.kind == "read" else "write"
        t = round(op.end - kill_t, 3)
        cur = out[rid][slot]
        if cur is None or t < cur:
            out[rid][slot] = t
    for v in out.values():
        if v["read"] is not None and v["write"] is not None:
            v["served"] = max(v["read"], v["write"])
    return out


def live_servers(servers: list[dict], victim: str, old_incarnation: str) -> set[str]:
    """The ids of the live servers; the victim counts only in a new incarnation (its old one is dead even
    while the coordinator has not noticed yet)."""
    return {s["id"] for s in servers
            if s["alive"] and not (s["id"] == victim and s.get("incarnation") == old_incarnation)}


def restore_step(rec: dict, live: set[str], n: int, victim: str, lost_seen: bool) -> tuple[bool, bool]:
    """One observation of a range's record: (the victim's lost copy has been seen leaving the in-sync set,
    the range is at full strength again: :func:`coordinator.replicas.sets.health`, with this drill's ``live``).
    Restoration counts only after the loss was seen: before the coordinator notices, the in-sync set still
    names the dead copy."""
    lost_seen = lost_seen or victim not in rec.get("insync", [])
    return lost_seen, lost_seen and health(rec, live, n)["full_strength"]


def successors(span: dict, ranges: list[dict]) -> list[dict]:
    """The ranges of ``span``'s table (``span``: a range record as it was at the kill) that overlap its key
    span now: its children when it split, the merged range when it merged, itself otherwise."""
    low, high, table = span["low"], span["high"], span.get("table")
    return [r for r in ranges if r.get("table") == table and (high is None or r["low"] < high)
            and (r["high"] is None or r["high"] > low)]


def lost_in_events(events: Iterable[dict], victim: str) -> set[str]:
    """Ranges whose coordinator events since the kill show the victim's copy gone from the in-sync set: a
    promotion that dropped it, an in-sync change without it, or a re-replication onto it (its copy was
    wiped). They catch a loss and its repair that fell between two status polls."""
    out = set()
    for e in events:
        kind, rid = e.get("kind"), e.get("range")
        if rid is None:
            continue
        if (kind == "promote" and victim in e.get("dropped", [])) or (
                kind == "insync" and victim not in e.get("insync", [victim])) or (
                kind == "rereplicate" and victim in e.get("added", [])):
            out.add(str(rid))
    return out


def events_since(coord: str, seq: int, rids: set[str]) -> list[dict]:
    """The coordinator's events after number ``seq`` about the ranges ``rids`` (none while it cannot answer)."""
    try:
        events = call(coord, {"op": "events", "since": seq, "limit": 500}, timeout=2)
    except TableError:
        return []
    return [e for e in events if e.get("range") in rids]


def new_copies(before: list[str], after: list[str], victim: str) -> list[str]:
    """The in-sync replicas made since the kill: those not in sync before it, and the victim (its copy was
    wiped: in sync again, it was rebuilt)."""
    return [s for s in after if s == victim or s not in before]


def dir_bytes(path: str) -> int:
    """The size of the files under ``path`` (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass  # compacted away meanwhile
    return total


class RestoreWatch(threading.Thread):
    """Polls the coordinator's status from the kill on and notes, per range, when the victim's copy left the
    in-sync set and when the range had ``n`` in-sync replicas on live servers again (with the size on disk
    of the copies made meanwhile, for a MB/s figure). Stops when every range is restored or on ``stop``."""

    def __init__(self, status: Callable[[], dict], ranges: list[dict], n: int, victim: str, old_incarnation: str,
                 t0: float, server_dir: Callable[[str], str], events: Callable[[], list[dict]] = list) -> None:
        super().__init__(daemon=True)
        self.status, self.n, self.victim, self.old = status, n, victim, old_incarnation
        self.events = events
        self.t0, self.server_dir = t0, server_dir
        self.before = {r["id"]: list(r.get("insync", [])) for r in ranges}
        self.spans = {r["id"]: r for r in ranges}
        self.lost_seen: dict[str, float] = {}
        self.restored: dict[str, dict[str, Any]] = {}
        self.min_insync: dict[str, int] = {rid: len(v) for rid, v in self.before.items()}
        self.polls = 0
        self.stop = threading.Event()

    def run(self) -> None:
        """Poll five times a second until every range is restored or stopped."""
        while not self.stop.is_set() and len(self.restored) < len(self.before):
            try:
                self.observe(self.status(), lost_in_events(self.events(), self.victim))
            except Exception:  # noqa: BLE001 - the coordinator may be busy or restarting: poll again
                pass
            self.stop.wait(0.2)

    def rebuilt_in_place(self, rec: dict, live: set[str]) -> bool:
        """The victim's wiped copy was rebuilt while staying in the in-sync set (a follower that restarts
        without its directory is rebuilt from its primary, in sync, before its primary reports it lagging):
        the victim is back in a new incarnation, in sync, and the range's directory exists on it again; a
        rebuild renames the pulled checkpoint into place only once complete (partition_server/replication/snapshot.py)."""
        return (self.victim in live and self.victim in rec.get("insync", [])
                and os.path.isdir(os.path.join(self.server_dir(self.victim), rec["path"])))

    def observe(self, st: dict, lost: frozenset[str] | set[str] = frozenset()) -> None:
        """Take one status snapshot into account (``lost``: ranges whose events show the loss already)."""
        now = round(time.monotonic() - self.t0, 3)
        self.polls += 1
        live = live_servers(st["servers"], self.victim, self.old)
        recs = {r["id"]: r for r in st["ranges"]}
        for rid, before in self.before.items():
            rec = recs.get(rid)
            if rid in self.restored:
                continue
            if rec is None:  # split or merged since the kill: see the ranges now over its keys
                self._observe_successors(rid, before, st["ranges"], live, now)
                continue
            healthy = health(rec, live, self.n)["in_sync_live"]
            self.min_insync[rid] = min(self.min_insync[rid], len(healthy))
            seen, ok = restore_step(rec, live, self.n, self.victim, rid in self.lost_seen or rid in lost
                                    or self.rebuilt_in_place(rec, live))
            if seen and rid not in self.lost_seen:
                self.lost_seen[rid] = now
            if ok:
                made = new_copies(before, healthy, self.victim)
                size = sum(dir_bytes(os.path.join(self.server_dir(s), rec["path"])) for s in made)
                self.restored[rid] = {"t": now, "insync": healthy, "new_copies": made, "bytes": size,
                                      "mb_per_s": round(size / 1e6 / now, 3) if now > 0 else None}

    def _observe_successors(self, rid: str, before: list[str], ranges: list[dict], live: set[str], now: float) -> None:
        """A range split or merged away since the kill: restored when every range now over its key span has
        ``n`` in-sync replicas on live servers (the victim's old incarnation counts for nothing)."""
        succ = successors(self.spans[rid], ranges)
        healthy = {r["id"]: [s for s in health(r, live, self.n)["in_sync_live"]
                             if s != self.victim or self.rebuilt_in_place(r, live)] for r in succ}
        self.lost_seen.setdefault(rid, now)
        if succ and all(len(h) >= self.n for h in healthy.values()):
            made = sorted({s for h in healthy.values() for s in new_copies(before, h, self.victim)})
            self.restored[rid] = {"t": now, "insync": sorted({s for h in healthy.values() for s in h}),
                                  "new_copies": made, "bytes": 0, "mb_per_s": None, "now": sorted(healthy)}
