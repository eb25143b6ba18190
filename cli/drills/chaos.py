"""Seeded chaos against a supervised local cluster, under the verifying workload.

Every ~1.5 s one fault, chosen by a seeded RNG: kill -9 of a partition server, the (leading)
coordinator or a frontend; a pause of a partition server past its lease; a manual split, move or
merge; and with several coordinators a pause of the leader past the leader timeout (a standby takes
over; the old leader wakes up deposed). On a replicated cluster (``--replicas N``) also a partition
server killed with its disk wiped and a primary or follower paused for 1-4 s; at the end every range
must be back at N in-sync replicas (:mod:`cli.drills.chaos_replicas`). A checker
thread asserts the partition-map invariant (ranges of a table disjoint and covering the key space)
on every map it sees. At the end the cluster must converge (every range served) and the workload's
history must show no lost acknowledged write, no duplicate application and no linearizability
violation. Throughout, readers of the table's change feed — a thread that drops its client at random and a
process SIGKILLed at random, both resuming from their saved cursors — follow it, and each must have got every
acknowledged write exactly once, no foreign value, per-key order and resolved times that held
(:mod:`cli.workload.feed_readers`). The table has an index on the value the workload writes: a reader queries
through it during the faults (read-your-writes against the history, no row outside the filter), and at the end
its check must find no difference (:mod:`cli.workload.index_reader`). The seed is printed; the same seed replays the same fault schedule.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from typing import Any

import click

from cli.cluster_file import pid_alive, read_cluster
from cli.coordinator_client import Connections, call
from cli.drills.chaos_replicas import REPL_FAULTS, ReplicaFaults, replica_count, wait_restored
from cli.drills.coordinator_failover import leader_process
from cli.drills.drill_table import prepare_table
from cli.options import data_dir_option, rate_option
from cli.workload.feed_readers import FeedWatch
from cli.workload.generator import SABOTAGE, Workload
from cli.workload.index_reader import IndexWatch
from cli.workload.verify.explain import coordinator_events, failure_lines, slow_op_lines
from cli.workload.verify.feed import feed_lines, feed_summary
from cli.workload.verify.history import dump_history
from cli.workload.verify.index import index_lines, index_summary
from coordinator.map.partition_map import PartitionMap
from rangetable.errors import TableError

FAULTS = ("kill_ps", "kill_coordinator", "kill_frontend", "pause_ps", "split", "move", "merge")
HA_FAULTS = ("pause_leader",)  # added when the cluster has standby coordinators


class MapWatcher(threading.Thread):
    """Checks the map invariant on every snapshot, five times a second."""

    def __init__(self, coordinator: str) -> None:
        super().__init__(daemon=True)
        self.coordinator = coordinator
        self.violations: list[str] = []
        self.checks = 0
        self.stop = threading.Event()

    def run(self) -> None:
        """Poll and check until stopped."""
        conns = Connections()
        try:
            self._watch(conns)
        finally:
            conns.close()

    def _watch(self, conns: Connections) -> None:
        while not self.stop.is_set():
            try:
                snap = call(self.coordinator, {"op": "map"}, timeout=0.5, conns=conns)
                problems = PartitionMap.from_snapshot(snap).check()
                self.checks += 1
                if problems:
                    self.violations.append(f"map v{snap['version']}: {problems}")
            except TableError:
                pass  # the coordinator is restarting
            time.sleep(0.2)


def _pid(doc_dir: str, proc_id: str) -> int | None:
    doc = read_cluster(doc_dir) or {}
    for p in doc.get("processes", []):
        if p["id"] == proc_id:
            return p["pid"]
    return None


def _fault(kind: str, rnd: random.Random, data_dir: str, coord: str, table: str, lease_s: float,
           repl: ReplicaFaults | None = None) -> str:
    doc = read_cluster(data_dir) or {}
    servers = sorted(p["id"] for p in doc.get("processes", []) if p["role"] == "partition-server")
    if repl is not None and kind == "wipe_ps":
        return repl.wipe(rnd, servers)
    if repl is not None and kind == "pause_replica":
        return repl.pause(rnd, table, round(rnd.uniform(1.0, 4.0), 1))
    if kind in ("kill_ps", "pause_ps"):
        victim = rnd.choice(servers)
        pid = _pid(data_dir, victim)
        if not pid or not pid_alive(pid):
            return f"{kind}: {victim} not running"
        if kind == "kill_ps":
            os.kill(pid, signal.SIGKILL)
            return f"kill -9 {victim} (pid {pid})"
        os.kill(pid, signal.SIGSTOP)
        time.sleep(lease_s + 1.0)
        if pid_alive(pid):
            os.kill(pid, signal.SIGCONT)
        return f"paused {victim} (pid {pid}) for {lease_s + 1.0:.1f} s"
    if kind in ("kill_coordinator", "pause_leader"):
        try:
            leader = leader_process(doc)
        except (TableError, click.ClickException) as exc:
            return f"{kind}: no leader found ({exc})"
        pid = leader["pid"]
        if not pid or not pid_alive(pid):
            return f"{kind}: {leader['id']} not running"
        if kind == "kill_coordinator":
            os.kill(pid, signal.SIGKILL)
            return f"kill -9 {leader['id']} (leader of term {leader['term']}, pid {pid})"
        pause = round(rnd.uniform(1.0, 4.0), 1)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(pause)
        if pid_alive(pid):
            os.kill(pid, signal.SIGCONT)
        return f"paused {leader['id']} (leader of term {leader['term']}, pid {pid}) for {pause} s"
    if kind == "kill_frontend":
        proc_id = "fe-1"
        pid = _pid(data_dir, proc_id)
        if pid and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        return f"kill -9 {proc_id} (pid {pid})"
    try:
        ranges = [r for r in call(coord, {"op": "map"}, timeout=2)["ranges"] if r["table"] == table]
        r = rnd.choice(ranges)
        if kind == "split":
            res = call(coord, {"op": "split", "range": r["id"]}, timeout=10)
            return f"split {r['id']} at {res['key']!r}"
        if kind == "move":  # of a replicated range: a leadership transfer, to an in-sync replica
            pool = [s for s in r.get("insync") or servers if s != r["primary"]]
            target = rnd.choice(pool or servers)
            call(coord, {"op": "move", "range": r["id"], "server": target}, timeout=10)
            return f"move {r['id']} to {target}"
        res = call(coord, {"op": "merge", "range": r["id"]}, timeout=10)
        return f"merge {res['left']}+{res['right']}"
    except (TableError, IndexError) as exc:
        return f"{kind}: refused ({exc})"


def run_chaos(data_dir: str, *, seed: int, duration: float = 40.0, interval: float = 1.5, threads: int = 4,
              lease_s: float = 2.0, echo: Any = None, kinds: tuple[str, ...] = FAULTS,
              history_dir: str | None = None, sabotage: str | None = None,
              restore_timeout: float = 90.0, rate: float | None = None,
              first: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run seeded chaos for ``duration`` seconds; returns the report (``passed`` says it all).

    ``first``: fault kinds injected first, in this order, before the seeded draws from ``kinds`` (for a run that
    must include them: a draw of 9 faults misses a kind of weight 0.4 once in a hundred runs).

    A failed run keeps the workload's history in ``history_dir`` (default: ``<data_dir>/histories``).
    ``sabotage`` (:data:`cli.workload.generator.SABOTAGE`) breaks the store on purpose halfway (a
    rogue write) or before the check (a lost write), to show how a FAIL is explained. On a replicated
    cluster the schedule also wipes disks and pauses primaries and followers (:mod:`cli.drills.chaos_replicas`),
    and PASS needs every range back at N in-sync replicas within ``restore_timeout`` s of the last fault.
    """
    history_dir = history_dir or os.path.join(data_dir, "histories")
    say = echo or (lambda _m: None)
    doc = read_cluster(data_dir)
    if doc is None:
        raise click.ClickException(f"no cluster running on {data_dir}")
    coord, native = doc["coordinator"], doc["native"]
    if kinds == FAULTS and sum(p["role"] == "coordinator" for p in doc["processes"]) > 1:
        kinds = FAULTS + HA_FAULTS
    rnd = random.Random(seed)
    table = f"chaos{seed % 10**8}"
    n = replica_count(prepare_table(coord, native, table))
    repl = None
    if n > 1:
        root = doc.get("data_dir") or os.path.abspath(data_dir)
        repl = ReplicaFaults(root, lambda: call(coord, {"op": "status"}, timeout=3), lambda s: _pid(data_dir, s),
                             pid_alive)
        if kinds == FAULTS or kinds == FAULTS + HA_FAULTS:
            kinds = kinds + REPL_FAULTS
    say(f"chaos seed {seed}: table {table}")
    watcher = MapWatcher(coord)
    watcher.start()
    wl = Workload(native, table, threads=threads, seed=seed, history_dir=history_dir, rate=rate)
    feed = FeedWatch(data_dir, table, wl.t0, os.path.join(data_dir, "feed-readers"), seed=seed)
    index = IndexWatch(native, table, wl.clock, seed=seed, threads=threads)
    index.declare()
    try:
        feed.start()
        index.start()
        wl.start()
        faults: list[dict] = []
        pending = list(first)
        t0 = wl.t0  # fault times on the history's clock, so a violation's window finds its faults
        while time.monotonic() - t0 < duration:
            time.sleep(rnd.uniform(0.5, 2 * interval - 0.5))
            if sabotage == "rogue-write" and time.monotonic() - t0 > duration / 2:
                at = round(time.monotonic() - t0, 2)
                faults.append({"t": at, "until": None, "fault": "sabotage", "what": wl.sabotage(sabotage)})
                say(f"  t={at:6.2f}s sabotage: {faults[-1]['what']}")
                sabotage = None
                time.sleep(1.0)  # let the workload read it
            kind = pending.pop(0) if pending else rnd.choice(kinds)
            at = round(time.monotonic() - t0, 2)
            what = _fault(kind, rnd, data_dir, coord, table, lease_s, repl)
            faults.append({"t": at, "until": round(time.monotonic() - t0, 2), "fault": kind, "what": what})
            say(f"  t={at:6.2f}s {what}")
        # Converge: every range of the table served again (reads answer), then stop the workload.
        faults_end = time.monotonic()
        deadline = time.monotonic() + 30
        converged = False
        while time.monotonic() < deadline and not converged:
            try:
                snap = call(coord, {"op": "status"}, timeout=2)
                alive = {s["id"] for s in snap["servers"] if s["alive"]}
                converged = not PartitionMap.from_snapshot(snap).check() and all(
                    r["state"] == "serving" and r["primary"] in alive for r in snap["ranges"])
            except TableError:
                pass
            time.sleep(0.2)
        restore = wait_restored(lambda: call(coord, {"op": "status"}, timeout=3), n, restore_timeout, faults_end) if n > 1 else {}
        if restore:
            say(f"  {n} in-sync replicas of every range: {'yes' if restore['restored'] else 'NO'} "
                f"after {restore['restored_s']} s")
        wl.stop()
        if sabotage == "lost-write":
            at = round(time.monotonic() - t0, 2)
            faults.append({"t": at, "until": None, "fault": "sabotage", "what": wl.sabotage(sabotage)})
            say(f"  t={at:6.2f}s sabotage: {faults[-1]['what']}")
        watcher.stop.set()
        watcher.join(timeout=5)
        say("reading the change feed to the last acknowledged write …")
        feed.finish(wl.last_ack_ticks)
        say("checking the index …")
        index_check = index.finish(wl.last_ack_ticks)
        say("verifying the history …")
        try:
            verdict = wl.verify()
        except TableError as exc:  # the table cannot be read back: a range is unserved (or its replica set broken)
            os.makedirs(history_dir, exist_ok=True)
            path = os.path.join(history_dir, f"history-{table}-seed{seed}.jsonl")
            dump_history(wl.recorder.history(), path)
            verdict = {"lost_writes": None, "duplicate_applications": len(wl.duplicates), "linearizable": False,
                       "linearizability": "not checked", "linearizability_s": None, "history_ops": len(wl.recorder),
                       "slow_ops": list(wl.slow_ops), "history_file": path, "verify_error": f"{exc.error_code}: {exc}"}
        report = {"seed": seed, "duration_s": duration, "faults": faults, "converged": converged,
                  "map_checks": watcher.checks, "map_violations": watcher.violations, "replicas": n, **restore,
                  "client": wl.stats.to_dict(), **verdict, "feed": feed.verdict(wl.writes()),
                  "index": index.verdict(wl.recorder.history(), index_check)}
        report["passed"] = ("verify_error" not in report and converged and not watcher.violations and report["lost_writes"] == 0
                            and report["duplicate_applications"] == 0 and report["linearizable"]
                            and restore.get("restored", True) and report["feed"]["passed"]
                            and report["index"]["passed"])
        report["wall_t0"] = wl.wall0
        if not report["passed"]:  # what the coordinator did, for the explanation (chaos_failure_lines)
            try:
                report["coordinator_events"] = coordinator_events(
                    call(coord, {"op": "events", "since": 0, "limit": 1000}, timeout=5), wl.wall0)
            except TableError:
                report["coordinator_events"] = []
        return report
    finally:
        index.stop.set()
        feed.close()  # no reader process outlives the drill, whatever went wrong


