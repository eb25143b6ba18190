"""The netsplit drill's hosts: 3 etcd members, 2 coordinators, 4 partition servers (replicas 3), 2 frontends and
a client, each in its own network namespace (cli/drills/netns.py) with its own directory and nothing shared.

Every host ``H`` gets ``<root>/hosts/H/``: its data directory, its logs and its own copy of the CURVE keys the
operator made once under ``<root>/keys`` (as an operator would copy them to each machine). The etcd members
form a static 3-member cluster on the bridge addresses (``--max-txn-ops 10000`` for the meta store's largest
commits); the coordinators keep their election and map in it (``--meta etcd://e1,e2,e3/prefix``: the client
fails over between members); each partition server has its own ``--data-dir`` and replication endpoint, so a
range's replicas never share a file. Fencing of a cut-off partition server is by epochs and leases alone: the
supervisor here never kills a server the coordinator declared dead (``rangetable up``'s does, for the lock
files of a shared data root).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from cli.cluster.supervisor import Child, ClusterSpec, Supervisor
from cli.cluster_file import CLUSTER_FILE
from cli.drills.netns import Network
from rangetable.files import write_json_atomic

PORTS = {"coordinator": 7000, "pub": 7001, "partition-server": 7100, "replication": 7101, "frontend": 7200,
         "etcd-client": 2379, "etcd-peer": 2380}
ETCD = ["etcd-1", "etcd-2", "etcd-3"]
COORDINATORS = ["coord-1", "coord-2"]
SERVERS = ["ps-1", "ps-2", "ps-3", "ps-4"]
FRONTENDS = ["fe-1", "fe-2"]
# etcd grants no lease shorter than 1.5 election timeouts: with its default 1 s, the coordinators' 1 s leader
# lease (--leader-timeout-s 0.8, rounded up) would last 1.5 s and a standby lead only ~2 s after a cut; at 500 ms
# the TTL is honoured, and an etcd member cut while it leads is replaced within ~0.5-1 s. --pre-vote: a member
# cut off campaigns in vain and, once healed, does not depose the leader with its higher term (a second etcd
# election, and a second coordinator failover, at every heal without it).
ETCD_HEARTBEAT_MS, ETCD_ELECTION_MS = 50, 500
HOSTS = [*ETCD, *COORDINATORS, *SERVERS, *FRONTENDS, "client"]


def etcd_argv(net: Network, name: str, data_dir: str, token: str) -> list[str]:
    """The command line of etcd member ``name`` of the drill's static 3-member cluster."""
    a = net.hosts[name].address
    cluster = ",".join(f"{m}=http://{net.hosts[m].address}:{PORTS['etcd-peer']}" for m in ETCD)
    return ["etcd", "--name", name, "--data-dir", data_dir,
            "--listen-client-urls", f"http://{a}:{PORTS['etcd-client']}",
            "--advertise-client-urls", f"http://{a}:{PORTS['etcd-client']}",
            "--listen-peer-urls", f"http://{a}:{PORTS['etcd-peer']}",
            "--initial-advertise-peer-urls", f"http://{a}:{PORTS['etcd-peer']}",
            "--initial-cluster", cluster, "--initial-cluster-state", "new", "--initial-cluster-token", token,
            "--max-txn-ops", "10000", "--heartbeat-interval", str(ETCD_HEARTBEAT_MS),
            "--election-timeout", str(ETCD_ELECTION_MS), "--pre-vote", "--log-level", "warn"]


def meta_url(net: Network, prefix: str) -> str:
    """``--meta`` naming every etcd member."""
    return "etcd://" + ",".join(f"{net.hosts[m].address}:{PORTS['etcd-client']}" for m in ETCD) + prefix


