"""``rangetable drill netsplit``: a replicated multi-host cluster in network namespaces, links cut under load.

The drill builds a bridge and one namespace per host (cli/drills/netns.py) and runs in them, each with its
own directory and nothing shared (cli/drills/netsplit_hosts.py): 3 etcd members, 2 coordinators keeping their
election and map in etcd, 4 partition servers with ``--replicas 3``, 2 native frontends and a client. For each
fault a fresh table spread over the servers takes the verifying workload through both frontends from the
client's namespace, then links are cut (cli/drills/netsplit_faults.py): a partition server that is primary for
some ranges, a follower only, the coordinator leader, an etcd member then a majority of them, and a host with
its disk. Each fault reports the gap, acknowledged writes lost, the linearizability check and its own figures
(cli/drills/netsplit_report.py decides and explains); the last line is PASS or FAIL. Everything is torn down
at the end, also on failure or Ctrl-C. ``--profile short`` runs the faults the test suite runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from typing import Any

import click

from cli.drills.netns import NetnsUnavailable, unavailable_reason
from cli.drills.netsplit_drill import Drill
from cli.drills.netsplit_faults import FAULTS
from cli.drills.netsplit_report import PROFILES, format_report, verdict
from cli.options import json_option, rate_option
from rangetable.errors import TableError


def run_faults(drill: Drill, kinds: list[str]) -> list[dict]:
    """Every fault in turn; a fault that raises is reported with its error and ends the run."""
    out = []
    for kind in kinds:
        try:
            out.append(FAULTS[kind](drill))
        except (RuntimeError, TableError, OSError) as exc:
            out.append({"fault": kind, "target": "?", "error": str(exc)})
            break
        f = out[-1]
        drill.say(f"  {f['fault']}: gap {f['gap_s']} s, lost {f['lost_writes']}, linearizable {f['linearizable']}")
    return out


def run_netsplit(fault_seconds: float = 6.0, lease_s: float = 3.0, threads: int = 4, seed: int | None = None,
                 profile: str = "full", echo: Any = None, leader_timeout_s: float = 1.5,
                 rate: float | None = None) -> dict[str, Any]:
    """Run the drill; returns the report (``passed`` says it all). Raises NetnsUnavailable when it cannot."""
    reason = unavailable_reason()
    if reason:
        raise NetnsUnavailable(reason)
    if shutil.which("etcd") is None:
        raise NetnsUnavailable("the `etcd` binary is not installed (the drill runs a 3-member etcd cluster)")
    seed = int(time.time()) % 10**6 if seed is None else seed
    drill = Drill(fault_seconds, lease_s, threads, seed, echo or (lambda _m: None), leader_timeout_s, rate)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term) if threading.current_thread() is threading.main_thread() else None
    t0 = time.monotonic()
    load = os.getloadavg()
    try:
        try:
            drill.build()
        except (RuntimeError, TableError, OSError) as exc:  # a cluster that does not come up fails the drill
            faults = [{"fault": "setup", "target": "cluster", "error": str(exc)}]
        else:
            faults = run_faults(drill, PROFILES[profile])
        subnet = f"{drill.net.prefix}.{drill.net.subnet}.0/24"
        hosts = len(drill.net.hosts)
    finally:
        if previous is not None:  # a second Ctrl-C must not leave namespaces behind
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            drill.teardown()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
                signal.signal(signal.SIGINT, interrupt)
    return {"drill": "netsplit", "seed": seed, "profile": profile, "lease_s": lease_s, "fault_seconds": fault_seconds,
            "leader_timeout_s": leader_timeout_s,
            "rereplicate_after_s": drill.rereplicate_after_s, "hosts": hosts, "subnet": subnet,
            "elapsed_s": round(time.monotonic() - t0, 1),
            "loadavg": [round(x, 2) for x in (load[0], *os.getloadavg()[:1])],
            "faults": faults, "passed": verdict(faults)}


@click.command("netsplit")
@click.option("--profile", type=click.Choice(sorted(PROFILES)), default="full", show_default=True,
              help="full: every fault; short: the faults the test suite runs.")
@click.option("--fault-seconds", default=6.0, show_default=True, help="How long a host stays cut off.")
@click.option("--lease-s", default=3.0, show_default=True, help="The partition servers' lease.")
@click.option("--leader-timeout-s", default=1.5, show_default=True,
              help="The coordinators' --leader-timeout-s: their etcd lease is this rounded up to whole seconds; it "
                   "must outlast an etcd leader election and stay below the lease minus a takeover.")
@click.option("--threads", default=4, show_default=True, help="Client threads (spread over both frontends).")
@click.option("--seed", type=int, default=None, help="Workload seed (printed, for replay).")
@rate_option
@json_option
def drill_netsplit(profile: str, fault_seconds: float, lease_s: float, leader_timeout_s: float, threads: int,
                   seed: int | None, rate: float | None, as_json: bool) -> None:
    """Cut network links of a replicated cluster spread over network namespaces, with etcd as its control
    plane (needs root, `ip` and `etcd`).

    Exit status: 0 PASS, 1 FAIL, 2 when network namespaces or etcd cannot be used here."""
    try:
        r = run_netsplit(fault_seconds, lease_s, threads, seed, profile, echo=None if as_json else click.echo,
                         leader_timeout_s=leader_timeout_s, rate=rate)
    except NetnsUnavailable as exc:
        click.echo(f"rangetable drill netsplit cannot run here: {exc}", err=True)
        raise SystemExit(2) from None
    click.echo(json.dumps(r, indent=2) if as_json else format_report(r))
    if not r["passed"]:
        raise SystemExit(1)
