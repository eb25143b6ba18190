"""``rangetable drill disk-loss``: SIGKILL a partition server of a replicated cluster under a verifying
workload and delete its data directory (``<data-dir>/servers/<id>/``), as a lost disk would.

The supervisor restarts the server with an empty directory (the realistic case). The drill reports, per
range of its table: when clients were served again (a read and an acknowledged write invoked after the
kill, from the workload's history; goal ≤ 3 s), the coordinator's promotions, when the range had N
in-sync replicas on live servers again (re-replication; "not restored within T s" otherwise) with the
size of the new copies per second; then lost acknowledged writes (must be 0), linearizability, and the
change feed as readers got it throughout, restarted and killed (:mod:`cli.workload.feed_readers`).
PASS needs 0 lost, no duplicate, linearizable, every range served again, the feed check passed, and —
unless ``--no-require-restore`` — every range restored to N in-sync replicas.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from typing import Any

import click

from cli.cluster_file import read_cluster
from cli.coordinator_client import call
from cli.drills.drill_table import pick_victim, prepare_table
from cli.options import data_dir_option, rate_option
from cli.workload.disk_loss_watch import RestoreWatch, events_since, served_again
from cli.workload.feed_readers import FeedWatch
from cli.workload.generator import Workload
from cli.workload.verify.explain import failure_lines
from cli.workload.verify.feed import feed_lines, feed_summary
from rangetable.errors import TableError

GOAL_S = 3.0  # the design's bound on a range going unserved
PRELOAD = "freshpreload"  # the PartitionKey of the preloaded rows


def preload(native: str, table: str, mb: float) -> int:
    """Write about ``mb`` MB of incompressible rows (PartitionKey :data:`PRELOAD`: the checkers ignore
    them) so re-replication has data to copy; returns the bytes written."""
    c = Workload(native, table).client()
    written, i = 0, 0
    while written < mb * 1e6:
        rows: list[Any] = [("upsert", {"PartitionKey": PRELOAD, "RowKey": f"{i + j:07d}",
                            "blob": os.urandom(15000).hex()}, {}) for j in range(50)]
        c.submit_transaction(rows)
        written += 50 * 30000
        i += 50
    return written


def run_disk_loss_drill(data_dir: str, *, server: str | None = None, duration: float = 30.0, threads: int = 6,
                        seed: int | None = None, pieces: int = 4, restore_timeout: float = 60.0,
                        require_restore: bool = True, preload_mb: float = 0.0, echo: Any = None,
                        rate: float | None = None) -> dict[str, Any]:
    """Run one disk-loss drill against the (replicated) cluster of ``data_dir``; returns the report."""
    doc = read_cluster(data_dir)
    if doc is None:
        raise click.ClickException(f"no cluster running on {data_dir}: start one with "
                                   "`rangetable up --servers 3 --replicas 3`")
    coord, native, root = doc["coordinator"], doc["native"], doc.get("data_dir") or os.path.abspath(data_dir)
    say = echo or (lambda _m: None)
    seed = int(time.time()) if seed is None else seed
    table = f"diskloss{int(time.time() * 1000) % 10**9}"
    ranges = prepare_table(coord, native, table, pieces)
    n = min(len(r.get("replicas", [])) for r in ranges)
    if n < 2:
        raise click.ClickException(
            f"the cluster on {data_dir} keeps {n} copy of each range: a wiped disk loses its ranges' data by "
            "design. The disk-loss drill needs a replicated cluster: `rangetable up --servers 3 --replicas 3`")
    victim, info = pick_victim(coord, ranges, server)
    victim_dir = os.path.join(root, "servers", victim)
    if not os.path.isdir(victim_dir):
        raise click.ClickException(f"{victim_dir} does not exist: the drill wipes a local cluster's server "
                                   "directory (`rangetable up --replicas N` puts one per server there)")
    loaded = preload(native, table, preload_mb) if preload_mb > 0 else 0
    say(f"table {table}: {len(ranges)} range(s), {n} replicas each; victim {victim} (pid {info['pid']}) is primary "
        f"of {sum(r['primary'] == victim for r in ranges)}; seed {seed}" + (f"; preloaded {loaded / 1e6:.1f} MB" if loaded else ""))
    wl = Workload(native, table, threads=threads, seed=seed, history_dir=os.path.join(data_dir, "histories"), rate=rate)
    feed = FeedWatch(data_dir, table, wl.t0, os.path.join(data_dir, "feed-readers"), seed=seed)
    try:
        feed.start()
        wl.start()
        warmup = min(2.0, duration / 4)
        time.sleep(warmup)
        last = call(coord, {"op": "events", "limit": 1})
        seq = last[-1]["seq"] if last else 0
        t0 = time.monotonic()
        os.kill(info["pid"], signal.SIGKILL)
        wiped = f"{victim_dir}.wiped-{int(time.time())}"
        os.rename(victim_dir, wiped)  # atomic: the restarted server finds no directory, whatever the timing
        shutil.rmtree(wiped, ignore_errors=True)
        kill_t = t0 - wl.t0
        say(f"killed {victim} (pid {info['pid']}) and deleted {victim_dir}")
        rids = {r["id"] for r in ranges}
        watch = RestoreWatch(lambda: call(coord, {"op": "status"}, timeout=5), ranges, n, victim, info["incarnation"],
                             t0, lambda s: os.path.join(root, "servers", s), lambda: events_since(coord, seq, rids))
        watch.start()
        time.sleep(max(duration - warmup, 1.0))
        wl.stop()
        watch.join(timeout=max(0.0, restore_timeout - (time.monotonic() - t0)))
        watch.stop.set()
        say("reading the change feed to the last acknowledged write …")
        feed.finish(wl.last_ack_ticks)
    finally:
        feed.close()  # no reader process outlives the drill, whatever went wrong
    say("verifying the history …")
    try:
        verdict = wl.verify()
    except TableError as exc:  # the table cannot be read back: a range is unserved (or its replica set broken)
        verdict = {"lost_writes": None, "duplicate_applications": len(wl.duplicates), "linearizable": False,
                   "history_ops": len(wl.recorder), "verify_error": f"{exc.error_code}: {exc}"}
    served = served_again(wl.recorder.history(), ranges, kill_t)
    events = events_since(coord, seq, {r["id"] for r in ranges})
    in_time = {rid: d for rid, d in watch.restored.items() if d["t"] <= restore_timeout}
    per_range = []
    for r in ranges:
        rid = r["id"]
        per_range.append({"range": rid, "low": r["low"], "high": r["high"], "primary_before": r["primary"],
                          **served[rid], "lost_copy_dropped_s": watch.lost_seen.get(rid),
                          "min_insync": watch.min_insync[rid], "restored": in_time.get(rid),
                          "promotions": [{k: e.get(k) for k in ("target", "epoch", "duration_ms", "reason")}
                                         for e in events if e["kind"] == "promote" and e["range"] == rid]})
    all_served = all(p["served"] is not None for p in per_range)
    all_restored = all(p["restored"] is not None for p in per_range)
    done = [p["restored"] for p in per_range if p["restored"]]
    report = {
        "drill": "disk-loss", "seed": seed, "table": table, "victim": victim, "victim_pid": info["pid"],
        "replicas": n, "preloaded_bytes": loaded, "duration_s": duration, "restore_timeout_s": restore_timeout,
        "require_restore": require_restore, "ranges": per_range, "all_served": all_served,
        "worst_served_s": max((p["served"] for p in per_range if p["served"] is not None), default=None),
        "all_restored": all_restored,
        "restored_s": max(d["t"] for d in done) if all_restored and done else None,
        "restored_bytes": sum(d["bytes"] for d in done),
        "client": wl.stats.to_dict(), **verdict, "feed": feed.verdict(wl.writes(), ignore=[PRELOAD]),
        "faults": [{"t": round(kill_t, 3), "until": None, "fault": "disk-loss",
                    "what": f"kill -9 {victim} (pid {info['pid']}) and rm -rf {victim_dir}"}],
    }
    rs = report["restored_s"]
    report["restored_mb_per_s"] = round(report["restored_bytes"] / 1e6 / rs, 3) if rs else None
    report["passed"] = ("verify_error" not in report and report["lost_writes"] == 0 and report["duplicate_applications"] == 0
                        and report["linearizable"] and all_served and (all_restored or not require_restore)
                        and report["feed"]["passed"])
    return report


def _s(t: float | None) -> str:
    return "never" if t is None else f"{t:.3f} s"


def format_report(r: dict[str, Any]) -> str:
    """The report as text; the last line is PASS or FAIL."""
    lines = [f"disk-loss drill: kill -9 {r['victim']} (pid {r['victim_pid']}) + delete its directory; "
             f"{len(r['ranges'])} range(s) x {r['replicas']} replicas; seed {r['seed']}"]
    for p in r["ranges"]:
        goal = "" if p["served"] is None else (" (goal 3 s met)" if p["served"] <= GOAL_S else " (goal 3 s MISSED)")
        lines.append(f"  range {p['range']} [{p['low']!r}, {p['high']!r}) primary {p['primary_before']}:")
        lines.append(f"    served again      {_s(p['served'])}{goal}  (read {_s(p['read'])}, "
                     f"acknowledged write {_s(p['write'])})")
        for e in p["promotions"]:
            lines.append(f"    promoted          {e['target']} (epoch {e['epoch']} -> {e['epoch'] + 1}, {e['duration_ms']} ms: {e['reason']})")
        lines.append(f"    lost copy dropped from in-sync at {_s(p['lost_copy_dropped_s'])}; "
                     f"fewest in-sync {p['min_insync']}")
        res = p["restored"]
        if res is None:
            lines.append(f"    {r['replicas']} in-sync replicas: not restored within {r['restore_timeout_s']:g} s")
        else:
            copied = (f"split or merged since: its keys are now in {', '.join(res['now'])}" if "now" in res
                      else f"{res['bytes'] / 1e6:.2f} MB, {res['mb_per_s']} MB/s")
            lines.append(f"    {r['replicas']} in-sync replicas again at {res['t']:.3f} s ({', '.join(res['insync'])}); "
                         f"new copies {', '.join(res['new_copies']) or 'none'}: {copied}")
    c, lat = r["client"], r["client"]["latency_ms"]
    restore = (f"every range at {r['replicas']} in-sync replicas after {r['restored_s']} s "
               f"({r['restored_bytes'] / 1e6:.2f} MB, {r['restored_mb_per_s']} MB/s)" if r["all_restored"] else
               f"NOT restored to {r['replicas']} in-sync replicas within {r['restore_timeout_s']:g} s"
               + ("" if r["require_restore"] else " (not required: --no-require-restore)"))
    lines += [
        f"  client: {c['ops']} ops, {c['ok']} ok, {c['fail']} failed precondition, {c['unknown']} unknown; "
        f"latency p50 {lat['p50']} ms, p99 {lat['p99']} ms, worst {lat['max']} ms",
        f"  served again:             {'every range, worst ' + _s(r['worst_served_s']) if r['all_served'] else 'NO'}",
        f"  re-replication:           {restore}",
        f"  lost acknowledged writes: {r['lost_writes']}",
        f"  duplicate applications:   {r['duplicate_applications']}",
        f"  linearizable:             {'yes' if r['linearizable'] else 'NO'} ({r['history_ops']} ops checked)",
        f"  {feed_summary(r['feed'])}",
    ]
    if "verify_error" in r:
        lines.append(f"  could not read the table back to check it: {r['verify_error']}")
    else:
        lines += ["  " + x for x in failure_lines(r, r["faults"])]
    lines += ["  " + x for x in feed_lines(r["feed"], r["faults"])]
    lines.append("PASS" if r["passed"] else "FAIL")
    return "\n".join(lines)


@click.command("disk-loss")
@click.option("--server", default=None, help="Partition server id (default: the primary of most drill ranges).")
@click.option("--duration", default=30.0, show_default=True, help="Seconds of workload.")
@click.option("--threads", default=6, show_default=True, help="Client threads.")
@click.option("--seed", type=int, default=None, help="Workload seed (printed, for replay).")
@click.option("--ranges", "pieces", default=4, show_default=True,
              help="Ranges to split the drill table into, their primaries spread over the servers.")
@click.option("--restore-timeout", default=60.0, show_default=True,
              help="Seconds from the kill to wait for every range to have N in-sync replicas again.")
@click.option("--require-restore/--no-require-restore", default=True, show_default=True,
              help="PASS only if every range is back at N in-sync replicas within --restore-timeout.")
@click.option("--preload-mb", default=0.0, show_default=True,
              help="MB of rows to write before the kill, so re-replication has data to copy (MB/s).")
@rate_option
@data_dir_option
@click.option("--json", "as_json", is_flag=True)
def drill_disk_loss(server: str | None, duration: float, threads: int, seed: int | None, pieces: int,
                    restore_timeout: float, require_restore: bool, preload_mb: float, rate: float | None,
                    data_dir: str, as_json: bool) -> None:
    """Kill -9 a partition server and delete its data directory under a verifying workload (needs
    `rangetable up --servers 3 --replicas 3`); reports per range when clients were served again, lost
    acknowledged writes, linearizability, the time until N in-sync replicas again, and the change feed as
    readers (restarted, killed) got it: every acknowledged write exactly once, in order."""
    report = run_disk_loss_drill(data_dir, server=server, duration=duration, threads=threads, seed=seed,
                                 pieces=pieces, restore_timeout=restore_timeout, require_restore=require_restore,
                                 preload_mb=preload_mb, echo=None if as_json else click.echo, rate=rate)
    click.echo(json.dumps(report, indent=2) if as_json else format_report(report))
    if not report["passed"]:
        raise SystemExit(1)