class NetnsSupervisor(Supervisor):
    """``rangetable up``'s supervisor with every process in its own namespace of ``net`` and its own directory."""

    def __init__(self, spec: ClusterSpec, net: Network, rereplicate_after_s: float, leader_timeout_s: float,
                 echo: Any = print) -> None:
        super().__init__(spec, echo)
        self.net = net
        self.rereplicate_after_s = rereplicate_after_s
        self.leader_timeout_s = leader_timeout_s
        self.held: set[str] = set()  # processes not restarted while their host is cut or lost

    def host_dir(self, host: str) -> str:
        """The directory of ``host`` (its disk)."""
        return os.path.join(self.data_dir, "hosts", host)

    def host_keys(self, host: str) -> str:
        """``host``'s own copy of the CURVE keys."""
        return os.path.join(self.host_dir(host), "keys")

    def _host(self, host: str) -> str:
        d = self.host_dir(host)
        os.makedirs(os.path.join(d, "logs"), exist_ok=True)
        if host not in ETCD and not os.path.isdir(self.host_keys(host)):
            shutil.copytree(self.keys_dir, self.host_keys(host))
        return d

    def log_path(self, host: str) -> str:
        """The log file of the process on ``host``."""
        return os.path.join(self.host_dir(host), "logs", f"{host}.log")

    def _plan_children(self, d: str, ports: Any) -> None:
        net, lease = self.net, str(self.spec.lease_s)
        for h in HOSTS:
            self._host(h)
        for m in ETCD:
            self.children.append(Child("etcd", m, net.argv(m, etcd_argv(net, m, os.path.join(self._host(m), "etcd"),
                                                                          f"rt-{net.token}")), self.log_path(m)))
        meta = meta_url(net, f"/rt-{net.token}")
        endpoints = []
        self.pubs = []
        for c in COORDINATORS:
            a = net.hosts[c].address
            ep, pub = f"tcp://{a}:{PORTS['coordinator']}", f"tcp://{a}:{PORTS['pub']}"
            endpoints.append(ep)
            self.pubs.append(pub)
            self.children.append(Child("coordinator", c, net.argv(c, self._cmd(
                "coordinator", "--data-dir", self._host(c), "--bind", ep, "--pub-bind", pub, "--lease-s", lease,
                "--keys-dir", self.host_keys(c), "--meta", meta, "--replicas", str(self.spec.replicas),
                "--min-insync", str(self.spec.min_insync), "--rereplicate-after-s", str(self.rereplicate_after_s),
                "--leader-timeout-s", str(self.leader_timeout_s))),
                self.log_path(c), {"endpoint": ep, "pub": pub}))
        self.coordinator, self.pub, self.dashboard = ",".join(endpoints), self.pubs[0], ""
        for sid in SERVERS:
            a = net.hosts[sid].address
            ep = f"tcp://{a}:{PORTS['partition-server']}"
            self.children.append(Child("partition-server", sid, net.argv(sid, self._cmd(
                "partition-server", "--data-dir", self._host(sid), "--coordinator", self.coordinator, "--bind", ep,
                "--server-id", sid, "--keys-dir", self.host_keys(sid),
                "--replication", f"tcp://{a}:{PORTS['replication']}")), self.log_path(sid), {"endpoint": ep}))
        self.natives, self.https = [], []
        for fid in FRONTENDS:
            ep = f"tcp://{net.hosts[fid].address}:{PORTS['frontend']}"
            self.natives.append(ep)
            self.children.append(Child("frontend", fid, net.argv(fid, self._cmd(
                "frontend", "--coordinator", self.coordinator, "--native", ep, "--frontend-id", fid,
                "--keys-dir", self.host_keys(fid))), self.log_path(fid), {"native": ep}))

    def write_cluster_file(self) -> None:
        """cluster.json (native frontends only) for the operator, and a copy in the client host's directory."""
        doc = {"native": self.natives[0], "frontends": self.natives, "coordinator": self.coordinator,
               "pub": self.pub, "curve": self.keys.connection_info("admin"), "data_dir": self.data_dir,
               "supervisor_pid": os.getpid(), "processes": [c.info() for c in self.children]}
        for d in (self.data_dir, self.host_dir("client")):
            write_json_atomic(os.path.join(d, CLUSTER_FILE), doc, private=True, indent=2)

    def wait_ready(self, timeout: float = 90.0) -> None:
        """As ``rangetable up``'s, with more time: a dozen processes start at once on a small machine."""
        super().wait_ready(timeout)

    def restartable(self, c: Child) -> bool:
        """Not while its host is cut or lost. (``poll`` used to swap the list of children for one without those
        hosts while it ran, on the supervisor's thread: a fault reading a cut host's child meanwhile found none —
        a CI run's coordinator fault raised StopIteration.)"""
        return c.id not in self.held

    def fence(self) -> list[str]:
        """Nothing: a cut-off partition server is fenced by its lease and the epochs alone."""
        return []

    def child(self, cid: str) -> Child:
        """The supervised process with this id."""
        return next(c for c in self.children if c.id == cid)