def chaos_failure_lines(r: dict[str, Any]) -> list[str]:
    """Why a chaos run failed (the map, convergence, the checkers' explanation with its faults), and the
    operations slower than 3 s with the faults that overlapped them."""
    lines = [f"map invariant broken: {v}" for v in r["map_violations"][:5]]
    if "verify_error" in r:
        lines.append(f"could not read the table back to check it: {r['verify_error']}")
    if not r["converged"]:
        lines.append("not converged: some range was not served by a live server 30 s after the last fault")
    if not r.get("restored", True):
        lines.append(f"not restored: {', '.join(r['under_replicated'][:8])} short of {r['replicas']} in-sync "
                     f"replicas {r['restored_s']} s after the last fault")
    return (lines + failure_lines(r, r["faults"], events=r.get("coordinator_events", []))
            + feed_lines(r["feed"], r["faults"])
            + index_lines(r["index"], r["faults"]) + slow_op_lines(r["slow_ops"], r["faults"]))


@click.command("chaos")
@click.option("--seed", type=int, default=None, help="Seed of the fault schedule and workload (printed).")
@click.option("--duration", default=40.0, show_default=True, help="Seconds of faults.")
@click.option("--sabotage", type=click.Choice(SABOTAGE), default=None,
              help="Break the store on purpose behind the workload's back, to see a FAIL explained: "
                   "rogue-write halfway, lost-write before the check.")
