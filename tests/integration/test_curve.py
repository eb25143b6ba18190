"""CURVE on every ZeroMQ socket: nothing answers a peer without a key, roles are enforced, client
keys are registered and revoked (`rangetable keys`), refusals are logged (rate-limited)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from rangetable import TableServiceClient, curve, protocol
from rangetable.errors import TableError
from tests.cluster import ROOT, Cluster, ClusterFactory

# --- pure parts --------------------------------------------------------------------------------------


# --- a real cluster ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


def _ps_endpoints(cluster: Cluster) -> list[str]:
    return [p["endpoint"] for p in cluster.doc["processes"] if p["role"] == "partition-server"]


def _dealer(endpoint: str, pair: curve.KeyPair | None = None, server: bytes | None = None) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if pair is not None and server is not None:
        curve.secure_client(sock, pair, server)
    sock.connect(endpoint)
    return sock


def _ask(sock: zmq.Socket, body: dict, timeout_s: float = 5.0) -> object:
    """One request; the reply's result, a TableError, or None when nothing answered."""
    try:
        sock.send_multipart([b"1", protocol.pack(body)], zmq.NOBLOCK)
    except zmq.Again:  # no connection: the server refused the handshake
        return None
    if not sock.poll(int(timeout_s * 1000)):
        return None
    try:
        return protocol.result(sock.recv_multipart()[-1])
    except TableError as exc:
        return exc


def _keys(cluster: Cluster) -> curve.KeyRing:
    return curve.KeyRing.load(os.path.join(cluster.data_dir, "keys"))


def test_files_are_private(cluster: Cluster) -> None:
    assert stat.S_IMODE(os.stat(os.path.join(cluster.data_dir, "cluster.json")).st_mode) == 0o600
    for f in Path(cluster.data_dir, "keys").iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_no_endpoint_answers_a_peer_without_a_key(cluster: Cluster) -> None:
    keys = _keys(cluster)
    stranger = curve.KeyPair.generate()
    targets = [(cluster.native, {"op": "hello", "version": 1}, "frontend"),
               (cluster.coordinator, {"op": "status"}, "coordinator"),
               *[(ep, {"op": "ping"}, "partition-server") for ep in _ps_endpoints(cluster)]]
    socks = []
    for endpoint, body, role in targets:
        plain = _dealer(endpoint)
        wrong = _dealer(endpoint, stranger, keys.public(role))  # CURVE, but a key nobody registered
        socks += [plain, wrong]
        for s in (plain, wrong):
            try:
                s.send_multipart([b"1", protocol.pack(body)], zmq.NOBLOCK)
            except zmq.Again:  # a refused handshake tore the connection down before the send: no peer to queue to
                pass
    time.sleep(1.5)
    try:
        assert [s.poll(0) for s in socks] == [0] * len(socks)
    finally:
        for s in socks:
            s.close(0)
    logs = {n: Path(cluster.data_dir, "logs", f"{n}.log").read_text() for n in ("fe-1", "coordinator", "ps-1", "ps-2", "ps-3")}
    for name, text in logs.items():
        assert "refused a peer" in text, name  # the plain peer
        assert f"refused CURVE key {stranger.user_id}" in text, name  # the unregistered key
        assert text.count("refused") < 20, name  # rate-limited, though both peers keep reconnecting


def test_map_updates_reach_only_keyed_subscribers(cluster: Cluster) -> None:
    keys = _keys(cluster)
    subs = []
    for pair in (None, curve.KeyPair.generate(), keys.pair("frontend")):
        s = zmq.Context.instance().socket(zmq.SUB)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        if pair is not None:
            curve.secure_client(s, pair, keys.public("coordinator"))
        s.connect(cluster.doc["pub"])
        subs.append(s)
    try:
        plain, stranger, frontend = subs
        assert frontend.poll(5000) and frontend.recv_multipart()[0] in (b"hugz", b"map", b"cuts")  # each every second
        assert plain.poll(0) == 0 and stranger.poll(1500) == 0
    finally:
        for s in subs:
            s.close(0)


def test_keyed_clients_work(cluster: Cluster) -> None:
    svc = TableServiceClient.from_cluster(cluster.data_dir)  # the admin key from cluster.json, no extra step
    t = svc.create_table_if_not_exists("Keyed")
    t.upsert_entity({"PartitionKey": "p", "RowKey": "r", "n": 1})
    assert t.get_entity("p", "r")["n"] == 1
    assert cluster.status()["servers"]  # the CLI's coordinator calls


