"""A throw-away single-member etcd for benchmarks and tests: ephemeral ports on 127.0.0.1, a data
directory of its own, stopped (and waited for) by :meth:`LocalEtcd.stop`.

The binary is Debian's ``etcd-server`` package (``apt-get install etcd-server``; etcd 3.4 here).
``--max-txn-ops`` is raised from 128 so that the coordinator's largest commit fits in one
transaction (registering many servers at once, deleting a table with all its ranges), and
``--max-request-bytes`` / ``--quota-backend-bytes`` so that 100,000 ranges can be seeded.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from cli.cluster.port_reservation import PortReservation
from coordinator.etcd.client import EtcdClient
from rangetable.errors import TableError

MAX_TXN_OPS = 10_000
MAX_REQUEST_BYTES = 16 * 1024 * 1024
QUOTA_BACKEND_BYTES = 4 * 1024 ** 3


def etcd_missing() -> str | None:
    """Why etcd cannot be started here (None: it can)."""
    if shutil.which("etcd") is None:
        return "etcd not installed: `make tools` as root, or apt-get install etcd-server, or etcd 3.4+ on PATH"
    return None


class LocalEtcd:
    """One etcd process on ``data_dir``; :meth:`start` again after :meth:`stop` keeps its ports and data."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        ports = PortReservation()
        self.client_port, self.peer_port = ports.take(), ports.take()
        ports.release()
        self.base = f"http://127.0.0.1:{self.client_port}"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The ``--meta`` URL without a prefix."""
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout_s: float = 20.0) -> LocalEtcd:
        """Start etcd and wait until it answers; raises RuntimeError with its log's tail otherwise."""
        peer = f"http://127.0.0.1:{self.peer_port}"
        log_path = f"{self.data_dir}/etcd.log"
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["etcd", "--name", "rt", "--data-dir", f"{self.data_dir}/member-data",
                 "--listen-client-urls", self.base, "--advertise-client-urls", self.base,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"rt={peer}",
                 "--heartbeat-interval", "25", "--election-timeout", "250", "--max-txn-ops", str(MAX_TXN_OPS),
                 "--max-request-bytes", str(MAX_REQUEST_BYTES), "--quota-backend-bytes", str(QUOTA_BACKEND_BYTES)],
                stdout=log, stderr=subprocess.STDOUT)
        client = EtcdClient(self.base)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.get(b"probe")
                return self
            except TableError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    with open(log_path, errors="replace") as f:
                        raise RuntimeError(f"etcd did not start:\n{f.read()[-2000:]}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop etcd (SIGTERM, then SIGKILL after 10 s) and wait for it."""
        p, self.proc = self.proc, None
        if p is None:
            return
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
