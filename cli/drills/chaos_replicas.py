"""The replicated cluster's part of ``rangetable drill chaos``: a partition server killed with its disk (its
directory deleted; the supervisor restarts it empty and re-replication rebuilds its copies), a primary or a
follower paused for a few seconds, and at the end the wait for every range to have N in-sync replicas on
live servers again.

A disk is wiped only while every range it holds keeps another in-sync copy that no earlier wipe destroyed
(a copy of a wiped server counts again once that server, in a new incarnation, is back in the range's
in-sync set, i.e. rebuilt): losing every copy of a range loses acknowledged writes by design, and the drill
tests the protocol, not arithmetic. The decisions are pure and unit-tested (tests/tools/unit/test_chaos_replicas.py).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from typing import Any

from coordinator.replicas.sets import health
from rangetable.errors import TableError

REPL_FAULTS = ("wipe_ps", "pause_replica")  # added when the cluster keeps N >= 2 copies of each range


def replica_count(ranges: list[dict]) -> int:
    """The copies each of ``ranges`` keeps (the fewest; 1 for an unreplicated cluster)."""
    return min((len(r.get("replicas") or [r.get("primary")]) for r in ranges), default=1)


def holders(rec: dict, live: dict[str, str], wiped: dict[str, str]) -> list[str]:
    """The servers holding an intact in-sync copy of range ``rec``: in its in-sync set, alive (``live``: id ->
    incarnation), and not wiped since (``wiped``: id -> incarnation at the wipe), unless back in a new
    incarnation (then its presence in the in-sync set means it was rebuilt)."""
    return [s for s in rec.get("insync", []) if s in live and (s not in wiped or live[s] != wiped[s])]


def safe_to_wipe(status: dict, victim: str, wiped: dict[str, str]) -> str | None:
    """None when wiping ``victim``'s disk leaves each of its ranges an intact in-sync copy elsewhere;
    otherwise the reason not to (the first range that would lose its last copy)."""
    live = {s["id"]: str(s.get("incarnation")) for s in status["servers"] if s["alive"]}
    for r in status["ranges"]:
        if victim not in r.get("replicas", []) and victim != r.get("primary"):
            continue
        others = [s for s in holders(r, live, wiped) if s != victim]
        if not others:
            return f"{r['id']} has no other intact in-sync copy"
    return None


def heal_wiped(status: dict, wiped: dict[str, str]) -> dict[str, str]:
    """``wiped`` without the servers back in a new incarnation and in the in-sync set of every range that
    names them as a replica (their copies rebuilt)."""
    live = {s["id"]: str(s.get("incarnation")) for s in status["servers"] if s["alive"]}
    out = {}
    for sid, inc in wiped.items():
        back = sid in live and live[sid] != inc and all(
            sid in r.get("insync", []) for r in status["ranges"] if sid in r.get("replicas", []))
        if not back:
            out[sid] = inc
    return out


def under_replicated(status: dict, n: int) -> list[str]:
    """The replicated ranges not at full strength: fewer than ``n`` in-sync replicas on live servers, or not
    serving (:func:`coordinator.replicas.sets.health`)."""
    live = {s["id"] for s in status["servers"] if s["alive"]}
    return [r["id"] for r in status["ranges"] if len(r.get("replicas", [])) > 1
            and not health(r, live, n)["full_strength"]]


class ReplicaFaults:
    """Carries out the replicated faults on the supervised cluster under ``root`` (its data root)."""

    def __init__(self, root: str, status: Callable[[], dict], pid_of: Callable[[str], int | None],
                 pid_alive: Callable[[int], bool]) -> None:
        self.root, self.status, self.pid_of, self.pid_alive = root, status, pid_of, pid_alive
        self.wiped: dict[str, str] = {}  # server id -> incarnation at its wipe, until rebuilt

    def wipe(self, rnd: random.Random, servers: list[str]) -> str:
        """SIGKILL a partition server and delete its directory, if every range keeps an intact copy."""
        victim = rnd.choice(servers)
        try:
            st = self.status()
        except TableError as exc:
            return f"wipe_ps: no status ({exc})"
        self.wiped = heal_wiped(st, self.wiped)
        why = safe_to_wipe(st, victim, self.wiped)
        if why:
            return f"wipe_ps: not {victim}: {why}"
        info = next((s for s in st["servers"] if s["id"] == victim), None)
        pid = self.pid_of(victim)
        if info is None or not pid or not self.pid_alive(pid):
            return f"wipe_ps: {victim} not running"
        os.kill(pid, signal.SIGKILL)
        path = os.path.join(self.root, "servers", victim)
        gone = f"{path}.wiped-{time.monotonic_ns()}"
        try:
            os.rename(path, gone)  # atomic: the restarted server finds no directory, whatever the timing
        except FileNotFoundError:
            pass
        shutil.rmtree(gone, ignore_errors=True)
        self.wiped[victim] = str(info.get("incarnation"))
        return f"kill -9 {victim} (pid {pid}) and rm -rf {path}"

    def pause(self, rnd: random.Random, table: str, seconds: float) -> str:
        """SIGSTOP the primary or a follower of a random range of ``table`` for ``seconds``, then SIGCONT."""
        try:
            ranges = [r for r in self.status()["ranges"] if r["table"] == table]
        except TableError as exc:
            return f"pause_replica: no status ({exc})"
        if not ranges:
            return "pause_replica: no range"
        r = rnd.choice(ranges)
        followers = [s for s in r.get("replicas", []) if s != r["primary"]]
        role = "primary" if not followers or rnd.random() < 0.5 else "follower"
        victim = r["primary"] if role == "primary" else rnd.choice(followers)
        pid = self.pid_of(victim)
        if not pid or not self.pid_alive(pid):
            return f"pause_replica: {victim} not running"
        os.kill(pid, signal.SIGSTOP)
        time.sleep(seconds)
        if self.pid_alive(pid):
            os.kill(pid, signal.SIGCONT)
        return f"paused {victim} ({role} of {r['id']}, pid {pid}) for {seconds:.1f} s"


def wait_restored(status: Callable[[], dict], n: int, timeout: float, t0: float) -> dict[str, Any]:
    """Poll until every replicated range has ``n`` in-sync replicas on live servers, at most ``timeout`` s
    after ``t0`` (monotonic: the last fault); returns ``restored``, the seconds since ``t0`` and the ranges
    still short at the end."""
    short: list[str] = ["?"]
    while True:
        try:
            short = under_replicated(status(), n)
        except TableError:
            pass
        if not short or time.monotonic() - t0 > timeout:
            break
        time.sleep(0.25)
    return {"restored": not short, "restored_s": round(time.monotonic() - t0, 2), "under_replicated": short}
