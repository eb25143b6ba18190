"""Bearer tokens for development (``--oauth basic``): the pure checks, and the unchanged SDK over HTTPS."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.data.tables import TableServiceClient

from tests.cluster import ROOT, Cluster, ClusterFactory, dev_cert
from tests.unit.test_auth_bearer import make_token

# --- the pure checks ---------------------------------------------------------------------------


def test_cli_refuses_oauth_without_cert(tmp_path: os.PathLike) -> None:
    for argv in (["up", "--data-dir", str(tmp_path), "--oauth", "basic"], ["http-frontend", "--oauth", "basic"]):
        out = subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 1 and "--oauth basic needs HTTPS: pass --cert and --key" in out.stderr
    assert not os.listdir(tmp_path)  # refused before anything was written


# --- end to end: the SDK with a token credential over HTTPS ------------------------------------------


class DevCredential:
    """A TokenCredential handing out a crafted token (what a test double of Azure AD would return)."""

    def __init__(self, **claims: Any) -> None:
        self.claims = claims
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        """A fresh token valid for an hour."""
        self.scopes.append(scopes)
        now = time.time()
        return AccessToken(make_token(now, **self.claims), int(now) + 3600)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A development certificate made by the CLI."""
    return dev_cert(tmp_path_factory.mktemp("tls"))


def test_sdk_with_bearer_tokens_over_https(tmp_path: os.PathLike, cert: tuple[str, str], cluster_factory: ClusterFactory) -> None:
    c, k = cert
    with cluster_factory(extra=["--cert", c, "--key", k, "--oauth", "basic"], data_dir=tmp_path) as cluster:
        cred = DevCredential()
        with TableServiceClient(cluster.http, credential=cred, connection_verify=c) as svc:
            t = svc.create_table("Bearer")
            t.create_entity({"PartitionKey": "p", "RowKey": "r", "n": 7})
            assert t.get_entity("p", "r")["n"] == 7
            t.upsert_entity({"PartitionKey": "p", "RowKey": "r", "n": 8})
            assert [e["n"] for e in t.query_entities("PartitionKey eq 'p'")] == [8]
            assert "Bearer" in [x.name for x in svc.list_tables()]
            t.submit_transaction([("upsert", {"PartitionKey": "b", "RowKey": str(i)}) for i in range(3)])
            assert len(list(t.query_entities("PartitionKey eq 'b'"))) == 3  # a batch under a bearer token
            with pytest.raises(HttpResponseError) as exc:  # not available with OAuth, as in Azurite
                t.get_table_access_policy()
            assert exc.value.status_code == 403
        assert cred.scopes and cred.scopes[0] == ("https://storage.azure.com/.default",)
        # the account URL as audience works too; a foreign audience or an expired token does not
        with TableServiceClient(cluster.http, credential=DevCredential(aud=cluster.http),
                                connection_verify=c) as svc:
            assert svc.get_table_client("Bearer").get_entity("p", "r")["n"] == 8
        for bad in ({"aud": "https://vault.azure.net"}, {"exp": int(time.time()) - 10}):
            with TableServiceClient(cluster.http, credential=DevCredential(**bad), connection_verify=c,
                                    retry_total=0) as svc:
                with pytest.raises(ClientAuthenticationError) as exc:
                    svc.get_table_client("Bearer").get_entity("p", "r")
                assert exc.value.status_code == 403 and "AuthenticationFailed" in str(exc.value)
        # Shared Key keeps working next to bearer tokens
        with TableServiceClient.from_connection_string(cluster.connection_string, connection_verify=c) as svc:
            assert svc.get_table_client("Bearer").get_entity("p", "r")["n"] == 8
        _asgi_round_trip(cluster, c, k, "granian")  # an ASGI server tells the app the scheme itself


def _asgi_round_trip(cluster: Cluster, cert: str, key: str, server: str) -> None:
    """A bearer-token read through an HTTP frontend served by an ASGI server (``--http-server``) over HTTPS."""
    from cli.cluster.port_reservation import PortReservation

    ports = PortReservation()
    port = ports.take()
    ports.release()
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "http-frontend", "--coordinator", cluster.coordinator,
                             "--http", f"127.0.0.1:{port}", "--http-server", server, "--cert", cert, "--key", key,
                             "--oauth", "basic", "--keys-dir", os.path.join(cluster.data_dir, "keys")],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cluster.wait(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True, what=server)
        url = f"https://127.0.0.1:{port}/devstoreaccount1"
        with TableServiceClient(url, credential=DevCredential(), connection_verify=cert) as svc:
            assert svc.get_table_client("Bearer").get_entity("p", "r")["n"] == 8
    finally:
        proc.terminate()
        proc.wait(10)
