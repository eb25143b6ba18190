"""HTTPS on the REST endpoint: `rangetable cert create`, `rangetable up --cert --key`, the unchanged SDK."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import stat
import subprocess
import sys
import urllib.request

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.data.tables import TableServiceClient

from rangetable.kernel.tls import create_dev_cert, server_context
from tests.cluster import ROOT, Cluster, ClusterFactory, dev_cert


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A development certificate made by the CLI."""
    return dev_cert(tmp_path_factory.mktemp("tls"))


def test_cert_create_makes_a_localhost_certificate(cert: tuple[str, str]) -> None:
    c, k = cert
    assert stat.S_IMODE(os.stat(k).st_mode) == 0o600
    info = ssl._ssl._test_decode_cert(c)  # type: ignore[attr-defined]
    assert ("DNS", "localhost") in info["subjectAltName"] and ("IP Address", "127.0.0.1") in info["subjectAltName"]
    server_context(c, k)
    assert create_dev_cert(os.path.dirname(c)) == (c, k)  # kept, not replaced


def test_bad_certificate_is_refused_before_start(tmp_path: os.PathLike, cert: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        server_context(str(tmp_path) + "/nope.pem", cert[1])
    with pytest.raises(ValueError, match="go together"):
        server_context(cert[0], "")
    out = subprocess.run([sys.executable, "-m", "cli.main", "up", "--data-dir", str(tmp_path), "--cert", cert[1],
                          "--key", cert[1]], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "cannot use TLS certificate" in out.stderr


def test_sdk_round_trip_over_https(tmp_path: os.PathLike, cert: tuple[str, str], cluster_factory: ClusterFactory) -> None:
    c, k = cert
    with cluster_factory(extra=["--cert", c, "--key", k], data_dir=tmp_path) as cluster:
        assert cluster.http.startswith("https://127.0.0.1:")
        assert "DefaultEndpointsProtocol=https;" in cluster.connection_string
        assert f"TableEndpoint={cluster.http};" in cluster.connection_string
        with TableServiceClient.from_connection_string(cluster.connection_string, connection_verify=c) as svc:
            t = svc.create_table("Secure")
            t.create_entity({"PartitionKey": "p", "RowKey": "r", "n": 7})
            assert t.get_entity("p", "r")["n"] == 7
            assert [e["RowKey"] for e in t.query_entities("PartitionKey eq 'p'")] == ["r"]
        # without trusting the development certificate the SDK refuses the server
        with TableServiceClient.from_connection_string(cluster.connection_string, retry_total=0) as svc:
            with pytest.raises(ServiceRequestError):
                svc.get_table_client("Secure").get_entity("p", "r")
        _granian_round_trip(cluster, c, k)
        # plain HTTP on the TLS port gets no answer
        with pytest.raises((OSError, http.client.HTTPException)):
            urllib.request.urlopen(cluster.http.replace("https://", "http://") + "/Tables", timeout=5).read()


def _granian_round_trip(cluster: Cluster, cert: str, key: str) -> None:
    """The same over an HTTP frontend served by granian (`--http-server granian`)."""
    from cli.cluster.port_reservation import PortReservation
    from cli.cluster_file import connection_string

    ports = PortReservation()
    port = ports.take()
    ports.release()
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "http-frontend", "--coordinator", cluster.coordinator,
                             "--http", f"127.0.0.1:{port}", "--http-server", "granian", "--cert", cert, "--key", key,
                             "--keys-dir", os.path.join(cluster.data_dir, "keys")],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"https://127.0.0.1:{port}/devstoreaccount1"
        cluster.wait(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True, what="granian")
        with TableServiceClient.from_connection_string(connection_string(url), connection_verify=cert) as svc:
            assert svc.get_table_client("Secure").get_entity("p", "r")["n"] == 7
    finally:
        proc.terminate()
        proc.wait(10)
