"""The zone of the Kubernetes node a pod runs on, for a partition server's ``--zone``.

The downward API cannot read a *node's* labels, so ``deploy/k8s/partition-servers.yaml`` runs this module
as an initContainer (the same image) under a ServiceAccount allowed to ``get`` nodes::

    python -m rangetable.kernel.node_zone "$NODE_NAME" /topology/zone

It reads ``/api/v1/nodes/NAME`` from the API server with the pod's ServiceAccount token and writes the
node's ``topology.kubernetes.io/zone`` label (the older ``failure-domain.beta.kubernetes.io/zone`` when
that is all there is) to the file, which the partition-server container passes as ``--zone``. A node without
a zone label gives an empty file (the server is then a zone of its own, coordinator/replicas/sets.py).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Mapping

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where Kubernetes mounts a pod's token and CA


def zone_of(node: Mapping) -> str:
    """The zone label of a Node object (``{}`` → ``""``): the GA label first, then the deprecated beta one."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key in ZONE_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def node_url(env: Mapping[str, str], node: str) -> str:
    """The API server's URL of Node ``node``, from the service variables Kubernetes sets in every pod."""
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ValueError("KUBERNETES_SERVICE_HOST is not set: not running in a Kubernetes pod")
    if not node:
        raise ValueError("no node name: pass the downward API's spec.nodeName")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 service address
    return f"https://{host}:{port}/api/v1/nodes/{urllib.parse.quote(node, safe='')}"


def fetch_node(url: str, token: str, cafile: str | None, timeout_s: float = 10.0) -> dict:
    """GET the Node object at ``url`` with a bearer ``token``, verifying the server with ``cafile``."""
    ctx = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as resp:  # noqa: S310 (https or a test URL)
        body: dict = json.loads(resp.read())
        return body


def main(argv: list[str], env: Mapping[str, str] = os.environ, sa_dir: str = SA_DIR) -> int:
    """``NODE OUT``: write the node's zone to OUT; 0 on success, 2 on bad usage, 1 when the lookup fails."""
    if len(argv) != 2:
        print("usage: python -m rangetable.kernel.node_zone NODE_NAME OUT_FILE", file=sys.stderr)
        return 2
    node, out = argv
    try:
        with open(os.path.join(sa_dir, "token")) as f:
            token = f.read().strip()
        zone = zone_of(fetch_node(node_url(env, node), token, os.path.join(sa_dir, "ca.crt")))
    except (OSError, ValueError) as exc:  # urllib's errors are OSErrors; json's are ValueErrors
        print(f"node_zone: cannot read node {node!r}: {exc}", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        f.write(zone)
    print(f"node {node}: zone {zone or '(none: the server is a zone of its own)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
