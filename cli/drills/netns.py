"""Linux network namespaces as hosts on one bridge: create, run a process in one, cut and heal its link.

A :class:`Network` is a bridge in the root namespace with an address ``10.77.N.1/24`` (so the
process that built it can reach every host) and one namespace per host, joined to the bridge by a
veth pair, with its own address ``10.77.N.k``. Names carry a random token so parallel runs do not
collide, and ``N`` is a /24 no route of this machine uses yet. :meth:`Network.cut` sets the host
side of a veth down (the namespace keeps its address and sockets, but no packet passes);
:meth:`Network.heal` sets it up again. :meth:`Network.destroy` kills whatever still runs in the
namespaces and removes them with the bridge (deleting a namespace deletes its veth pair).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field


class NetnsUnavailable(RuntimeError):
    """This machine cannot build namespaces (not root, no ``ip`` command, or the kernel refused)."""


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (run as root or with CAP_NET_ADMIN/CAP_SYS_ADMIN)"
    token = secrets.token_hex(2)
    ns, bridge, veth = f"rtprobe{token}", f"rtpb{token}", f"rtpv{token}"
    steps = [["netns", "add", ns], ["netns", "exec", ns, "true"], ["link", "add", bridge, "type", "bridge"],
             ["link", "add", veth, "type", "veth", "peer", "name", veth + "n"],
             ["link", "set", veth + "n", "netns", ns]]
    try:
        for step in steps:
            out = subprocess.run(["ip", *step], capture_output=True, text=True)
            if out.returncode != 0:
                return f"`ip {' '.join(step[:2])}` failed: {out.stderr.strip() or out.returncode}"
        return None
    finally:
        for undo in (["link", "del", veth], ["link", "del", bridge], ["netns", "del", ns]):
            subprocess.run(["ip", *undo], capture_output=True)


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS``; raises NetnsUnavailable with its message when it fails and ``check`` is set."""
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise NetnsUnavailable(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def free_subnet(prefix: str = "10.77") -> int:
    """A third octet N such that no route of this machine is inside ``prefix.N.0/24``."""
    routes = ip("-4", "route", "show", "table", "all", check=False)
    used = {line.split()[0].split("/")[0].rsplit(".", 1)[0] for line in routes.splitlines() if line}
    start = secrets.randbelow(250) + 1
    for i in range(250):
        n = (start + i) % 250 + 1
        if f"{prefix}.{n}" not in used:
            return n
    raise NetnsUnavailable(f"every /24 of {prefix}.0.0/16 is in use on this machine")


@dataclass
class Host:
    """One namespace on the bridge."""

    name: str  # the role name given to add_host (``coordinator``, ``ps-1`` …)
    netns: str
    address: str
    veth_host: str  # the end in the root namespace, on the bridge: cut and heal act on it
    cut: bool = False


@dataclass
class Network:
    """A bridge and its namespaces, with unique names per run."""

    prefix: str = "10.77"
    token: str = field(default_factory=lambda: secrets.token_hex(2))
    hosts: dict[str, Host] = field(default_factory=dict)
    subnet: int = 0
    created: bool = False

    @property
    def bridge(self) -> str:
        """The bridge's interface name."""
        return f"rtb{self.token}"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge."""
        return f"{self.prefix}.{self.subnet}.1"

    def create(self) -> None:
        """Create the bridge (with the root namespace's address on it)."""
        self.subnet = free_subnet(self.prefix)
        ip("link", "add", self.bridge, "type", "bridge")
        self.created = True
        ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        """A new namespace joined to the bridge, with the next free address; returns it."""
        k = len(self.hosts) + 2
        host = Host(name, f"rt-{self.token}-{name}", f"{self.prefix}.{self.subnet}.{k}",
                    f"rth{self.token}{k:02d}")
        inner = f"rtn{self.token}{k:02d}"
        self.hosts[name] = host
        ip("netns", "add", host.netns)
        ip("link", "add", host.veth_host, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", host.netns)
        ip("link", "set", host.veth_host, "master", self.bridge, "up")
        ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", inner)
        ip("-n", host.netns, "link", "set", inner, "up")
        ip("-n", host.netns, "link", "set", "lo", "up")
        return host

    def argv(self, name: str, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` inside host ``name``'s namespace (same pid: ip execs it)."""
        return ["ip", "netns", "exec", self.hosts[name].netns, *argv]

    def cut(self, name: str) -> None:
        """Cut host ``name`` off the network: its veth's bridge end goes down."""
        ip("link", "set", self.hosts[name].veth_host, "down")
        self.hosts[name].cut = True

    def heal(self, name: str) -> None:
        """Reconnect host ``name``."""
        ip("link", "set", self.hosts[name].veth_host, "up")
        self.hosts[name].cut = False

    def pids(self, name: str) -> list[int]:
        """The processes running in host ``name``'s namespace."""
        out = ip("netns", "pids", self.hosts[name].netns, check=False)
        return [int(p) for p in out.split() if p.isdigit()]

    def destroy(self) -> list[str]:
        """Kill what still runs in the namespaces, delete them and the bridge; returns what failed."""
        problems = []
        for host in self.hosts.values():
            for pid in self.pids(host.name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for host in self.hosts.values():
            deadline = time.monotonic() + 5
            while self.pids(host.name) and time.monotonic() < deadline:
                time.sleep(0.05)
            subprocess.run(["ip", "link", "del", host.veth_host], capture_output=True)  # the pair, at once (a namespace
            # deleted while something still holds it keeps its veth until that lets go)
            out = subprocess.run(["ip", "netns", "del", host.netns], capture_output=True, text=True)
            if out.returncode != 0 and "No such file" not in out.stderr:
                problems.append(f"netns {host.netns}: {out.stderr.strip()}")
        if self.created:
            out = subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, text=True)
            if out.returncode != 0 and "Cannot find device" not in out.stderr:
                problems.append(f"bridge {self.bridge}: {out.stderr.strip()}")
            self.created = False
        self.hosts.clear()
        return problems
