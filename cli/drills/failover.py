"""``rangetable drill failover``: kill (or pause) a partition server under a verifying workload.

The drill creates a fresh table spread over every partition server, runs :class:`Workload`, kills
or SIGSTOPs the server that owns the most of its ranges, and reports a timeline — when the server
died, when the coordinator noticed, when each of its ranges answered again and how it got a new primary
— plus the client's view (operations, failures, worst latency) and the verdicts: lost acknowledged writes,
duplicate applications, linearizability.

On a replicated cluster (``rangetable up``: 3 replicas) the coordinator *promotes* the most advanced in-sync
follower of each range the victim led, at the next epoch (Vertical Paxos II; Kafka's ISR): no data moves.
With one copy (``--replicas 1``) it *fails over*: another server reopens the range from the shared root.
The report names which, and times each from the coordinator's events (:func:`recoveries`).
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import click

from cli.cluster_file import pid_alive, read_cluster
from cli.coordinator_client import call
from cli.drills import coordinator_failover as dc
from cli.drills.drill_table import Prober, pick_victim, prepare_table
from cli.options import data_dir_option, rate_option
from cli.workload.generator import Workload
from cli.workload.layout import table_ranges
from cli.workload.verify.explain import failure_lines
from rangetable.errors import TableError


def recoveries(events: list[dict], watched: set[str], kill_wall: float) -> dict[str, list[dict[str, Any]]]:
    """Per watched range, how the coordinator gave it a primary again after the fault, from its events in
    order: ``promoted`` (an in-sync replica made primary at the next epoch), ``failed over`` (one copy,
    reopened on another server), ``transferred`` (a leadership transfer: a move of a replicated range,
    e.g. by the balancer) or ``moved``; with the new primary, when it was recorded (seconds after the
    fault, ``kill_wall`` on the events' clock), how long the coordinator's step took and why."""
    transfers = {(e.get("range"), e.get("target")) for e in events if e.get("kind") == "move" and e.get("transfer")}
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        rid, kind = e.get("range"), e.get("kind")
        if rid not in watched or kind not in ("promote", "failover", "move"):
            continue
        if kind == "move" and e.get("transfer"):
            continue  # its promote event says it
        if kind == "promote":
            how = "transferred" if (rid, e.get("target")) in transfers else "promoted"
        else:
            how = "failed over" if kind == "failover" else "moved"
        out.setdefault(str(rid), []).append({
            "how": how, "to": e.get("target"), "at_s": round(float(e["time"]) - kill_wall, 3),
            "took_ms": e.get("offline_ms", e.get("duration_ms")), "epoch": e.get("epoch"),
            "reason": e.get("reason", "")})
    return out


def last_event_seq(coord: str) -> int:
    """The number of the coordinator's latest event (0 when it has none)."""
    return max([int(e["seq"]) for e in call(coord, {"op": "events", "limit": 1})] or [0])


def run_failover_drill(data_dir: str, *, mode: str = "kill", server: str | None = None, duration: float = 10.0,
                       threads: int = 6, seed: int | None = None, echo: Any = None,
                       rate: float | None = None) -> dict[str, Any]:
    """Run one failover drill against the cluster of ``data_dir``; returns the report."""
    doc = read_cluster(data_dir)
    if doc is None:
        raise click.ClickException(f"no cluster running on {data_dir}: start one with `rangetable up`")
    coord, native = doc["coordinator"], doc["native"]
    say = echo or (lambda _m: None)
    seed = int(time.time()) if seed is None else seed
    table = f"drill{int(time.time() * 1000) % 10**9}"
    ranges = prepare_table(coord, native, table)
    victim, info = pick_victim(coord, ranges, server)
    watched = [r for r in ranges if r["primary"] == victim]
    say(f"table {table}: {len(ranges)} ranges; victim {victim} (pid {info['pid']}) owns {len(watched)}; seed {seed}")
    wl = Workload(native, table, threads=threads, seed=seed, history_dir=os.path.join(data_dir, "histories"), rate=rate)
    wl.start()
    warmup = min(2.0, duration / 4)
    time.sleep(warmup)
    since = last_event_seq(coord)
    watched = [r for r in table_ranges(coord, table) if r["primary"] == victim]  # the balancer may have moved some
    t0, kill_wall = time.monotonic(), time.time()
    os.kill(info["pid"], signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
    say(f"{'killed' if mode == 'kill' else 'paused'} {victim} (pid {info['pid']}), primary of {len(watched)} "
        "drill ranges now")
    prober = Prober(native, table, watched, t0)
    prober.start()
    noticed, noticed_how = None, None
    while time.monotonic() - t0 < max(duration - warmup, 1.0):
        if noticed is None:
            try:
                now_info = next((s for s in call(coord, {"op": "status"}, timeout=1)["servers"]
                                 if s["id"] == victim), None)
                if now_info and (not now_info["alive"] or now_info["incarnation"] != info["incarnation"]):
                    noticed = round(time.monotonic() - t0, 3)
                    noticed_how = "declared dead" if not now_info["alive"] else "restarted (a new incarnation)"
            except TableError:
                pass
        time.sleep(0.05)
    prober.join(timeout=15)
    prober.stop.set()
    wl.stop()
    if mode == "pause" and pid_alive(info["pid"]):
        os.kill(info["pid"], signal.SIGCONT)  # no supervisor fenced it: let it wake (it must serve nothing)
    say("verifying the history …")
    verdict = wl.verify()
    served = max(prober.served.values()) if prober.served and not prober.pending else None
    try:
        events = call(coord, {"op": "events", "since": since, "limit": 1000}, timeout=5)
    except TableError:
        events = []
    report = {
        "drill": "failover", "mode": mode, "seed": seed, "table": table, "victim": victim,
        "victim_pid": info["pid"], "ranges_on_victim": len(watched),
        "replicas": max((len(r.get("replicas") or [r["primary"]]) for r in ranges), default=1),
        "timeline_s": {"killed": 0.0, "coordinator_noticed": noticed, "noticed_how": noticed_how,
                       "all_ranges_served": served, "per_range_served": prober.served,
                       "never_served": sorted(prober.pending)},
        "recoveries": recoveries(events, {r["id"] for r in watched}, kill_wall),
        "client": wl.stats.to_dict(), **verdict,
        "faults": [{"t": round(t0 - wl.t0, 3), "until": None if mode == "kill" else round(time.monotonic() - wl.t0, 3),
                    "fault": mode, "what": f"{'kill -9' if mode == 'kill' else 'SIGSTOP'} {victim} (pid {info['pid']})"}],
    }
    report["passed"] = (report["lost_writes"] == 0 and report["duplicate_applications"] == 0
                        and report["linearizable"] and served is not None)
    return report


def format_report(r: dict[str, Any]) -> str:
    """The report as text."""
    t, c = r["timeline_s"], r["client"]
    n = r.get("replicas", 1)
    copies = f"{n} replicas each: a promotion of an in-sync replica" if n > 1 else "one copy each: a failover"
    lines = [
        f"failover drill ({r['mode']}) of {r['victim']} (pid {r['victim_pid']}), primary of {r['ranges_on_victim']} "
        f"ranges ({copies}), seed {r['seed']}",
        "  timeline:",
        f"    t=0.000 s   {r['victim']} {'killed (SIGKILL)' if r['mode'] == 'kill' else 'paused (SIGSTOP)'}",
        f"    t={t['coordinator_noticed']} s   coordinator noticed: {t.get('noticed_how') or 'never'}",
        f"    t={t['all_ranges_served']} s   every range served again",
    ]
    for rid, s in sorted(t["per_range_served"].items()):
        lines.append(f"                 {rid} answered at {s} s")
        for x in r.get("recoveries", {}).get(rid, []):
            took = f" in {x['took_ms']} ms" if x["took_ms"] is not None else ""
            lines.append(f"                   {x['how']} to {x['to']} at {x['at_s']} s{took} ({x['reason']})")
    lat = c["latency_ms"]
    lines += [
        f"  client: {c['ops']} ops, {c['ok']} ok, {c['fail']} failed precondition, {c['unknown']} unknown, "
        f"{c['slow_over_1s']} slower than 1 s; latency p50 {lat['p50']} ms, p99 {lat['p99']} ms, "
        f"worst {lat['max']} ms",
        f"  lost acknowledged writes: {r['lost_writes']}",
        f"  duplicate applications:   {r['duplicate_applications']}",
        f"  linearizable:             {'yes' if r['linearizable'] else 'NO'} ({r['history_ops']} ops checked)",
        f"  verdict: {'PASS' if r['passed'] else 'FAIL'}",
    ]
    if t["all_ranges_served"] is None:
        lines.append(f"  not served again: {', '.join(t['never_served'])}")
    lines += ["  " + x for x in failure_lines(r, r["faults"])]
    return "\n".join(lines)


@click.command("failover")
@click.option("--kill", "mode", flag_value="kill", default=True, help="SIGKILL the server (default).")
@click.option("--pause", "mode", flag_value="pause", help="SIGSTOP the server past its lease.")
@click.option("--coordinator", "coordinator", is_flag=True,
              help="Fail the leading coordinator instead (needs `up --coordinators 3`): paused for --pause-s "
                   "with --pause, killed with --kill; reports the worst gap, lost writes and client errors.")
@click.option("--pause-s", default=12.0, show_default=True, help="With --coordinator --pause: how long to pause.")
@click.option("--server", default=None, help="Partition server id (default: the one owning most drill ranges).")
@click.option("--duration", default=10.0, show_default=True, help="Seconds of workload.")
@click.option("--threads", default=6, show_default=True, help="Client threads.")
@click.option("--seed", type=int, default=None, help="Workload seed (printed, for replay).")
@rate_option
@data_dir_option
@click.option("--json", "as_json", is_flag=True)
def drill_failover(mode: str, coordinator: bool, pause_s: float, server: str | None, duration: float, threads: int,
                   seed: int | None, rate: float | None, data_dir: str, as_json: bool) -> None:
    """Kill (or pause) a partition server — or with --coordinator the leading coordinator — under a
    verifying workload and report how the cluster coped."""
    if coordinator:
        rep = dc.run_coordinator_drill(data_dir, mode=mode, pause_s=pause_s, threads=threads, seed=seed,
                                       echo=None if as_json else click.echo, rate=rate)
        click.echo(json.dumps(rep, indent=2) if as_json else dc.format_report(rep))
        if not rep["passed"]:
            raise SystemExit(1)
        return
    report = run_failover_drill(data_dir, mode=mode, server=server, duration=duration, threads=threads, seed=seed,
                                echo=None if as_json else click.echo, rate=rate)
    click.echo(json.dumps(report, indent=2) if as_json else format_report(report))
    if not report["passed"]:
        raise SystemExit(1)
