"""The netsplit drill's machinery: the network and the cluster in it (cli/drills/netsplit_hosts.py), the client
and fence-probe processes in their namespaces, and what every fault of cli/drills/netsplit_faults.py uses (a fresh
table under the verifying workload, cut and heal, the coordinator's status, the row every fault reports)."""

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

from cli.cluster.supervisor import ClusterSpec
from cli.coordinator_client import call
from cli.drills.netns import Network
from cli.drills.netsplit_hosts import HOSTS, NetnsSupervisor
from cli.drills.netsplit_report import (
    ack_times,
    client_errors,
    coordinator_events,
    longest_gap,
    outage,
    range_gaps,
)
from rangetable.errors import TableError


class ClientRun:
    """The workload process in the client namespace for one fault."""

    def __init__(self, net: Network, client_dir: str, table: str, seed: int, threads: int, history_dir: str,
                 rate: float | None) -> None:
        self.out = os.path.join(client_dir, f"client-{table}.json")
        self.log_path = log_path = os.path.join(client_dir, "logs", f"client-{table}.log")
        log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            net.argv("client", [sys.executable, "-m", "cli.drills.netsplit_client", client_dir, table, str(seed),
                                str(threads), self.out, history_dir, str(rate or 0)]), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while not os.path.exists(self.out + ".started"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the client process did not start; see {log_path}")
            time.sleep(0.05)

    def finish(self) -> Any:
        """Stop the workload and return its verified result."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("the client process did not finish verifying within 180 s") from None
        if not os.path.exists(self.out):
            raise RuntimeError(f"the client process ended ({_exit_status(self.proc.returncode)}) without its result; "
                               f"its log ends: {_tail(self.log_path)!r}")
        with open(self.out) as f:
            return json.load(f)

    def kill(self) -> None:
        """Kill the process (on failure or Ctrl-C)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _exit_status(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def _tail(path: str, size: int = 800) -> str:
    """The last ``size`` bytes of a log, or why there are none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"


class FenceProbe(ClientRun):
    """cli/drills/fence_probe.py in the cut server's namespace: does it still answer after its lease?"""

    def __init__(self, net: Network, host: str, host_dir: str, endpoint: str, rng: dict, pk: str) -> None:
        self.out = os.path.join(host_dir, f"fence-{time.monotonic_ns()}.json")
        self.log_path = os.path.join(host_dir, "logs", "fence-probe.log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            net.argv(host, [sys.executable, "-m", "cli.drills.fence_probe", os.path.join(host_dir, "keys"), endpoint,
                            rng["id"], str(rng["epoch"]), pk, self.out]),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        time.sleep(1.0)  # its first rounds, before the cut


class Drill:
    """One run: the network, the cluster, and the faults."""

    def __init__(self, fault_seconds: float, lease_s: float, threads: int, seed: int, echo: Any,
                 leader_timeout_s: float = 1.5, rate: float | None = None) -> None:
        self.fault_seconds, self.lease_s, self.threads, self.seed = fault_seconds, lease_s, threads, seed
        self.rate = rate
        self.leader_timeout_s = leader_timeout_s
        # A cut server's replicas stay in their ranges for the cut (it rejoins and catches up); the host-lost
        # fault waits this long before its replicas are rebuilt elsewhere.
        self.rereplicate_after_s = round(fault_seconds + lease_s + 2.0, 1)
        self.say = echo
        self.net = Network()
        self.root = tempfile.mkdtemp(prefix="rangetable-netsplit-")
        self.sup: NetnsSupervisor | None = None
        self.loop: threading.Thread | None = None
        self.clients: list[ClientRun] = []
        self.n = 0
        self.event_seq = 0  # the coordinator's last event before the current fault
        self.cut_wall = 0.0  # wall-clock time of the current fault's cut (the coordinator's events carry one)
        self.events: list[tuple[float, str]] = []  # (monotonic time, what): the supervisor's actions
        # A failed fault's history outlives the drill's root (removed at teardown).
        self.history_dir = os.path.join(tempfile.gettempdir(), "rangetable-histories")

    @property
    def s(self) -> NetnsSupervisor:
        """The supervisor (after build)."""
        assert self.sup is not None
        return self.sup

    def _supervisor_said(self, message: str) -> None:
        self.events.append((time.monotonic(), f"supervisor: {message}"))
        self.say(f"  supervisor: {message}")

    def build(self) -> None:
        """Create the namespaces and start the cluster in them."""
        self.net.create()
        for name in HOSTS:
            self.net.add_host(name)
        self.say(f"network {self.net.prefix}.{self.net.subnet}.0/24 on bridge {self.net.bridge}: " + ", ".join(
            f"{h.name} {h.address}" for h in self.net.hosts.values()))
        self.sup = NetnsSupervisor(ClusterSpec(self.root, lease_s=self.lease_s, metrics=False, dashboard=False,
                                               replicas=3, min_insync=2),
                                   self.net, self.rereplicate_after_s, self.leader_timeout_s,
                                   echo=self._supervisor_said)
        t0 = time.monotonic()
        self.sup.start()
        self.loop = threading.Thread(target=self.sup.run, daemon=True)
        self.loop.start()
        self.say(f"cluster up in {time.monotonic() - t0:.1f} s; each host's directory under {self.root}/hosts/")

    def teardown(self) -> None:
        """Stop every process and remove the namespaces, the bridge and the drill's root."""
        for c in self.clients:
            c.kill()
        if self.sup is not None:
            self.sup.stopping = True
            if self.loop is not None:
                self.loop.join(timeout=5)
            for h in self.net.hosts.values():
                if h.cut:
                    self.net.heal(h.name)
            self.sup.stop()
        problems = self.net.destroy()
        if os.environ.get("RANGETABLE_NETSPLIT_KEEP"):  # for a post-mortem: every host's directory and logs
            self.say(f"kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
        for p in problems:
            self.say(f"teardown: {p}")

    # --- what every fault uses -------------------------------------------------------------------

    def start_table(self, pieces: int = 4) -> tuple[str, list[dict], ClientRun]:
        """A fresh table spread over the servers, with the verifying workload running on it."""
        self.n += 1
        table = f"ns{self.seed % 10**6}x{self.n}"
        self.until(lambda: self._create(table), "creating the drill table", 60.0)
        keys = [f"p{int(8 * i / pieces):02d}" for i in range(1, pieces)]
        ranges = self.until(lambda: self._spread(table, keys), "spreading the drill table", 60.0)
        try:
            last = call(self.s.coordinator, {"op": "events", "limit": 1}, timeout=5)
            self.event_seq = last[-1]["seq"] if last else 0
        except TableError:
            self.event_seq = 0
        client = ClientRun(self.net, self.s.host_dir("client"), table, self.seed + self.n, self.threads,
                           self.history_dir, self.rate)
        self.clients.append(client)
        time.sleep(2.0)  # warm-up
        return table, ranges, client

    def _spread(self, table: str, keys: list[str]) -> list[dict]:
        """Split ``table`` at ``keys`` and spread its primaries, skipping what is done already, so a retry
        after an error goes on where it stopped."""
        from cli.workload.layout import split_at, spread_primaries

        split_at(self.s.coordinator, table, keys)
        return spread_primaries(self.s.coordinator, table)

    def _create(self, table: str) -> None:
        try:
            call(self.s.natives[0], {"op": "create_table", "table": table}, timeout=10)
        except TableError as exc:
            if exc.error_code != "TableAlreadyExists":  # a retry of a create that went through
                raise

    def until(self, fn: Any, what: str, timeout: float = 30.0) -> Any:
        """``fn()`` retried on TableError until ``timeout``; RuntimeError past it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn()
            except TableError as exc:
                if not exc.retriable:
                    raise RuntimeError(f"{what}: {exc}") from None
                self.say(f"  {what}: {exc} (retrying)")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what}: the cluster did not answer within {timeout:.0f} s ({exc})") from None
                time.sleep(0.2)

    def status(self, timeout: float = 1.0) -> dict | None:
        """The leading coordinator's status, or None."""
        try:
            return call(self.s.coordinator, {"op": "status"}, timeout=timeout)
        except TableError:
            return None

    def table_ranges(self, table: str) -> list[dict]:
        """The ranges of ``table`` now."""
        return [r for r in (self.status(5.0) or {}).get("ranges", []) if r["table"] == table]

    def converge(self, since: float, timeout: float = 30.0) -> float | None:
        """Seconds from ``since`` until the map is valid with every range serving on a live server, or None."""
        from coordinator.map.partition_map import PartitionMap

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if st is not None:
                alive = {s["id"] for s in st["servers"] if s["alive"]}
                if not PartitionMap.from_snapshot(st).check() and all(
                        r["state"] == "serving" and r["primary"] in alive for r in st["ranges"]):
                    return round(time.monotonic() - since, 3)
            time.sleep(0.1)
        return None

    def cut(self, *hosts: str) -> float:
        """Cut ``hosts`` off the network (their processes are not restarted meanwhile); returns when."""
        for h in hosts:
            self.s.held.add(h)
        t = time.monotonic()
        self.cut_wall = time.time()
        for h in hosts:
            self.net.cut(h)
        self.say(f"cut {', '.join(f'{h} ({self.net.hosts[h].address})' for h in hosts)}")
        return t

    def heal(self, *hosts: str) -> float:
        """Reconnect ``hosts``; returns when."""
        for h in hosts:
            self.net.heal(h)
        t = time.monotonic()
        for h in hosts:
            self.s.held.discard(h)
        self.say(f"healed {', '.join(hosts)}")
        return t

    def _injected(self, target: str, res: dict, t_cut: float, t_heal: float, t_end: float) -> list[dict]:
        """The cut and the supervisor's actions during it, on the client's history clock."""
        base = res["t0_monotonic"]
        out = [{"t": round(t_cut - base, 3), "until": round(t_heal - base, 3), "what": f"cut {target}"}]
        out += [{"t": round(t - base, 3), "until": None, "what": what} for t, what in self.events if t_cut <= t <= t_end]
        return out

    def common(self, kind: str, target: str, ranges: list[dict], res: dict, t_cut: float, t_heal: float,
               t_end: float, converged: float | None) -> dict:
        """What every fault reports: the gap, per-range gaps, client errors and the history's verdict."""
        from cli.workload.disk_loss_watch import events_since

        gaps = range_gaps(res["acks"], ranges, t_cut, t_end)
        events = events_since(self.s.coordinator, self.event_seq, {r["id"] for r in ranges})
        began, _ = outage(ack_times(res["acks"]), t_cut, t_end)
        return {"injected": self._injected(target, res, t_cut, t_heal, t_end), "converged_after_heal_s": converged,
                "fault": kind, "target": target,
                "address": ", ".join(self.net.hosts[t].address for t in target.split("+")),
                "cut_s": round(t_heal - t_cut, 2), "gap_s": longest_gap(ack_times(res["acks"]), t_cut, t_end),
                "gap_began_after_cut_s": began,
                "range_gap_s": max(gaps.values(), default=0.0), "client_errors": client_errors(res["client"]),
                "client": res["client"], "lease_s": self.lease_s,
                "coordinator_events": coordinator_events(events, self.cut_wall),
                **{k: res[k] for k in ("lost_writes", "lost_detail", "duplicate_applications", "linearizable",
                                       "linearizability", "linearizability_key", "linearizability_detail",
                                       "linearizability_window", "linearizability_timeouts", "history_ops",
                                       "history_file")}}
