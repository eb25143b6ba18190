"""The local cluster: start, supervise and stop a coordinator, partition servers and frontends.

``rangetable up`` runs :func:`supervise` in the foreground (or detached with ``--detach``): it picks
ports, starts every process with its output in ``<data-dir>/logs/``, waits until the cluster
answers requests, writes ``<data-dir>/cluster.json``, restarts a process that dies (after a short
back-off), and stops everything on Ctrl-C, SIGTERM or ``rangetable down``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from cli.cluster.port_reservation import PortReservation
from cli.cluster.prefork import RANGETABLE, ForkedProcess, Prefork
from cli.cluster_file import CLUSTER_FILE, connection_string, read_cluster
from cli.dashboard.ports import BROWSER_BLOCKED_PORTS
from rangetable.errors import TableError
from rangetable.files import write_json_atomic

STABLE_AFTER_S = 5.0
"""A process that ran this long before it died was killed, not crash-looping: it restarts after the
shortest back-off. Only a process that dies sooner backs off further (0.5 s, 1, 2, ... 10 s).
(A 30 s window let a frontend killed every ~10 s wait 8 s to come back: 9 s stalls in the chaos drill.)"""


@dataclass
class Child:
    """One supervised process."""

    role: str
    id: str
    argv: list[str]
    log_path: str
    extra: dict = field(default_factory=dict)
    proc: subprocess.Popen | ForkedProcess | None = None
    restarts: int = 0
    started: float = 0.0
    backoff: float = 0.5
    due: float = 0.0

    def start(self, prefork: Prefork) -> None:
        """Launch the process (forked by ``prefork`` when it is a ``rangetable`` command), appending to its log."""
        self.proc = prefork.start(self.argv, self.log_path)
        self.started = time.monotonic()

    def info(self) -> dict:
        """The process entry of cluster.json."""
        return {"role": self.role, "id": self.id, "pid": self.proc.pid if self.proc else None,
                "log": self.log_path, "restarts": self.restarts, **self.extra}


@dataclass
class ClusterSpec:
    """What ``rangetable up`` was asked for."""

    data_dir: str
    servers: int = 2
    frontends: int = 1
    native_port: int = 10012
    restart: bool = True
    sync: bool = False
    lease_s: float = 2.0
    http_port: int = 10002  # REST port of the first HTTP frontend (0 = any free port)
    partition_target: float = 0.0  # entities/s per PartitionKey before ServerBusy; 0 = off
    metrics: bool = True  # every process serves Prometheus /metrics on a port of its own
    cert: str = ""  # PEM certificate and key: the REST endpoint speaks HTTPS
    key: str = ""
    bind_host: str = "127.0.0.1"  # every process listens here (0.0.0.0: all interfaces) …
    advertise_host: str = ""  # … and is reached at this address (empty: bind_host, or 127.0.0.1 for 0.0.0.0)
    dashboard: bool = True  # run the web dashboard (`rangetable dashboard`) as one more process
    dashboard_port: int = 10081  # its port (0 = any free port; browsers refuse 10080)
    coordinators: int = 1  # one leads (elected by a lock on the data root), the others stand by
    oauth: str = ""  # "basic": HTTP frontends accept development bearer tokens (needs cert)
    meta: str = ""  # etcd://HOST:PORT[/prefix]: coordinators elect and keep their state in etcd
    replicas: int = 1  # copies of each range; > 1: each server keeps its own directory <data-dir>/servers/<id>/
    min_insync: int = 2  # a replicated range refuses writes with fewer in-sync replicas
    rereplicate_after_s: float = 10.0  # a replica on a server dead this long is rebuilt elsewhere
    rebuild_mb_s: float = 100.0  # a partition server rebuilds a lost replica at most this fast (0: no limit)
    zones: list[str] = field(default_factory=list)  # zone labels given to the partition servers round-robin
    source: str = ""  # the connection file of the cluster this one follows (a secondary cluster: docs/geo.md)


class Supervisor:
    """Starts and watches the processes of a local cluster."""

    def __init__(self, spec: ClusterSpec, echo: Any = print) -> None:
        self.spec = spec
        self.echo = echo
        self.data_dir = os.path.abspath(spec.data_dir)
        self.logs = os.path.join(self.data_dir, "logs")
        self.children: list[Child] = []
        self.stopping = False
        self._conns: Any = None  # fence()'s kept socket to the coordinator (Connections), made by its first poll
        self.prefork = Prefork()  # forks the Python children from one interpreter that imported them (its start)

    def _cmd(self, *args: str) -> list[str]:
        """A ``rangetable`` command line in this interpreter: the prefix prefork recognises and forks."""
        return [*RANGETABLE, *args]

    def _source(self) -> list[str]:
        """The ``--source`` of a secondary cluster's coordinators and frontends (none for a primary cluster)."""
        return ["--source", self.spec.source] if self.spec.source else []

    def server_dir(self, sid: str) -> str:
        """The data directory of partition server ``sid`` in a replicated cluster (its own disk on a real host)."""
        return os.path.join(self.data_dir, "servers", sid)

    def plan(self) -> None:
        """Create the CURVE keys on first start, choose ports and build every process's command line."""
        from rangetable import curve

        os.makedirs(self.logs, exist_ok=True)
        d = self.data_dir
        self.keys_dir = curve.keys_dir(d)
        self.keys = curve.KeyRing.create(self.keys_dir)
        ports = PortReservation()
        try:
            self._plan_children(d, ports)
        finally:
            ports.release()

    def _plan_children(self, d: str, ports: PortReservation) -> None:
        bind_host = self.spec.bind_host
        adv_host = self.spec.advertise_host or ("127.0.0.1" if bind_host in ("0.0.0.0", "*", "::") else bind_host)

        def pair() -> tuple[str, str]:  # (bind, advertised) endpoints on a fresh port
            port = ports.take()
            return f"tcp://{bind_host}:{port}", f"tcp://{adv_host}:{port}"

        lease = str(self.spec.lease_s)
        endpoints, self.pubs = [], []
        n = self.spec.coordinators
        for i in range(1, n + 1):
            cid = "coordinator" if n == 1 else f"coordinator-{i}"
            (coord_bind, endpoint), (pub_bind, pub) = pair(), pair()
            endpoints.append(endpoint)
            self.pubs.append(pub)
            self.children.append(Child("coordinator", cid, self._cmd(
                "coordinator", "--data-dir", d, "--bind", coord_bind, "--pub-bind", pub_bind, "--advertise", endpoint,
                "--pub-advertise", pub, "--lease-s", lease, "--keys-dir", self.keys_dir,
                "--replicas", str(self.spec.replicas), "--min-insync", str(self.spec.min_insync),
                "--rereplicate-after-s", str(self.spec.rereplicate_after_s),
                *(["--meta", self.spec.meta] if self.spec.meta else []), *self._source()),
                os.path.join(self.logs, f"{cid}.log"), {"endpoint": endpoint, "pub": pub}))
        self.coordinator = ",".join(endpoints)  # every process gets the whole list and finds the leader
        self.pub = self.pubs[0]
        for i in range(1, self.spec.servers + 1):
            sid = f"ps-{i}"
            bind, adv = pair()
            own = d if self.spec.replicas <= 1 else self.server_dir(sid)  # replicas: a directory of its own
            argv = self._cmd("partition-server", "--data-dir", own, "--coordinator", self.coordinator,
                             "--bind", bind, "--advertise", adv, "--server-id", sid, "--keys-dir", self.keys_dir)
            if self.spec.replicas > 1:
                repl_bind, repl_adv = pair()
                argv += ["--replication", repl_bind, "--advertise-replication", repl_adv,
                         "--rebuild-mb-s", str(self.spec.rebuild_mb_s)]
            if self.spec.zones:  # ps-1 gets the first label, ps-2 the second, … round-robin
                argv += ["--zone", self.spec.zones[(i - 1) % len(self.spec.zones)]]
            if self.spec.sync:
                argv.append("--sync")
            if self.spec.partition_target:
                argv += ["--partition-target", str(self.spec.partition_target)]
            self.children.append(Child("partition-server", sid, argv, os.path.join(self.logs, f"{sid}.log"),
                                       {"endpoint": adv}))
        self.natives = []
        for i in range(1, self.spec.frontends + 1):
            port = self.spec.native_port + i - 1 if self.spec.native_port else ports.take()
            native = f"tcp://{adv_host}:{port}"
            self.natives.append(native)
            fid = f"fe-{i}"
            self.children.append(Child("frontend", fid, self._cmd(
                "frontend", "--coordinator", self.coordinator, "--native", f"tcp://{bind_host}:{port}",
                "--frontend-id", fid, "--keys-dir", self.keys_dir, *self._source()),
                os.path.join(self.logs, f"{fid}.log"), {"native": native}))
        # Every HTTP frontend listens on the one REST port (SO_REUSEPORT when there are several), so
        # the SDK's one connection string reaches all of them and the kernel spreads connections.
        port = self.spec.http_port or ports.take()
        scheme = "https" if self.spec.cert else "http"
        url = f"{scheme}://{adv_host}:{port}/devstoreaccount1"
        shared = ["--reuse-port"] if self.spec.frontends > 1 else []
        if self.spec.cert:
            shared += ["--cert", os.path.abspath(self.spec.cert), "--key", os.path.abspath(self.spec.key)]
        if self.spec.oauth:
            shared += ["--oauth", self.spec.oauth]
        self.https = [url]
        for i in range(1, self.spec.frontends + 1):
            hid = f"http-{i}"
            self.children.append(Child("http-frontend", hid, self._cmd(
                "http-frontend", "--coordinator", self.coordinator, "--http", f"{bind_host}:{port}",
                "--frontend-id", hid, "--keys-dir", self.keys_dir, *shared, *self._source()), os.path.join(self.logs, f"{hid}.log"),
                {"http": url}))
        self.dashboard = ""
        if self.spec.dashboard:
            port = self.spec.dashboard_port
            while not port or port in BROWSER_BLOCKED_PORTS:  # a page browsers refuse to open is no use
                port = ports.take()
            self.dashboard = f"http://{adv_host}:{port}/"
            self.children.append(Child("dashboard", "dashboard", self._cmd(
                "dashboard", "--coordinator", self.coordinator, "--dashboard", f"{bind_host}:{port}",
                "--lease-s", lease, "--keys-dir", self.keys_dir), os.path.join(self.logs, "dashboard.log"),
                {"url": self.dashboard}))
        if self.spec.metrics:
            for c in self.children:
                port = ports.take()
                c.argv += ["--metrics", f"{bind_host}:{port}"]
                c.extra["metrics"] = f"http://{adv_host}:{port}/metrics"

    def write_cluster_file(self) -> None:
        """Write cluster.json atomically."""
        doc = {
            "native": self.natives[0],
            "frontends": self.natives,
            "http": self.https[0],
            "connection_string": connection_string(self.https[0]),
            "coordinator": self.coordinator,
            "pub": self.pub,
            "curve": self.keys.connection_info("admin"),
            "data_dir": self.data_dir,
            "supervisor_pid": os.getpid(),
            "processes": [c.info() for c in self.children],
            "metrics": [c.extra["metrics"] for c in self.children if "metrics" in c.extra],
            "dashboard": self.dashboard or None,
        }
        if self.spec.source:  # a secondary cluster: what it follows
            with open(self.spec.source) as f:
                doc.update(source=self.spec.source, source_native=json.load(f).get("native"))
        write_json_atomic(os.path.join(self.data_dir, CLUSTER_FILE), doc, private=True, indent=2)  # the admin key

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the coordinator sees every server and every frontend answers."""
        from cli.coordinator_client import call

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if any(c.proc and c.proc.poll() is not None for c in self.children) and not self.spec.restart:
                raise RuntimeError("a process exited during start-up; see " + self.logs)
            try:
                # Every partition server we started must be registered at the endpoint we gave it
                # (after a restart the coordinator still remembers the previous run's endpoints).
                ours = {c.extra["endpoint"] for c in self.children if c.role == "partition-server"}
                st = call(self.coordinator, {"op": "status"}, timeout=1.0)
                if ours <= {s["endpoint"] for s in st["servers"] if s["alive"]}:
                    for n in self.natives:
                        call(n, {"op": "hello", "version": 1}, timeout=1.0)
                        m = call(n, {"op": "map"}, timeout=1.0)
                        if not m or not ours <= set(m.get("servers", {}).values()):
                            raise TableError("ServerBusy", "frontend has no current map yet")
                    if all(_http_ready(h) for h in self.https) and \
                            (not self.dashboard or _http_ready(self.dashboard + "api/health")):
                        return
            except (TableError, KeyError) as exc:
                last = exc
            self.poll()
            time.sleep(0.1)
        raise RuntimeError(f"cluster did not become ready in {timeout:.0f} s: {last}; see {self.logs}")

    def start(self) -> None:
        """Start every process in order and wait until the cluster serves."""
        from rangetable import curve

        self.plan()
        curve.remember_cluster({"native": self.natives[0], "frontends": self.natives, "coordinator": self.coordinator,
                                "pub": self.pub, "curve": self.keys.connection_info("admin")})
        for c in self.children:
            c.start(self.prefork)
        self.wait_ready()
        self.write_cluster_file()

    def poll(self) -> None:
        """Restart processes that died (after a back-off), unless stopping or --no-restart."""
        now = time.monotonic()
        changed = False
        for c in self.children:
            if c.proc is None or c.proc.poll() is None or self.stopping:
                continue
            if not self.spec.restart or not self.restartable(c):
                continue
            if c.due == 0.0:
                if now - c.started > STABLE_AFTER_S:  # it ran fine, then died: not a crash loop
                    c.backoff = 0.5
                c.due = now + c.backoff
                self.echo(f"{c.id} (pid {c.proc.pid}) exited with {c.proc.returncode}; restarting in {c.backoff:.1f} s")
                # The coordinator comes back within a lease so a crash of it stays invisible to
                # clients; other processes back off further when they keep dying.
                c.backoff = min(c.backoff * 2, 1.0 if c.role == "coordinator" else 10.0)
            elif now >= c.due:
                c.due = 0.0
                c.restarts += 1
                c.start(self.prefork)
                changed = True
                self.echo(f"{c.id} restarted as pid {c.proc.pid}")
        if changed and os.path.exists(os.path.join(self.data_dir, CLUSTER_FILE)):
            self.write_cluster_file()

    def restartable(self, c: Child) -> bool:
        """Whether ``poll`` may restart ``c`` once it died (always, here)."""
        return True

    def fence(self) -> list[str]:
        """Kill partition servers the coordinator declared dead whose process still runs.

        A paused (SIGSTOP) server keeps its RocksDB locks, so no other server can open its ranges;
        its lease has lapsed, so it would answer nothing anyway. Killing it lets failover complete
        (what a multi-host deployment needs instead is described in deploy/README.md).
        """
        from cli.coordinator_client import Connections, call

        self._conns = self._conns or Connections()
        try:
            st = call(self.coordinator, {"op": "status"}, timeout=0.3, conns=self._conns)
        except TableError:
            return []
        killed = []
        dead = {s["id"]: s["pid"] for s in st.get("servers", []) if not s["alive"]}
        for c in self.children:
            if c.role == "partition-server" and c.id in dead and c.proc and c.proc.poll() is None \
                    and c.proc.pid == dead[c.id]:
                c.proc.kill()
                killed.append(c.id)
                self.echo(f"{c.id} (pid {c.proc.pid}) lost its lease but is still running: killed it")
        return killed

    def run(self) -> None:
        """Supervise until asked to stop: restart, fence, and keep every log under its bound."""
        from cli.cluster.log_rotation import CHECK_EVERY_S, rotate_if_large

        next_fence = next_rotation = 0.0
        while not self.stopping:
            self.poll()
            now = time.monotonic()
            if now >= next_fence:
                next_fence = now + 0.5
                self.fence()
            if now >= next_rotation:
                next_rotation = now + CHECK_EVERY_S
                for c in self.children:
                    rotate_if_large(c.log_path)
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop frontends, then partition servers, then the coordinator, then etcd (a drill's hosts run it; the
        coordinators need it until they stop); SIGKILL stragglers."""
        self.stopping = True
        for role in ("dashboard", "http-frontend", "frontend", "partition-server", "coordinator", "etcd"):
            group = [c.proc for c in self.children if c.role == role and c.proc and c.proc.poll() is None]
            for proc in group:
                proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for proc in group:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.prefork.close()
        try:
            os.remove(os.path.join(self.data_dir, CLUSTER_FILE))
        except OSError:
            pass


def _http_ready(url: str) -> bool:
    """True when an HTTP frontend answers (any HTTP status counts)."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(url)
    assert u.hostname is not None  # the supervisor's own URLs: scheme://host:port/...
    if u.scheme == "https":  # only whether it answers: the certificate is the user's to trust
        import ssl

        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            u.hostname, u.port, timeout=1.0, context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=1.0)
    try:
        conn.request("GET", u.path + "/?restype=service&comp=stats")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def supervise(spec: ClusterSpec, echo: Any = print, on_ready: Any = None) -> None:
    """Run a local cluster in the foreground until SIGINT/SIGTERM."""
    sup = Supervisor(spec, echo)

    def stop(signum: int, frame: Any) -> None:
        sup.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        sup.start()
        if on_ready:
            on_ready(read_cluster(sup.data_dir))
        sup.run()
    finally:
        sup.stop()
