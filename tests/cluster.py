"""A real local cluster for tests: `rangetable up --detach` on ephemeral ports and a temporary data dir.

Made and started by the ``cluster_factory`` fixture (tests/conftest.py). Stopping it runs `rangetable down` and then SIGKILLs any process of the
cluster that is still alive, so a failing test never leaks a process.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cli.cluster_file import down, pid_alive, read_cluster
from cli.coordinator_client import call
from rangetable.errors import TableError

ROOT = Path(__file__).resolve().parent.parent


ONE_COPY = ["--replicas", "1"]
"""The one-copy lane (every range once under the shared data root): for a test about that mode, which says so in
its name (``one_copy``); every other test runs `rangetable up`'s defaults (3 servers, 3 replicas, min-insync 2)."""

WORKLOAD_RATE = 200.0
"""Operations per second of a drill's verifying workload in the suite (``--rate``): thousands of operations around
each fault, while four test files share two cores. Unpaced, a drill's client threads take whatever CPU is free
and the suite's other clusters wait for it (a 15 s chaos run: 19.5 core-s unpaced, 12.9 at this rate)."""


def one_copy_named(extra: list[str], name: str) -> None:
    """Refuse ``--replicas 1`` for a test whose name (module or test) does not say ``one_copy``."""
    one = any(a == "--replicas=1" for a in extra) or any(
        a == "--replicas" and b == "1" for a, b in zip(extra, extra[1:], strict=False))
    if one and "one_copy" not in name:
        raise AssertionError(f"{name} starts a one-copy cluster (--replicas 1): the suite runs `rangetable up`'s "
                             "defaults unless a test is about another mode and says so in its name (one_copy)")


