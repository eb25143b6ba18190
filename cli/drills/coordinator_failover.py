"""``rangetable drill failover --coordinator``: pause (or kill) the leading coordinator under load.

The drill needs several coordinators (``rangetable up --coordinators 3``). It creates a table spread
over every partition server, runs the verifying :class:`Workload`, and SIGSTOPs the leader for
``--pause-s`` (or SIGKILLs it). A :class:`GapProber` reads one key of every range every 50 ms and
keeps the longest stretch without an answer per range: the *worst gap*. The report gives the
takeover timeline (when a standby led, with which term), the worst gap, acknowledged writes lost,
client errors, linearizability, and PASS when the gap stays under 3 s with nothing lost and no
client error.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import click

from cli.cluster_file import pid_alive, read_cluster
from cli.coordinator_client import call
from cli.drills.drill_table import prepare_table
from cli.workload.generator import Workload
from cli.workload.verify.explain import failure_lines
from rangetable.errors import TableError

MAX_GAP_S = 3.0  # the bound on how long a key range may go unserved


class GapProber(threading.Thread):
    """Reads one key of each range every ``every_s``; keeps each range's longest gap between answers."""

    def __init__(self, native: str, table: str, ranges: list[dict], every_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.native, self.table, self.every_s = native, table, every_s
        self.keys = {r["id"]: r["low"] or "p00" for r in ranges}
        self.last_ok: dict[str, float] = {}
        self.worst: dict[str, float] = {rid: 0.0 for rid in self.keys}
        self.stop = threading.Event()

    def run(self) -> None:
        """Probe until stopped."""
        start = time.monotonic()
        while not self.stop.is_set():
            for rid, pk in self.keys.items():
                try:
                    call(self.native, {"op": "get", "table": self.table, "pk": pk, "rk": "probe"}, timeout=0.5)
                except TableError as exc:
                    if exc.error_code != "ResourceNotFound":
                        continue
                now = time.monotonic()
                self.worst[rid] = max(self.worst[rid], now - self.last_ok.get(rid, start))
                self.last_ok[rid] = now
            time.sleep(self.every_s)
        now = time.monotonic()
        for rid in self.keys:
            self.worst[rid] = max(self.worst[rid], now - self.last_ok.get(rid, start))


def leader_process(doc: dict) -> dict:
    """The cluster.json entry of the leading coordinator (found through the ``status`` op)."""
    st = call(doc["coordinator"], {"op": "status"}, timeout=5)
    for p in doc["processes"]:
        if p["role"] == "coordinator" and p.get("endpoint") == st["leader"]:
            return {**p, "term": st["term"]}
    raise click.ClickException(f"the leader {st['leader']} is not a process of this cluster")


def run_coordinator_drill(data_dir: str, *, mode: str = "pause", pause_s: float = 12.0, threads: int = 6,
                          seed: int | None = None, echo: Any = None, rate: float | None = None) -> dict[str, Any]:
    """Pause (or kill) the leading coordinator of ``data_dir``'s cluster under load; returns the report."""
    doc = read_cluster(data_dir)
    if doc is None:
        raise click.ClickException(f"no cluster running on {data_dir}: start one with `rangetable up`")
    coords = [p for p in doc["processes"] if p["role"] == "coordinator"]
    if len(coords) < 2:
        raise click.ClickException("a coordinator drill needs standbys: `rangetable up --coordinators 3`")
    say = echo or (lambda _m: None)
    seed = int(time.time()) if seed is None else seed
    coord, native = doc["coordinator"], doc["native"]
    table = f"drill{int(time.time() * 1000) % 10**9}"
    ranges = prepare_table(coord, native, table)
    leader = leader_process(doc)
    say(f"table {table}: {len(ranges)} ranges; leader {leader['id']} (pid {leader['pid']}, term {leader['term']}); "
        f"seed {seed}")
    wl = Workload(native, table, threads=threads, seed=seed, history_dir=os.path.join(data_dir, "histories"), rate=rate)
    prober = GapProber(native, table, ranges)
    wl.start()
    prober.start()
    time.sleep(2.0)
    t0 = time.monotonic()
    os.kill(leader["pid"], signal.SIGSTOP if mode == "pause" else signal.SIGKILL)
    say(f"{'paused' if mode == 'pause' else 'killed'} {leader['id']} (pid {leader['pid']})")
    took_over = new_term = new_leader = None
    while time.monotonic() - t0 < pause_s:
        if took_over is None:
            try:
                st = call(coord, {"op": "status"}, timeout=0.5)
                if st["term"] > leader["term"]:
                    took_over, new_term, new_leader = round(time.monotonic() - t0, 3), st["term"], st["leader"]
                    say(f"t={took_over} s: {new_leader} leads term {new_term} ({st.get('takeover')})")
            except TableError:
                pass
        time.sleep(0.05)
    fault = {"t": round(t0 - wl.t0, 3), "until": None, "fault": mode,
             "what": f"{'SIGSTOP' if mode == 'pause' else 'kill -9'} leader {leader['id']} (pid {leader['pid']})"}
    if mode == "pause" and pid_alive(leader["pid"]):
        os.kill(leader["pid"], signal.SIGCONT)
        fault["until"] = round(time.monotonic() - wl.t0, 3)
        say(f"resumed {leader['id']}: it must step down without acting")
    time.sleep(3.0)  # load continues while the old leader wakes up
    prober.stop.set()
    prober.join(timeout=10)
    wl.stop()
    say("verifying the history …")
    verdict = wl.verify()
    stats = wl.stats.to_dict()
    after = call(coord, {"op": "status"}, timeout=5)
    names = {p.get("endpoint"): p["id"] for p in (read_cluster(data_dir) or doc)["processes"]}
    new_leader = names.get(new_leader, new_leader)
    worst = max(prober.worst.values()) if prober.worst else None
    errors = stats["unknown"] + stats["aborted"]
    report = {
        "drill": "coordinator-failover", "mode": mode, "pause_s": pause_s, "seed": seed, "table": table,
        "old_leader": leader["id"], "old_term": leader["term"], "took_over_s": took_over, "new_term": new_term,
        "new_leader": new_leader, "leader_after": names.get(after["leader"], after["leader"]), "term_after": after["term"],
        "worst_gap_s": round(worst, 3) if worst is not None else None,
        "gap_per_range_s": {rid: round(g, 3) for rid, g in sorted(prober.worst.items())},
        "client": stats, "client_errors": errors, **verdict, "faults": [fault],
    }
    report["passed"] = (took_over is not None and worst is not None and worst < MAX_GAP_S
                        and report["lost_writes"] == 0 and report["duplicate_applications"] == 0
                        and report["linearizable"] and errors == 0)
    return report


def format_report(r: dict[str, Any]) -> str:
    """The report as text."""
    c = r["client"]
    lat = c["latency_ms"]
    how = f"paused (SIGSTOP) for {r['pause_s']} s" if r["mode"] == "pause" else "killed (SIGKILL)"
    lines = [
        f"coordinator failover drill: leader {r['old_leader']} (term {r['old_term']}) {how}, seed {r['seed']}",
        f"  takeover:        {r['new_leader']} led term {r['new_term']} at t={r['took_over_s']} s",
        f"  after the drill: {r['leader_after']} leads term {r['term_after']}",
        f"  worst gap:       {r['worst_gap_s']} s without an answer from a range (bound {MAX_GAP_S} s)",
    ]
    lines += [f"                   {rid}: {g} s" for rid, g in r["gap_per_range_s"].items()]
    lines += [
        f"  client: {c['ops']} ops, {c['ok']} ok, {c['fail']} failed precondition, {c['slow_over_1s']} slower "
        f"than 1 s; latency p50 {lat['p50']} ms, p99 {lat['p99']} ms, worst {lat['max']} ms",
        f"  client errors:            {r['client_errors']} {c['errors'] if r['client_errors'] else ''}".rstrip(),
        f"  lost acknowledged writes: {r['lost_writes']}",
        f"  duplicate applications:   {r['duplicate_applications']}",
        f"  linearizable:             {'yes' if r['linearizable'] else 'NO'} ({r['history_ops']} ops checked)",
        f"  verdict: {'PASS' if r['passed'] else 'FAIL'}",
    ]
    if r["took_over_s"] is None:
        lines.append("  no standby took over while the leader was down")
    elif r["worst_gap_s"] is None or r["worst_gap_s"] >= MAX_GAP_S:
        lines.append(f"  a range went unanswered for {r['worst_gap_s']} s (bound {MAX_GAP_S} s)")
    if r["client_errors"]:
        lines.append(f"  client errors: {r['client']['errors']}")
    lines += ["  " + x for x in failure_lines(r, r["faults"])]
    return "\n".join(lines)
