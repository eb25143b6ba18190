"""``rangetable drill netsplit``: a multi-host cluster in network namespaces, and links cut under load.

The drill builds a bridge and one namespace per host (cli/drills/netns.py): the coordinator, 3 partition
servers, 2 native frontends and a client, each with its own address, sharing one data root and the
CURVE keys ``rangetable up`` makes. A supervisor like ``rangetable up``'s runs every process in its
namespace, restarts what dies, and kills a partition server the coordinator declared dead (it still
holds its ranges' RocksDB LOCK files); a cut server is restarted only once its link is healed. For
each fault a fresh table spread over the servers takes the verifying workload through both frontends
from the client's namespace, then one link is cut: (1) a partition server's for ``--fault-seconds``,
(2) the coordinator's for half a lease, then for ``--fault-seconds``, (3) a frontend's. Each fault
reports the gap, acknowledged writes lost, the linearizability check and its own figures
(cli/drills/netsplit_report.py decides); the last line is PASS or FAIL. Everything is torn down at the end,
also on failure or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import click

from cli.cluster_file import CLUSTER_FILE
from cli.coordinator_client import call
from cli.drills.drill_table import Prober, prepare_table
from cli.drills.netns import NetnsUnavailable, Network, unavailable_reason
from cli.drills.netsplit_report import (
    ack_times,
    fence_summary,
    first_after,
    format_report,
    in_ranges,
    longest_gap,
    verdict,
)
from cli.options import json_option
from cli.supervisor import Child, ClusterSpec, Supervisor
from rangetable.errors import TableError
from rangetable.files import write_json_atomic

PORTS = {"coordinator": 7000, "pub": 7001, "partition-server": 7100, "frontend": 7200}


class NetnsSupervisor(Supervisor):
    """``rangetable up``'s supervisor with every process in its own namespace of ``net``."""

    def __init__(self, spec: ClusterSpec, net: Network, echo: Any = print) -> None:
        super().__init__(spec, echo)
        self.net = net
        self.held: set[str] = set()  # processes not restarted while their link is cut

    def _plan_children(self, d: str, ports: Any) -> None:
        net, lease, keys = self.net, str(self.spec.lease_s), self.keys_dir
        a = net.hosts["coordinator"].address
        self.coordinator, self.pub = f"tcp://{a}:{PORTS['coordinator']}", f"tcp://{a}:{PORTS['pub']}"
        self.pubs, self.dashboard = [self.pub], ""  # one coordinator; no dashboard or metrics in the namespaces
        self.children.append(Child("coordinator", "coordinator", net.argv("coordinator", self._cmd(
            "coordinator", "--data-dir", d, "--bind", self.coordinator, "--pub-bind", self.pub, "--lease-s", lease,
            "--keys-dir", keys)), os.path.join(self.logs, "coordinator.log"),
            {"endpoint": self.coordinator, "pub": self.pub}))
        for i in range(1, self.spec.servers + 1):
            sid = f"ps-{i}"
            ep = f"tcp://{net.hosts[sid].address}:{PORTS['partition-server']}"
            self.children.append(Child("partition-server", sid, net.argv(sid, self._cmd(
                "partition-server", "--data-dir", d, "--coordinator", self.coordinator, "--bind", ep,
                "--server-id", sid, "--keys-dir", keys)), os.path.join(self.logs, f"{sid}.log"), {"endpoint": ep}))
        self.natives, self.https = [], []
        for i in range(1, self.spec.frontends + 1):
            fid = f"fe-{i}"
            ep = f"tcp://{net.hosts[fid].address}:{PORTS['frontend']}"
            self.natives.append(ep)
            self.children.append(Child("frontend", fid, net.argv(fid, self._cmd(
                "frontend", "--coordinator", self.coordinator, "--native", ep, "--frontend-id", fid,
                "--keys-dir", keys)), os.path.join(self.logs, f"{fid}.log"), {"native": ep}))

    def write_cluster_file(self) -> None:
        """cluster.json without an HTTP endpoint (the drill runs native frontends only)."""
        doc = {"native": self.natives[0], "frontends": self.natives, "coordinator": self.coordinator,
               "pub": self.pub, "curve": self.keys.connection_info("admin"), "data_dir": self.data_dir,
               "supervisor_pid": os.getpid(), "processes": [c.info() for c in self.children]}
        write_json_atomic(os.path.join(self.data_dir, CLUSTER_FILE), doc, private=True, indent=2)

    def poll(self) -> None:
        """Restart dead processes, except those whose link is cut."""
        everyone = self.children
        self.children = [c for c in everyone if c.id not in self.held]
        try:
            super().poll()
        finally:
            self.children = everyone

    def child(self, cid: str) -> Child:
        """The supervised process with this id."""
        return next(c for c in self.children if c.id == cid)