class Cluster:
    """A running local cluster (coordinator, partition servers, frontends)."""

    def __init__(self, data_dir: str | os.PathLike, servers: int = 3, frontends: int = 1,
                 extra: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = str(data_dir)
        self.servers = servers
        self.frontends = frontends
        self.extra = extra or []
        self.env = env
        self.doc: dict[str, Any] = {}
        self._pids: set[int] = set()
        self._stopped = False

    def start(self) -> Cluster:
        """Start the cluster and wait until it serves."""
        argv = [sys.executable, "-m", "cli.main", "up", "--detach", "--data-dir", self.data_dir,
                "--native-port", "0", "--http-port", "0", "--dashboard-port", "0", "--servers", str(self.servers),
                "--frontends", str(self.frontends), *self.extra]
        env = {**os.environ, **self.env} if self.env else None
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=90, env=env)
        if out.returncode != 0:
            raise RuntimeError(f"rangetable up failed: {out.stdout}\n{out.stderr}\n{self.logs()}")
        self.refresh()
        return self

    def refresh(self) -> dict:
        """Re-read cluster.json (pids change when the supervisor restarts a process)."""
        self.doc = read_cluster(self.data_dir) or self.doc
        self._pids |= {p["pid"] for p in self.doc.get("processes", []) if p.get("pid")}
        if self.doc.get("supervisor_pid"):
            self._pids.add(self.doc["supervisor_pid"])
        return self.doc

    @property
    def native(self) -> str:
        """The first frontend's native endpoint."""
        return self.doc["native"]

    @property
    def http(self) -> str:
        """The first HTTP frontend's account URL (``http://127.0.0.1:PORT/devstoreaccount1``)."""
        return self.doc["http"]

    @property
    def connection_string(self) -> str:
        """The Azure SDK connection string of the first HTTP frontend."""
        return self.doc["connection_string"]

    @property
    def coordinator(self) -> str:
        """The coordinator's endpoint."""
        return self.doc["coordinator"]

    def pid(self, proc_id: str) -> int:
        """The current pid of a process by id (``coordinator``, ``ps-1``, ``fe-1`` …)."""
        self.refresh()
        for p in self.doc["processes"]:
            if p["id"] == proc_id:
                return p["pid"]
        raise KeyError(proc_id)

    def kill(self, proc_id: str, sig: int = signal.SIGKILL) -> int:
        """Send a signal to one process of the cluster; returns its pid."""
        pid = self.pid(proc_id)
        os.kill(pid, sig)
        return pid

    def status(self) -> dict:
        """The coordinator's status (map + servers)."""
        return call(self.coordinator, {"op": "status"}, timeout=5)

    def admin(self, body: dict, timeout: float = 30, busy_retry_s: float = 0) -> Any:
        """One coordinator request; asked again while it answers ServerBusy, for up to ``busy_retry_s`` (as a
        client does: a split while the balancer moves the range's primary, say)."""
        deadline = time.monotonic() + busy_retry_s
        while True:
            try:
                return call(self.coordinator, body, timeout=timeout)
            except TableError as exc:
                if exc.error_code != "ServerBusy" or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def balancer(self, on: bool) -> None:
        """Turn the coordinator's balancer on or off (what `rangetable balance on|off` sends)."""
        self.admin({"op": "balancer", "action": "on" if on else "off"})

    @contextmanager
    def balancer_off(self) -> Iterator[None]:
        """The balancer off for a block in which the test moves ranges by hand, and on again after it."""
        self.balancer(False)
        try:
            yield
        finally:
            self.balancer(True)

    def wait(self, predicate: Any, timeout: float = 20.0, what: str = "condition") -> Any:
        """Poll until predicate() is truthy (exceptions count as false)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except Exception as exc:  # the cluster may be mid-restart
                last = exc
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}: {last}")

    def check_map(self) -> list[str]:
        """Violations of the map invariants, plus ranges without a live serving primary."""
        from coordinator.map.partition_map import PartitionMap

        st = self.status()
        problems = PartitionMap.from_snapshot(st).check()
        alive = {s["id"] for s in st["servers"] if s["alive"]}
        for r in st["ranges"]:
            if r["state"] != "serving" or r["primary"] not in alive:
                problems.append(f"range {r['id']} is {r['state']} on {r['primary']}")
            else:
                loaded = next(s for s in st["servers"] if s["id"] == r["primary"]).get("load", {})
                if r["id"] not in loaded:
                    problems.append(f"range {r['id']} is not open on {r['primary']}")
        return problems

    def wait_map(self, timeout: float = 20.0, what: str = "a valid, fully served map") -> None:
        """Wait until :meth:`check_map` finds nothing; the failure names what it found last."""
        deadline = time.monotonic() + timeout
        problems: list[str] | str = []
        while time.monotonic() < deadline:
            try:
                problems = self.check_map()
                if not problems:
                    return
            except Exception as exc:  # the cluster may be mid-restart
                problems = repr(exc)
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}: {problems}")

    def logs(self) -> str:
        """The tail of every log, for failure messages."""
        out = []
        logdir = Path(self.data_dir) / "logs"
        for f in sorted(logdir.glob("*.log")) if logdir.exists() else []:
            out.append(f"== {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def logs_between(self, lo: float, hi: float, wall0: float = 0.0) -> str:
        """Every log line stamped between wall times ``lo`` and ``hi``, merged in time order, each with its time
        less ``wall0`` (a drill's history clock) and its process: what each process said around a failure."""
        lines = []
        logdir = Path(self.data_dir) / "logs"
        for f in sorted(logdir.glob("*.log")) if logdir.exists() else []:
            for line in f.read_text(errors="replace").splitlines():
                try:
                    at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                except ValueError:
                    continue  # a traceback's continuation
                if lo <= at <= hi:
                    lines.append((at, f"t={at - wall0:7.2f} {f.stem:12} {line[24:]}"))
        return "\n".join(text for _, text in sorted(lines))

    def stop(self) -> None:
        """Stop the cluster; SIGKILL anything left (once: a second call does nothing)."""
        if self._stopped:
            return
        self._stopped = True
        self.refresh()
        try:
            down(self.data_dir, timeout=15)
        finally:
            for pid in self._pids:
                if pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Cluster:
        """A started cluster (``cluster_factory`` starts it), stopped when the block ends."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


ClusterFactory = Callable[..., Cluster]
"""The type of the ``cluster_factory`` fixture (tests/conftest.py): ``(servers, frontends, extra, env, data_dir,
balancer)``."""


def dev_cert(directory: Path) -> tuple[str, str]:
    """A development certificate and key made by ``rangetable cert create`` in ``directory``."""
    out = subprocess.run([sys.executable, "-m", "cli.main", "cert", "create", "--dir", str(directory), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return str(directory / "cert.pem"), str(directory / "key.pem")