@click.option("--restore-timeout", default=90.0, show_default=True,
              help="Replicated cluster: seconds after the last fault for every range to have N in-sync replicas.")
@rate_option
@data_dir_option
@click.option("--json", "as_json", is_flag=True)
def drill_chaos(seed: int | None, duration: float, sabotage: str | None, restore_timeout: float, rate: float | None,
                data_dir: str, as_json: bool) -> None:
    """Random kills, pauses, splits, moves and merges under a verifying workload (needs `rangetable up`);
    on a replicated cluster also disk wipes and pauses of primaries and followers, and every range must be
    back at N in-sync replicas at the end.

    A FAIL says why: a linearizability violation (key, operation, its neighbours, the faults in that
    window) or a checker timeout, lost writes, a change-feed reader's lost, duplicated, foreign or misordered
    record (key, records, faults in the window); a failed history is kept for `rangetable verify history`.
    Operations slower than 3 s are listed with the faults that overlapped them."""
    seed = int(time.time()) if seed is None else seed
    r = run_chaos(data_dir, seed=seed, duration=duration, echo=None if as_json else click.echo, sabotage=sabotage,
                  restore_timeout=restore_timeout, rate=rate)
    if as_json:
        click.echo(json.dumps(r, indent=2))
    else:
        c = r["client"]
        click.echo(f"seed {r['seed']}: {len(r['faults'])} faults, map checked {r['map_checks']} times, "
                   f"{len(r['map_violations'])} violations; converged: {r['converged']}")
        click.echo(f"client: {c['ops']} ops, {c['ok']} ok, {c['unknown']} unknown, worst {c['latency_ms']['max']} ms")
        if r["replicas"] > 1:
            click.echo(f"replicas: {r['replicas']} in-sync of every range again: "
                       f"{'yes' if r['restored'] else 'NO'} after {r['restored_s']} s")
        click.echo(f"lost writes {r['lost_writes']}, duplicates {r['duplicate_applications']}, "
                   f"linearizable {r['linearizable']} ({r['linearizability']}, {r['history_ops']} ops checked in "
                   f"{r['linearizability_s']} s)")
        click.echo(feed_summary(r["feed"]))
        click.echo(f"{index_summary(r['index'])}  →  {'PASS' if r['passed'] else 'FAIL'}")
        for line in chaos_failure_lines(r):
            click.echo(line)
    if not r["passed"]:
        raise SystemExit(1)
