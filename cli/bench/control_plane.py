"""``rangetable bench control-plane``: the real coordinator and frontends against simulated servers.

The coordinator's meta store is seeded with one table cut into ``ranges`` ranges spread evenly over
``servers`` server ids; processes of :mod:`cli.workload.simulated` then play those servers
(real sockets, real heartbeats and control commands, no data), the real coordinator process starts
on the seeded map and ``frontends`` real frontend processes fetch it. Measured, in this order:

* **heartbeats**: the coordinator's CPU (``/proc/<pid>/stat``) while every server heartbeats every
  0.5 s (1,000 servers: 2,000 heartbeats/s), and the heartbeat round trip seen by the servers;
* (the balancer runs as usual, but with merges off: the seeded ranges are small and idle, and the
  map should keep its size while it is measured);
* **split**: one split by the coordinator (prepare, split, commit, load, destroy against the
  simulated primary); the bytes published for it and the time until all frontends have the map
  version that holds it;
* **memory**: each frontend's RSS with the whole map, and the coordinator's;
* **failover**: one server is killed; the time until the coordinator declared it dead, and until
  every one of its ranges was loaded (serving) on another server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq

from cli.bench.proc import cpu_seconds, rss_bytes
from rangetable import curve, protocol
from rangetable.errors import TableError
from rangetable.kernel.stats import percentile_ms

ROOT = Path(__file__).resolve().parent.parent
TABLE = "bench"


def range_layout(servers: int, ranges: int) -> tuple[list[str], list[dict]]:
    """Server ids and range records of the seeded map: ``ranges`` contiguous ranges of one table,
    in equal blocks per server (server i owns ranges ``[i·R/S, (i+1)·R/S)``)."""
    sids = [f"sim-{i + 1:04d}" for i in range(servers)]
    recs = []
    for j in range(ranges):
        rid = f"r{j + 1:06d}"
        recs.append({"id": rid, "table": TABLE, "low": "" if j == 0 else f"k{j:07d}",
                     "high": None if j == ranges - 1 else f"k{j + 1:07d}", "primary": sids[j * servers // ranges],
                     "epoch": 1, "path": f"ranges/{rid}", "state": "serving"})
    return sids, recs


def seed_puts(sids: list[str], recs: list[dict]) -> dict[bytes, Any]:
    """The meta-store keys of the catalog, the map and the servers of a seeded cluster."""
    from coordinator.map.partition_map import range_key, table_key

    puts: dict[bytes, Any] = {table_key(TABLE): TABLE, b"meta/version": 1, b"meta/next_id": len(recs) + 1}
    puts.update({range_key(r["id"]): r for r in recs})
    puts.update({b"server/" + s.encode(): {"endpoint": "", "pid": 0} for s in sids})
    return puts


def seed_meta(data_dir: str, sids: list[str], recs: list[dict]) -> None:
    """Write the catalog, the map and the servers into a fresh coordinator meta store."""
    from coordinator.meta.store import MetaStore

    meta = MetaStore(data_dir)
    try:
        meta.commit(seed_puts(sids, recs))
    finally:
        meta.close()


def rss_mib(pid: int) -> float:
    """Resident memory of a process in MiB."""
    return round(rss_bytes(pid) / (1 << 20), 1)


class Bench:
    """The processes of one run and the sockets the benchmark talks to them with."""

    def __init__(self, work: str, servers: int, ranges: int, frontends: int, sim_processes: int,
                 echo: Any) -> None:
        self.work, self.echo = work, echo
        self.n_servers, self.n_ranges, self.n_frontends = servers, ranges, frontends
        self.n_sims = max(1, min(sim_processes, servers))
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, 4096)
        self.procs: list[subprocess.Popen] = []
        self.sim_procs: list[subprocess.Popen] = []
        self.sim_idents: list[bytes] = []
        self.primary_of_sim: dict[str, bytes] = {}
        self._ids = 0

    # --- sockets and processes ------------------------------------------------------------------

    def _socket(self, kind: int) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        return s

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(os.path.join(self.work, "logs", f"{name}.log"), "wb")
        p = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        return p

    def request(self, endpoint: str, body: dict, timeout: float = 30.0) -> Any:
        """One request to a coordinator or frontend endpoint."""
        from cli.coordinator_client import call

        return call(endpoint, body, timeout=timeout)

    def _sim_call(self, ident: bytes, body: dict, timeout: float = 30.0) -> Any:
        self._ids += 1
        rid = b"b%d" % self._ids
        self.control.send_multipart([ident, rid, protocol.pack(body)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.control.poll(100):
                frames = self.control.recv_multipart()
                if len(frames) == 3 and frames[1] == rid:
                    return protocol.result(frames[2])
        raise TimeoutError(f"simulated servers {ident!r} did not answer {body['op']}")

    def sim_stats(self, reset: bool = True) -> list[dict]:
        """Statistics of every simulation process (and reset them)."""
        return [self._sim_call(i, {"op": "stats", "reset": reset}) for i in self.sim_idents]

    def start(self) -> None:
        """Seed the map, start the simulated servers, the coordinator and the frontends."""
        from cli.cluster.port_reservation import PortReservation

        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        data = os.path.join(self.work, "data")
        sids, recs = range_layout(self.n_servers, self.n_ranges)
        seed_meta(data, sids, recs)
        ports = PortReservation()
        self.coordinator = f"tcp://127.0.0.1:{ports.take()}"
        pub = f"tcp://127.0.0.1:{ports.take()}"
        natives = [f"tcp://127.0.0.1:{ports.take()}" for _ in range(self.n_frontends)]
        ports.release()
        self.keys_dir = curve.keys_dir(data)  # CURVE keys, as `rangetable up` makes them
        self.ring = curve.KeyRing.create(self.keys_dir)
        curve.remember(self.coordinator, self.ring.public("coordinator"), self.ring.pair("admin"))
        for n in natives:
            curve.remember(n, self.ring.public("frontend"), self.ring.pair("admin"))
        self.control = self._socket(zmq.ROUTER)
        self.control.bind("tcp://127.0.0.1:0")
        control = self.control.getsockopt_string(zmq.LAST_ENDPOINT)
        owned: dict[str, list] = {s: [] for s in sids}
        for r in recs:
            owned[r["primary"]].append([r["id"], 1])
        for k in range(self.n_sims):
            mine = sids[k::self.n_sims]
            spec = {"coordinator": self.coordinator, "control": control, "keys_dir": self.keys_dir,
                    "servers": [{"id": s, "ranges": owned[s]} for s in mine]}
            path = os.path.join(self.work, f"sim-{k}.json")
            with open(path, "w") as f:
                json.dump(spec, f)
            self.sim_procs.append(self._spawn(f"sim-{k}", ["-m", "cli.workload.simulated", path]))
        deadline = time.monotonic() + 60
        while len(self.sim_idents) < self.n_sims:
            if time.monotonic() > deadline or not self.control.poll(100):
                if time.monotonic() > deadline:
                    raise TimeoutError("simulated servers did not start")
                continue
            ident, kind, body = self.control.recv_multipart()
            if kind == b"ready":
                self.sim_idents.append(ident)
                for sid in protocol.unpack(body):
                    self.primary_of_sim[sid] = ident
        self.coord_proc = self._spawn("coordinator", ["-m", "cli.main", "coordinator", "--data-dir", data,
                                                      "--bind", self.coordinator, "--pub-bind", pub,
                                                      "--startup-grace-s", "300", "--keys-dir", self.keys_dir])
        deadline = time.monotonic() + 60
        while True:  # the coordinator answers NotLeader until it has won its term
            try:
                self.request(self.coordinator, {"op": "list_tables"}, timeout=60)
                break
            except TableError as exc:
                if exc.error_code != "NotLeader" or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        # The seeded ranges are small and idle, so after a minute the balancer would start merging
        # them, one pair a round; merges stay off so the map keeps its size while it is measured.
        self.request(self.coordinator, {"op": "balancer", "action": "set", "key": "merge", "value": "off"})
        # Frontends first, one after the other, while the servers are still quiet: ten processes
        # decoding a 100,000-range snapshot take the CPU that 1,000 simulated servers need to
        # heartbeat on time (on one shared 2-core host; on separate hosts they would not compete).
        # The coordinator's --startup-grace-s keeps the seeded servers alive meanwhile.
        self.fe_procs, self.natives = [], []
        for i, n in enumerate(natives):
            self.fe_procs.append(self._spawn(f"fe-{i + 1}", ["-m", "cli.main", "frontend", "--coordinator",
                                                             self.coordinator, "--native", n, "--frontend-id",
                                                             f"fe-{i + 1}", "--keys-dir", self.keys_dir]))
            self.natives.append(n)
            self.wait_frontends(self.n_ranges)
        for ident in self.sim_idents:
            self._sim_call(ident, {"op": "go"})
        self.wait_registered()

    def wait_registered(self, timeout: float = 120.0) -> None:
        """Until every simulated server is registered and alive at the coordinator."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                st = self.request(self.coordinator, {"op": "servers"}, timeout=10)
                alive = [s for s in st["servers"] if s["alive"] and s["endpoint"]]
                if len(alive) == self.n_servers:
                    return
            except Exception:  # not up yet
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("not every simulated server registered")
            time.sleep(0.5)

    def frontend_versions(self) -> list[dict]:
        """Every frontend's map version and range count, asked of all of them at once."""
        socks = []
        for n in self.natives:
            s = curve.connect(self._socket(zmq.DEALER), n)
            s.send_multipart([b"v", protocol.pack({"op": "map_version"})])
            socks.append(s)
        out = []
        try:
            for s in socks:
                if not s.poll(5000):
                    raise TimeoutError("a frontend did not answer map_version")
                out.append(protocol.result(s.recv_multipart()[-1]))
        finally:
            for s in socks:
                s.close(0)
        return out

    def wait_frontends(self, ranges: int, version: int = 0, timeout: float = 120.0) -> float:
        """Until every frontend holds a map of ``ranges`` ranges (0: any number) at ``version`` or
        later; returns when."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                vs = self.frontend_versions()
                if all(v["version"] >= version and (not ranges or v["ranges"] == ranges) for v in vs):
                    return time.monotonic()
            except TimeoutError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("frontends did not get the map")
            time.sleep(0.002 if version else 0.2)

    def stop(self) -> None:
        """Stop every process this run started (SIGTERM, then SIGKILL) and close the sockets."""
        for ident in self.sim_idents:
            try:
                self._sim_call(ident, {"op": "quit"}, timeout=2)
            except Exception:  # already gone: killed below
                pass
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if hasattr(self, "control"):
            self.control.close(0)
        self.ctx.term()

    # --- measurements ---------------------------------------------------------------------------

    def measure_heartbeats(self, seconds: float) -> dict:
        """Coordinator CPU and heartbeat round trips over ``seconds`` of steady heartbeats."""
        time.sleep(min(3.0, seconds))  # past the registration burst
        self.sim_stats()
        pid = self.coord_proc.pid
        gc0 = self.request(self.coordinator, {"op": "servers"}, timeout=10)["gc"]
        s0 = cpu_seconds([p.pid for p in self.sim_procs])
        c0, t0 = cpu_seconds([pid]), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds([pid]), time.monotonic()
        s1 = cpu_seconds([p.pid for p in self.sim_procs])
        stats = self.sim_stats()
        gc1 = self.request(self.coordinator, {"op": "servers"}, timeout=10)["gc"]
        rtts = sorted(x for s in stats for x in s["rtts"])
        lags = sorted(x for s in stats for x in s["lags"])
        beats = sum(s["heartbeats"] for s in stats)
        return {"heartbeats_per_s": round(beats / (t1 - t0)),
                "coordinator_cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 1),
                "heartbeat_p50_ms": percentile_ms(rtts, 0.50, 2), "heartbeat_p99_ms": percentile_ms(rtts, 0.99, 2),
                "heartbeat_max_ms": round(rtts[-1] * 1000, 2) if rtts else 0.0, "answered": len(rtts),
                "sim_send_lag_p99_ms": percentile_ms(lags, 0.99, 2),
                "sim_cpu_pct_each": round(100 * (s1 - s0) / (t1 - t0) / len(self.sim_procs), 1),
                "coordinator_gc_collections": [b - a for a, b in zip(gc0["collections"], gc1["collections"], strict=True)],
                "coordinator_gc_pause_ms": round(sum(gc1["total_ms"]) - sum(gc0["total_ms"]), 1),
                "coordinator_gc_max_pause_ms": max(gc1["max_ms"])}

    def measure_split(self) -> dict:
        """One split: bytes published for it, and time until every frontend has the new map."""
        snap = self.request(self.coordinator, {"op": "map"}, timeout=30)
        snapshot_bytes = len(protocol.pack(snap))
        rec = snap["ranges"][len(snap["ranges"]) // 2]
        key = rec["low"] + "m"
        sub = self._socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"delta")
        curve.secure_client(sub, self.ring.pair("admin"), self.ring.public("coordinator"))
        sub.connect(snap["pub"])
        time.sleep(0.5)  # the subscription reaches the publisher
        admin = curve.connect(self._socket(zmq.DEALER), self.coordinator)
        try:
            t0 = time.monotonic()
            admin.send_multipart([b"split", protocol.pack({"op": "split", "range": rec["id"], "key": key})])
            published, deltas, commit_v, t_commit = 0, 0, None, None
            while commit_v is None:
                if time.monotonic() - t0 > 30:
                    raise TimeoutError("the split was not published")
                if sub.poll(10):
                    frames = sub.recv_multipart()
                    published += sum(len(f) for f in frames)
                    deltas += 1
                    d = protocol.unpack(frames[1])
                    if rec["id"] in d["removed"]:
                        commit_v, t_commit = d["version"], time.monotonic()
            assert t_commit is not None  # set with commit_v
            t_all = self.wait_frontends(0, commit_v, timeout=30)
            if not admin.poll(30000):
                raise TimeoutError("the split did not finish")
            res = protocol.result(admin.recv_multipart()[-1])
        finally:
            sub.close(0)
            admin.close(0)
        return {"split_range": rec["id"], "split_offline_ms": res["offline_ms"], "deltas": deltas,
                "split_published_bytes": published, "snapshot_bytes": snapshot_bytes,
                "split_commit_ms": round((t_commit - t0) * 1000, 1),
                "split_to_frontends_ms": round((t_all - t0) * 1000, 1),
                "commit_to_frontends_ms": round((t_all - t_commit) * 1000, 1)}

    def measure_memory(self) -> dict:
        """RSS of the frontends (each holding the whole map) and of the coordinator."""
        fe = sorted(rss_mib(p.pid) for p in self.fe_procs)
        return {"frontend_rss_mib_median": fe[len(fe) // 2], "frontend_rss_mib_max": fe[-1],
                "coordinator_rss_mib": rss_mib(self.coord_proc.pid)}

    def measure_failover(self) -> dict:
        """Kill one simulated server; time until it is declared dead and until all its ranges serve
        elsewhere (each answered ``load`` on its new primary)."""
        st = self.request(self.coordinator, {"op": "servers"}, timeout=30)
        victim = max((s for s in st["servers"] if s["alive"]), key=lambda s: (s["ranges"], s["id"]))["id"]
        self.sim_stats()
        killed = self._sim_call(self.primary_of_sim[victim], {"op": "kill", "server": victim})
        lost = set(killed["ranges"])
        loaded: dict[str, list] = {}
        deadline = time.monotonic() + 60
        while not lost <= loaded.keys():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(lost - loaded.keys())} ranges of {victim} were not reassigned")
            time.sleep(0.05)
            for s in self.sim_stats():
                loaded.update(s["loads"])
        done = max(loaded[r][1] for r in lost)
        events = self.request(self.coordinator, {"op": "events", "limit": 1000}, timeout=10)
        dead = [e["time"] for e in events if e["kind"] == "server_dead" and e.get("server") == victim]
        detect = dead[-1] - killed["time"] if dead else None
        return {"failover_server": victim, "failover_ranges": len(lost),
                "failover_detect_s": round(detect, 3) if detect is not None else None,
                "failover_reassign_s": round(done - dead[-1], 3) if dead else None,
                "failover_total_s": round(done - killed["time"], 3),
                "failover_targets": len({loaded[r][0] for r in lost})}


def run_control_plane_bench(servers: int = 1000, ranges: int = 100_000, frontends: int = 10,
                            sim_processes: int = 4, seconds: float = 10.0, work_dir: str | None = None,
                            echo: Any = print) -> dict:
    """Run the whole benchmark and return its figures (see the module doc)."""
    work = work_dir or tempfile.mkdtemp(prefix="rt-cp-")
    bench = Bench(work, servers, ranges, frontends, sim_processes, echo)
    res: dict[str, Any] = {"servers": servers, "ranges": ranges, "frontends": frontends,
                           "sim_processes": bench.n_sims}
    res["host_load_before"] = round(os.getloadavg()[0], 2)  # other work on the host moves every figure
    try:
        t0 = time.monotonic()
        bench.start()
        res["startup_s"] = round(time.monotonic() - t0, 1)
        echo(f"up in {res['startup_s']} s: {servers} simulated servers in {bench.n_sims} processes, "
             f"{ranges} ranges, {frontends} frontends")
        res.update(bench.measure_heartbeats(seconds))
        echo(f"heartbeats: {res['heartbeats_per_s']}/s, coordinator CPU {res['coordinator_cpu_pct']}%")
        res.update(bench.measure_split())
        echo(f"split: {res['split_published_bytes']} bytes published, all frontends in "
             f"{res['split_to_frontends_ms']} ms")
        res.update(bench.measure_memory())
        res.update(bench.measure_failover())
        echo(f"failover of {res['failover_ranges']} ranges: {res['failover_total_s']} s after the kill")
        res["host_load_after"] = round(os.getloadavg()[0], 2)
    finally:
        bench.stop()
        if not work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return res


ROWS = [
    ("heartbeats/s", "heartbeats_per_s", ""), ("coordinator CPU", "coordinator_cpu_pct", "% of a core"),
    ("heartbeat answer p50", "heartbeat_p50_ms", "ms"), ("heartbeat answer p99", "heartbeat_p99_ms", "ms"),
    ("  (simulators' own send lag p99)", "sim_send_lag_p99_ms", "ms"),
    ("  (CPU of each simulator process)", "sim_cpu_pct_each", "% of a core"),
    ("  (coordinator GC pauses in the window)", "coordinator_gc_pause_ms", "ms in all"),
    ("  (longest coordinator GC pause so far)", "coordinator_gc_max_pause_ms", "ms"),
    ("split: bytes published", "split_published_bytes", "B"), ("  (full map snapshot)", "snapshot_bytes", "B"),
    ("split: request -> all frontends", "split_to_frontends_ms", "ms"),
    ("split: commit -> all frontends", "commit_to_frontends_ms", "ms"),
    ("frontend RSS (median)", "frontend_rss_mib_median", "MiB"), ("coordinator RSS", "coordinator_rss_mib", "MiB"),
    ("failover: ranges of the killed server", "failover_ranges", ""),
    ("failover: kill -> declared dead", "failover_detect_s", "s"),
    ("failover: dead -> all serving elsewhere", "failover_reassign_s", "s"),
    ("failover: kill -> all serving elsewhere", "failover_total_s", "s"),
    ("host load average (1 min) before", "host_load_before", ""), ("host load average (1 min) after", "host_load_after", ""),
]


def format_table(res: dict) -> str:
    """The figures as an aligned two-column table."""
    width = max(len(r[0]) for r in ROWS)
    lines = [f"control plane: {res['servers']} servers, {res['ranges']} ranges, {res['frontends']} frontends"]
    for label, key, unit in ROWS:
        lines.append(f"  {label:<{width}}  {res.get(key)} {unit}".rstrip())
    return "\n".join(lines)