class ClientRun:
    """The workload process in the client namespace for one fault."""

    def __init__(self, net: Network, data_dir: str, table: str, seed: int, threads: int, history_dir: str) -> None:
        self.out = os.path.join(data_dir, f"client-{table}.json")
        log = open(os.path.join(data_dir, "logs", f"client-{table}.log"), "ab")
        self.proc = subprocess.Popen(
            net.argv("client", [sys.executable, "-m", "cli.drills.netsplit_client", data_dir, table, str(seed), str(threads),
                                self.out, history_dir]), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while not os.path.exists(self.out + ".started"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the client process did not start; see {data_dir}/logs/client-{table}.log")
            time.sleep(0.05)

    def finish(self) -> Any:
        """Stop the workload and return its verified result."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("the client process did not finish verifying within 180 s") from None
        with open(self.out) as f:
            return json.load(f)

    def kill(self) -> None:
        """Kill the process (on failure or Ctrl-C)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class FenceProbe(ClientRun):
    """cli/drills/fence_probe.py in the cut server's namespace: does it still answer after its lease?"""

    def __init__(self, net: Network, host: str, data_dir: str, endpoint: str, rng: dict, pk: str) -> None:
        from rangetable import curve

        self.out = os.path.join(data_dir, f"fence-{host}-{time.monotonic_ns()}.json")
        log = open(os.path.join(data_dir, "logs", "fence-probe.log"), "ab")
        self.proc = subprocess.Popen(
            net.argv(host, [sys.executable, "-m", "cli.drills.fence_probe", curve.keys_dir(data_dir), endpoint, rng["id"],
                            str(rng["epoch"]), pk, self.out]),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        time.sleep(1.0)  # its first rounds, before the cut


class Drill:
    """One run: the network, the cluster, and the faults."""

    def __init__(self, fault_seconds: float, lease_s: float, threads: int, seed: int, echo: Any) -> None:
        self.fault_seconds, self.lease_s, self.threads, self.seed = fault_seconds, lease_s, threads, seed
        self.say = echo
        self.net = Network()
        self.data_dir = tempfile.mkdtemp(prefix="rangetable-netsplit-")
        self.sup: NetnsSupervisor | None = None
        self.clients: list[ClientRun] = []
        self.n = 0
        self.events: list[tuple[float, str]] = []  # (monotonic time, what): the supervisor's actions
        # A failed fault's history outlives the data root (removed at teardown).
        self.history_dir = os.path.join(tempfile.gettempdir(), "rangetable-histories")

    def _supervisor_said(self, message: str) -> None:
        self.events.append((time.monotonic(), f"supervisor: {message}"))
        self.say(f"  supervisor: {message}")

    def build(self) -> None:
        """Create the namespaces and start the cluster in them."""
        self.net.create()
        for name in ["coordinator", "ps-1", "ps-2", "ps-3", "fe-1", "fe-2", "client"]:
            self.net.add_host(name)
        self.say(f"network {self.net.prefix}.{self.net.subnet}.0/24 on bridge {self.net.bridge}: " + ", ".join(
            f"{h.name} {h.address}" for h in self.net.hosts.values()))
        self.sup = NetnsSupervisor(ClusterSpec(self.data_dir, servers=3, frontends=2, lease_s=self.lease_s,
                                               metrics=False, dashboard=False),
                                   self.net, echo=self._supervisor_said)
        self.sup.start()
        self.loop = threading.Thread(target=self.sup.run, daemon=True)
        self.loop.start()
        self.say(f"cluster up, data root {self.data_dir}")

    def teardown(self) -> None:
        """Stop every process and remove the namespaces, the bridge and the data root."""
        for c in self.clients:
            c.kill()
        if self.sup is not None:
            self.sup.stopping = True
            self.loop.join(timeout=5)
            for h in self.net.hosts.values():
                if h.cut:
                    self.net.heal(h.name)
            self.sup.stop()
        problems = self.net.destroy()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        for p in problems:
            self.say(f"teardown: {p}")

    # --- one fault -----------------------------------------------------------------------------

    def _start(self, kind: str) -> tuple[str, list[dict], ClientRun]:
        self.n += 1
        table = f"ns{self.seed % 10**6}x{self.n}"
        ranges = self._until(lambda: prepare_table(self.sup.coordinator, self.sup.natives[0], table),
                             "the drill table")
        client = ClientRun(self.net, self.data_dir, table, self.seed + self.n, self.threads, self.history_dir)
        self.clients.append(client)
        time.sleep(2.0)  # warm-up
        return table, ranges, client

    def _until(self, fn: Any, what: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn()
            except TableError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what}: the cluster did not answer within {timeout:.0f} s") from None
                time.sleep(0.2)

    def _status(self) -> dict | None:
        try:
            return call(self.sup.coordinator, {"op": "status"}, timeout=0.5)
        except TableError:
            return None

    def _converge(self, since: float, timeout: float = 20.0) -> float | None:
        """Seconds from ``since`` until the map is valid with every range serving on a live server, or None."""
        from coordinator.partition_map import PartitionMap

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self._status()
            if st is not None:
                alive = {s["id"] for s in st["servers"] if s["alive"]}
                if not PartitionMap.from_snapshot(st).check() and all(
                        r["state"] == "serving" and r["owner"] in alive for r in st["ranges"]):
                    return round(time.monotonic() - since, 3)
            time.sleep(0.1)
        return None

    def _injected(self, target: str, res: dict, t_cut: float, t_heal: float, t_end: float) -> list[dict]:
        """The cut and the supervisor's actions during it, on the client's history clock."""
        base = res["t0_monotonic"]
        out = [{"t": round(t_cut - base, 3), "until": round(t_heal - base, 3), "what": f"cut {target}"}]
        out += [{"t": round(t - base, 3), "until": None, "what": what} for t, what in self.events if t_cut <= t <= t_end]
        return out

    def _common(self, kind: str, target: str, cut_s: float, res: dict, t_cut: float, t_heal: float, t_end: float,
                converged: float | None) -> dict:
        times = ack_times(res["acks"])
        return {"injected": self._injected(target, res, t_cut, t_heal, t_end), "converged_after_heal_s": converged, "fault": kind, "target": target, "address": self.net.hosts[target].address, "cut_s": cut_s,
                "gap_s": longest_gap(times, t_cut, t_end), "client": res["client"],
                **{k: res[k] for k in ("lost_writes", "lost_detail", "duplicate_applications", "linearizable",
                                       "linearizability", "linearizability_key", "linearizability_detail",
                                       "linearizability_window", "linearizability_timeouts", "history_ops",
                                       "history_file")}}

    def partition_server(self) -> dict:
        """Cut the partition server owning most of the table's ranges; it must fence, fail over, rejoin."""
        table, ranges, client = self._start("partition-server")
        owned: dict[str, int] = {}
        for r in ranges:
            owned[r["owner"]] = owned.get(r["owner"], 0) + 1
        victim = max(sorted(owned), key=lambda s: owned[s])
        watched = [r for r in ranges if r["owner"] == victim]
        old_pid = self.sup.child(victim).proc.pid
        probe = self._fence_probe(victim, watched[0], table)
        self.say(f"cut {victim} ({self.net.hosts[victim].address}, {len(watched)} ranges) for {self.fault_seconds} s")
        self.sup.held.add(victim)
        t_cut = time.monotonic()
        self.net.cut(victim)
        prober = Prober(self.sup.natives[0], table, watched, t_cut)
        prober.start()
        last_owned = t_cut
        ids = {r["id"] for r in watched}
        while time.monotonic() - t_cut < self.fault_seconds:
            st = self._status()
            if st and any(r["id"] in ids and r["owner"] == victim for r in st["ranges"]):
                last_owned = time.monotonic()
            time.sleep(0.1)
        rounds = probe.finish()
        self.net.heal(victim)
        t_heal = time.monotonic()
        self.sup.held.discard(victim)
        self.say(f"healed {victim}")
        rejoined = None
        while time.monotonic() - t_heal < 30 and rejoined is None:
            st = self._status()
            s = next((s for s in (st or {}).get("servers", []) if s["id"] == victim), None)
            if s and s["alive"] and s.get("pid") != old_pid:
                rejoined = round(time.monotonic() - t_heal, 3)
            time.sleep(0.1)
        converged = self._converge(t_heal)
        time.sleep(1.5)
        prober.stop.set()
        t_end = time.monotonic()
        res = client.finish()
        served = max(prober.served.values()) if prober.served and not prober.pending else None
        mine = ack_times(res["acks"], ranges=watched)
        late = [t for t, _ep, pk in res["acks"] if in_ranges(pk, watched) and t_cut + self.lease_s < t <= last_owned]
        return {**self._common("partition-server", victim, self.fault_seconds, res, t_cut, t_heal, t_end,
                                converged),
                "ranges_on_target": len(watched), "lease_s": self.lease_s, "fence": fence_summary(rounds, t_cut, self.lease_s), "acked_by_cut_server": len(late),
                "served_after_cut_s": served,
                "served_after_lease_s": None if served is None else round(max(0.0, served - self.lease_s), 3),
                "target_ranges_gap_s": longest_gap(mine, t_cut, t_end), "rejoined_after_heal_s": rejoined}

    def _fence_probe(self, victim: str, rng: dict, table: str) -> FenceProbe:
        pk = (rng["low"] or "a") + "~fence"
        if not in_ranges(pk, [rng]):
            pk = rng["low"]
        probe = FenceProbe(self.net, victim, self.data_dir, self.sup.child(victim).extra["endpoint"], rng, pk)
        self.clients.append(probe)
        return probe

    def cut_for(self, kind: str, target: str, seconds: float) -> dict:
        """Cut ``target`` for ``seconds`` under the workload; the coordinator and frontend faults."""
        _table, _ranges, client = self._start(kind)
        self.say(f"cut {target} ({self.net.hosts[target].address}) for {seconds} s")
        self.sup.held.add(target)
        t_cut = time.monotonic()
        self.net.cut(target)
        time.sleep(seconds)
        self.net.heal(target)
        t_heal = time.monotonic()
        self.sup.held.discard(target)
        self.say(f"healed {target}")
        converged = self._converge(t_heal)
        settle = t_heal + (3.0 if kind == "coordinator-short" else 8.0) - time.monotonic()
        time.sleep(max(1.5, settle))
        t_end = time.monotonic()
        res = client.finish()
        f = self._common(kind, target, seconds, res, t_cut, t_heal, t_end, converged)
        if kind == "coordinator-long":
            f["writes_resumed_after_heal_s"] = first_after(ack_times(res["acks"]), t_heal)
        if kind == "frontend":
            ep = self.sup.child(target).extra["native"]
            other = next(n for n in self.sup.natives if n != ep)
            f["other_frontend_gap_s"] = longest_gap(ack_times(res["acks"], endpoint=other), t_cut, t_end)
            mine = ack_times(res["acks"], endpoint=ep)
            f["target_gap_s"] = longest_gap(mine, t_cut, t_end)
            f["writes_resumed_after_heal_s"] = first_after(mine, t_heal)
        return f

    def run(self) -> list[dict]:
        """Every fault in turn; a fault that raises is reported with its error and ends the run."""
        steps = [lambda: self.partition_server(),
                 lambda: self.cut_for("coordinator-short", "coordinator", round(self.lease_s / 2, 2)),
                 lambda: self.cut_for("coordinator-long", "coordinator", self.fault_seconds),
                 lambda: self.cut_for("frontend", "fe-2", self.fault_seconds)]
        faults = []
        for step in steps:
            try:
                faults.append(step())
            except (RuntimeError, TableError, OSError) as exc:
                faults.append({"fault": "?", "target": "?", "error": str(exc)})
                break
            self.say(f"  {faults[-1]['fault']}: gap {faults[-1]['gap_s']} s, lost {faults[-1]['lost_writes']}, "
                     f"linearizable {faults[-1]['linearizable']}")
        return faults


def run_netsplit(fault_seconds: float = 10.0, lease_s: float = 2.0, threads: int = 4, seed: int | None = None,
                 echo: Any = None) -> dict[str, Any]:
    """Run the drill; returns the report (``passed`` says it all). Raises NetnsUnavailable when it cannot."""
    reason = unavailable_reason()
    if reason:
        raise NetnsUnavailable(reason)
    seed = int(time.time()) % 10**6 if seed is None else seed
    drill = Drill(fault_seconds, lease_s, threads, seed, echo or (lambda _m: None))

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term) if threading.current_thread() is threading.main_thread() else None
    try:
        try:
            drill.build()
        except (RuntimeError, TableError, OSError) as exc:  # a cluster that does not come up fails the drill
            faults = [{"fault": "setup", "target": "cluster", "error": str(exc)}]
        else:
            faults = drill.run()
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
    return {"drill": "netsplit", "seed": seed, "lease_s": lease_s, "fault_seconds": fault_seconds, "hosts": hosts,
            "subnet": subnet, "faults": faults, "passed": verdict(faults)}


@click.command("netsplit")
@click.option("--fault-seconds", default=10.0, show_default=True,
              help="How long a partition server, the coordinator (second cut) and a frontend stay cut off.")
@click.option("--lease-s", default=2.0, show_default=True, help="The coordinator's lease.")
@click.option("--threads", default=4, show_default=True, help="Client threads (spread over both frontends).")
@click.option("--seed", type=int, default=None, help="Workload seed (printed, for replay).")
@json_option
def drill_netsplit(fault_seconds: float, lease_s: float, threads: int, seed: int | None, as_json: bool) -> None:
    """Cut network links of a cluster spread over network namespaces (needs root and `ip`).

    Exit status: 0 PASS, 1 FAIL, 2 when network namespaces cannot be used here."""
    try:
        r = run_netsplit(fault_seconds, lease_s, threads, seed, echo=None if as_json else click.echo)
    except NetnsUnavailable as exc:
        click.echo(f"rangetable drill netsplit cannot run here: {exc}", err=True)
        raise SystemExit(2) from None
    click.echo(json.dumps(r, indent=2) if as_json else format_report(r))
    if not r["passed"]:
        raise SystemExit(1)
