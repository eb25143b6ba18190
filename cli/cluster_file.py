"""A local cluster's ``<data-dir>/cluster.json``: read it (remembering its CURVE keys), tell whether
its processes live, stop them (``rangetable down``), and the Azure SDK connection string of its REST
endpoint."""

from __future__ import annotations

import json
import os
import signal
import time

CLUSTER_FILE = "cluster.json"
SOURCE_FILE = "source.json"  # a secondary cluster: the connection file of the cluster it follows (docs/geo.md)


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (and is not a zombie of ours)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def read_cluster(data_dir: str) -> dict | None:
    """The cluster.json of a data dir, or None; its CURVE keys are remembered for its endpoints
    (``curve.remember_cluster``), so ``call`` and the native client can reach them."""
    from rangetable import curve

    try:
        with open(os.path.join(data_dir, CLUSTER_FILE)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    try:
        curve.remember_cluster(doc)
    except (KeyError, TypeError, AttributeError):
        pass  # a malformed key section: calls will say no key is known
    return doc


DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def connection_string(http: str, account: str = "devstoreaccount1", key: str = DEV_KEY) -> str:
    """The Azure SDK connection string for an HTTP frontend's account URL (http:// or https://)."""
    protocol = "https" if http.startswith("https://") else "http"
    return (f"DefaultEndpointsProtocol={protocol};AccountName={account};AccountKey={key};"
            f"TableEndpoint={http};")


def down(data_dir: str, timeout: float = 20.0) -> list[int]:
    """Stop the cluster of a data dir; returns the pids that had to be killed."""
    doc = read_cluster(data_dir)
    if doc is None:
        return []
    pid = doc.get("supervisor_pid")
    if pid and pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    killed = []
    for p in doc.get("processes", []):
        if p.get("pid") and pid_alive(p["pid"]):
            os.kill(p["pid"], signal.SIGKILL)
            killed.append(p["pid"])
    if pid and pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    try:
        os.remove(os.path.join(data_dir, CLUSTER_FILE))
    except OSError:
        pass
    return killed
