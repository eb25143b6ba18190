"""Kept sockets of a polling caller (``cli.coordinator_client.Connections``, the ZeroMQ guide's Lazy Pirate): one
CURVE connection per endpoint while answers come, a new one after a request went unanswered."""

from __future__ import annotations

import threading

import pytest
import zmq

from cli.coordinator_client import Connections, call
from rangetable import curve, protocol
from rangetable.errors import TableError


class Server(threading.Thread):
    """A CURVE ROUTER that answers each request with the number of connections it has seen, or stays silent."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        pair = curve.KeyPair.generate()
        # a context of its own: a ZAP handler that another test left on the shared one would refuse the domain
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        curve.secure_server(self.sock, pair, "test")
        self.endpoint = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        curve.remember(self.endpoint, pair.public, curve.KeyPair.generate())
        self.peers: set[bytes] = set()
        self.silent = False
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            if not self.sock.poll(50):
                continue
            ident, rid, _body = self.sock.recv_multipart()
            self.peers.add(ident)
            if not self.silent:
                self.sock.send_multipart([ident, rid, protocol.ok(len(self.peers))])
        self.sock.close(0)
        self.ctx.term()


@pytest.fixture
def server():
    s = Server()
    s.start()
    yield s
    s.done.set()
    s.join()


def test_one_connection_while_answers_come(server: Server) -> None:
    conns = Connections()
    try:
        assert [call(server.endpoint, {"op": "status"}, timeout=5, conns=conns) for _ in range(5)] == [1] * 5
    finally:
        conns.close()
    assert call(server.endpoint, {"op": "status"}, timeout=5) == 2  # without: a connection of its own


def test_an_unanswered_request_drops_its_socket(server: Server) -> None:
    conns = Connections()
    try:
        assert call(server.endpoint, {"op": "status"}, timeout=5, conns=conns) == 1
        server.silent = True
        with pytest.raises(TableError) as e:
            call(server.endpoint, {"op": "status"}, timeout=0.2, conns=conns)
        assert e.value.error_code == "OperationTimedOut"
        assert conns.take(server.endpoint) is None  # closed: a late answer cannot be read as the next one's
        server.silent = False
        assert call(server.endpoint, {"op": "status"}, timeout=5, conns=conns) == 2  # a new connection
    finally:
        conns.close()


def test_an_endpoint_without_keys_is_refused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(curve, "_endpoints", {})  # no keys remembered by the tests before this one
    monkeypatch.setenv("RANGETABLE_DATA_DIR", str(tmp_path))  # and no cluster.json to find keys in
    with pytest.raises(TableError) as e:
        call("tcp://127.0.0.1:9", {"op": "status"}, timeout=0.2, conns=Connections())
    assert e.value.error_code == "AuthenticationFailed"
