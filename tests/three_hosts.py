"""deploy/README.md's three-host install, run from deploy/systemd's own files on this machine.

Each "host" is one loopback address (127.0.0.11, .12, .13 stand in for 10.0.0.1, .2, .3) with a directory
tree of its own standing in for its ``/etc/rangetable`` and ``/var/lib/rangetable``: nothing is shared
between hosts but the keys, copied as the README says. The processes are the units' ``ExecStart`` lines
(``%i`` and ``${VAR}`` expanded as systemd does) with the host's env files as their environment, so a flag or
variable that does not work in the shipped files fails here. What systemd itself adds (the watchdog,
restarts, sandboxing) is not exercised: PID 1 here is not systemd. Ports are remapped to free ones.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster import ROOT

SYSTEMD = ROOT / "deploy" / "systemd"
HOSTS = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
LOCAL = {"a": "127.0.0.11", "b": "127.0.0.12", "c": "127.0.0.13"}
INSTANCES = {"coordinator": "{h}", "partition-server": "ps-{h}", "frontend": "fe-{h}", "http-frontend": "http-{h}"}
PORTS = (10010, 10011, 10020, 10021, 10012, 10002, 2379, 2380)


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a systemd EnvironmentFile (comments and blank lines skipped, no expansion)."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path}: not KEY=VALUE: {line!r}"
            env[key.strip()] = value.strip()
    return env


def exec_start(unit: Path) -> str:
    """The unit's ExecStart line."""
    lines = [ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    return lines[0].removeprefix("ExecStart=")


def expand(line: str, instance: str, env: dict[str, str]) -> list[str]:
    """An ExecStart line as systemd runs it: ``%i`` is the instance, ``${VAR}`` comes from the environment."""
    line = line.replace("%i", instance)
    line = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], line)
    return shlex.split(line)


def free_ports(n: int) -> list[int]:
    """``n`` ports free on every address right now (bound on the wildcard, then released)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("0.0.0.0", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class Hosts:
    """Three hosts' processes, started from the shipped units and env files."""

    root: Path
    ports: dict[int, int] = field(default_factory=dict)
    procs: dict[tuple[str, str], subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        self.admin = self.root / "admin"

    def local(self, text: str) -> str:
        """A shipped file's text for this machine: the hosts' loopback addresses and the free ports."""
        for h, ip in HOSTS.items():
            text = text.replace(ip, LOCAL[h])
        return re.sub(r":(\d{4,5})\b", lambda m: f":{self.ports.get(int(m.group(1)), int(m.group(1)))}", text)

    def paths(self, h: str, word: str) -> str:
        """A path of host ``h``: its own /etc/rangetable and /var/lib/rangetable, the checkout's rangetable."""
        word = word.replace("/etc/rangetable", str(self.root / f"host-{h}" / "etc"))
        return word.replace("/var/lib/rangetable", str(self.root / f"host-{h}" / "var"))

    def env(self, h: str, name: str) -> dict[str, str]:
        """Host ``h``'s env file ``name`` (from deploy/systemd/hosts/), made local."""
        path = SYSTEMD / "hosts" / f"host-{h}" / name
        return {k: self.paths(h, self.local(v)) for k, v in read_env_file(path).items()}

    def argv(self, h: str, unit: str, instance: str, env: dict[str, str]) -> list[str]:
        """What unit ``unit`` (instance ``instance``) runs on host ``h``."""
        words = [self.paths(h, w) for w in expand(self.local(exec_start(SYSTEMD / unit)), instance, env)]
        if words[0] == "/opt/rangetable/bin/rangetable":
            return [sys.executable, "-m", "cli.main", *words[1:]]
        return [shutil.which(Path(words[0]).name) or words[0], *words[1:]]

    def start(self, h: str, role: str) -> None:
        """Start ``role`` (etcd or a rangetable role) on host ``h``, as its unit would."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("RANGETABLE_")}
        base["PYTHONPATH"] = str(ROOT)
        if role == "etcd":
            env = self.env(h, "etcd.env")
            argv = self.argv(h, "rangetable-etcd.service", "", env)
        else:
            env = self.env(h, "rangetable.env")
            argv = self.argv(h, f"rangetable-{role}@.service", INSTANCES[role].format(h=h), env)
        log = open(self.root / f"host-{h}" / f"{role}.log", "ab")
        self.procs[(h, role)] = subprocess.Popen(argv, env={**base, **env}, cwd=self.root / f"host-{h}",
                                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def install(self) -> None:
        """The README's steps before the first start: keys once, copied to every host's /etc/rangetable."""
        self.admin.mkdir(parents=True, exist_ok=True)
        natives = [a for h in HOSTS for a in ("--native", self.native(h))]
        self.rangetable("keys", "init", "--data-dir", str(self.admin), "--coordinator", self.coordinators(), *natives)
        self.rangetable("cert", "create", "--dir", str(self.admin / "tls"))
        for h in HOSTS:
            etc, var = self.root / f"host-{h}" / "etc", self.root / f"host-{h}" / "var"
            var.mkdir(parents=True)
            shutil.copytree(self.admin / "keys", etc / "keys")
            os.remove(etc / "keys" / "admin.key_secret")  # the admin's secret stays on the admin machine
            shutil.copytree(self.admin / "tls", etc / "tls")

    def wait_etcd(self, timeout_s: float = 30.0) -> None:
        """Until every member answers /health with the quorum up."""
        deadline = time.monotonic() + timeout_s
        for h in HOSTS:
            url = f"http://{LOCAL[h]}:{self.ports[2379]}/health"
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=1) as r:
                        if b'"true"' in r.read():
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, self.log(h, "etcd")
                time.sleep(0.2)

    def rangetable(self, *args: str, timeout_s: float = 30.0) -> str:
        """Run an admin command on the admin machine (its own keys directory); its output."""
        out = subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=self.admin, capture_output=True,
                             text=True, timeout=timeout_s, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, f"rangetable {shlex.join(args)}: {out.stdout}{out.stderr}"
        return out.stdout

    def coordinators(self) -> str:
        """The RANGETABLE_COORDINATOR list of the env files, made local."""
        return self.env("a", "rangetable.env")["RANGETABLE_COORDINATOR"]

    def native(self, h: str) -> str:
        """Host ``h``'s native frontend endpoint."""
        return f"tcp://{LOCAL[h]}:{self.ports[10012]}"

    def kill_host(self, h: str) -> None:
        """Host ``h`` lost: every process of it killed at once."""
        for (host, _), p in self.procs.items():
            if host == h and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)

    def log(self, h: str, role: str) -> str:
        """The tail of a process's log."""
        path = self.root / f"host-{h}" / f"{role}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        """Every process: SIGTERM, then SIGKILL after 5 s."""
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