def test_roles_are_enforced(cluster: Cluster) -> None:
    keys = _keys(cluster)
    ps = _ps_endpoints(cluster)[0]
    as_frontend = _dealer(ps, keys.pair("frontend"), keys.public("partition-server"))
    as_coordinator = _dealer(ps, keys.pair("coordinator"), keys.public("partition-server"))
    as_admin = _dealer(ps, keys.pair("admin"), keys.public("partition-server"))
    to_coord = _dealer(cluster.coordinator, keys.pair("frontend"), keys.public("coordinator"))
    try:
        for op in ({"op": "unload", "range": "r999999", "epoch": 1, "version": 1}, {"op": "destroy", "range": "r999999"}):
            err = _ask(as_frontend, op)
            assert isinstance(err, TableError) and err.error_code == "AuthorizationPermissionMismatch", err
        assert _ask(as_frontend, {"op": "ping"})["server"]
        res = _ask(as_coordinator, {"op": "split_key", "range": "r999999", "epoch": 1})
        assert not (isinstance(res, TableError) and res.error_code.startswith("Authorization")), res
        assert _ask(as_admin, {"op": "ping"}, timeout_s=1.0) is None  # the admin key is not on a partition server's list
        beat = {"op": "heartbeat", "server": "evil", "endpoint": "tcp://127.0.0.1:1", "incarnation": "x", "ranges": []}
        err = _ask(to_coord, beat)
        assert isinstance(err, TableError) and err.error_code == "AuthorizationPermissionMismatch"
        err = _ask(to_coord, {"op": "keys_add", "name": "x", "account": "devstoreaccount1",
                              "public": curve.KeyPair.generate().user_id})
        assert isinstance(err, TableError) and err.error_code == "AuthorizationPermissionMismatch"
        assert "evil" not in {s["id"] for s in cluster.status()["servers"]}
    finally:
        for s in (as_frontend, as_coordinator, as_admin, to_coord):
            s.close(0)


def _cli(cluster: Cluster, *args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "RANGETABLE_DATA_DIR": cluster.data_dir}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=60, env={**env, "PYTHONPATH": str(ROOT)})


def test_registered_client_key_works_until_revoked(cluster: Cluster, tmp_path: Path) -> None:
    TableServiceClient.from_cluster(cluster.data_dir).create_table_if_not_exists("Keyed")
    conn = tmp_path / "app.json"
    out = _cli(cluster, "keys", "add", "app-1", "--account", "devstoreaccount1", "--out", str(conn), "--json")
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(conn.stat().st_mode) == 0o600
    doc = json.loads(conn.read_text())
    assert doc["curve"]["client"]["public"] == json.loads(out.stdout)["public"]
    listed = json.loads(_cli(cluster, "keys", "list", "--json").stdout)
    assert [k["name"] for k in listed["keys"]] == ["app-1"]
    # a cluster started role by role has no cluster.json: the coordinator's endpoint and the keys dir do
    by_endpoint = _cli(cluster, "keys", "list", "--coordinator", cluster.coordinator, "--data-dir", str(tmp_path),
                       "--json")
    assert by_endpoint.returncode != 0 and "rangetable keys init" in by_endpoint.stderr  # no keys there
    by_endpoint = _cli(cluster, "keys", "list", "--coordinator", cluster.coordinator, "--json")
    assert json.loads(by_endpoint.stdout) == listed
    client = TableServiceClient.from_cluster(str(conn), timeout=1.0)
    t = client.get_table_client("Keyed")
    deadline = time.monotonic() + 10  # frontends learn of the new key from the next hugz (≤ 1 s)
    while True:
        try:
            t.upsert_entity({"PartitionKey": "p", "RowKey": "app", "n": 2})
            break
        except TableError as exc:  # refused while the frontends had not yet fetched the new key
            assert exc.error_code in ("AuthenticationFailed", "OperationTimedOut"), exc
            assert time.monotonic() < deadline, "the registered key was never admitted"
    assert t.get_entity("p", "app")["n"] == 2
    out = _cli(cluster, "keys", "revoke", "app-1")
    assert out.returncode == 0 and "revoked app-1" in out.stdout, out.stderr
    deadline = time.monotonic() + 10
    while True:  # the open connection stops working too: its request goes unanswered (the retry on a
        try:     # new connection is then refused at the handshake)
            t.get_entity("p", "app")
        except TableError as exc:
            assert exc.error_code in ("OperationTimedOut", "AuthenticationFailed"), exc
            break
        assert time.monotonic() < deadline, "the revoked key still works"
        time.sleep(0.2)
    fresh = TableServiceClient.from_cluster(str(conn), timeout=1.0).get_table_client("Keyed")
    with pytest.raises(TableError) as e:  # a new connection's handshake is refused: the client says so
        fresh.get_entity("p", "app")
    assert e.value.error_code == "AuthenticationFailed" and "refused this client's CURVE key" in e.value.message
    assert "not a registered client key" in Path(cluster.data_dir, "logs", "fe-1.log").read_text()
    assert _cli(cluster, "keys", "revoke", "app-1").returncode != 0  # already gone: ResourceNotFound
