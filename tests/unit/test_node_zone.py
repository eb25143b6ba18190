"""rangetable/kernel/node_zone.py: the zone label of a Node, the API URL, and the lookup over a local HTTP server."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rangetable.kernel import node_zone


@pytest.mark.parametrize(("labels", "zone"), [
    ({"topology.kubernetes.io/zone": "eu-1a"}, "eu-1a"),
    ({"failure-domain.beta.kubernetes.io/zone": "old-1"}, "old-1"),
    ({"topology.kubernetes.io/zone": "new", "failure-domain.beta.kubernetes.io/zone": "old"}, "new"),
    ({"topology.kubernetes.io/zone": "", "failure-domain.beta.kubernetes.io/zone": "old"}, "old"),
    ({"kubernetes.io/hostname": "n1"}, ""),
    ({}, ""),
    (None, ""),
])
def test_zone_of(labels: dict | None, zone: str) -> None:
    assert node_zone.zone_of({"metadata": {"labels": labels}}) == zone


def test_zone_of_a_node_without_metadata() -> None:
    assert node_zone.zone_of({}) == ""


def test_node_url() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert node_zone.node_url(env, "node-1") == "https://10.96.0.1:443/api/v1/nodes/node-1"
    assert node_zone.node_url({"KUBERNETES_SERVICE_HOST": "fd00::1"}, "a/b") == "https://[fd00::1]:443/api/v1/nodes/a%2Fb"
    with pytest.raises(ValueError, match="not running in a Kubernetes pod"):
        node_zone.node_url({}, "n")
    with pytest.raises(ValueError, match="no node name"):
        node_zone.node_url(env, "")


@pytest.fixture
def api() -> Iterator[str]:
    """A stand-in API server (plain HTTP, in this process) that answers one Node and checks the token."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            ok = self.path == "/api/v1/nodes/n1" and self.headers["Authorization"] == "Bearer tok"
            body = json.dumps({"metadata": {"labels": {"topology.kubernetes.io/zone": "z9"}}} if ok else {}).encode()
            self.send_response(200 if ok else 403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_fetch_node_sends_the_token(api: str) -> None:
    assert node_zone.zone_of(node_zone.fetch_node(f"{api}/api/v1/nodes/n1", "tok", None)) == "z9"
    with pytest.raises(OSError):  # 403: urllib's HTTPError is an OSError
        node_zone.fetch_node(f"{api}/api/v1/nodes/n1", "wrong", None)


def test_main_usage_and_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert node_zone.main([]) == 2
    out = tmp_path / "zone"
    assert node_zone.main(["n1", str(out)], env={}, sa_dir=str(tmp_path)) == 1  # no token file
    (tmp_path / "token").write_text("tok\n")
    assert node_zone.main(["n1", str(out)], env={}, sa_dir=str(tmp_path)) == 1  # not in a pod
    assert "cannot read node 'n1'" in capsys.readouterr().err and not out.exists()
