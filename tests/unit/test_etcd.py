"""Coordinators elected through etcd, their meta store in etcd (``--meta etcd://``), on a real etcd.

The tests that start no process; those that do are in tests/integration/test_etcd.py.
"""
from __future__ import annotations

import pytest

from cli.cluster.port_reservation import PortReservation
from coordinator.etcd.client import parse_url, prefix_end
from coordinator.leadership.etcd_election import EtcdLeadership
from rangetable.errors import TableError


def test_urls_and_prefixes() -> None:
    assert parse_url("etcd://127.0.0.1:2379") == ("http://127.0.0.1:2379", "/rangetable")
    assert parse_url("etcd://h:1/a/b/") == ("http://h:1", "/a/b")
    assert parse_url("etcd://10.0.0.2:2379,10.0.0.3:2379,h:1/p") == (
        "http://10.0.0.2:2379,http://10.0.0.3:2379,http://h:1", "/p")
    for bad in ("http://h:1", "etcd://h", "h:1", "etcd://h:1,h2", "etcd://h:1,,h:2", "etcd://h:x"):
        with pytest.raises(ValueError):
            parse_url(bad)
    assert prefix_end(b"a/") == b"a0" and prefix_end(b"a\xff") == b"b"


def test_without_etcd_a_coordinator_stays_standby() -> None:
    ports = PortReservation()
    port = ports.take()
    ports.release()  # nothing listens there
    le = EtcdLeadership(f"etcd://127.0.0.1:{port}", "tcp://a:1", "tcp://a:2")
    assert le.poll() is None and le.term == 0 and le.deposed()
    le.beat()  # no lease: nothing to renew, no error


def test_a_client_fails_over_to_the_member_that_answers_and_stays_there() -> None:
    import http.server
    import json
    import threading

    from coordinator.etcd.client import EtcdClient

    seen: list[str] = []

    class Member(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            if self.server.server_port == busy.server_port:  # type: ignore[attr-defined]
                self.send_response(503)  # a member without a leader
                self.end_headers()
                return
            body = json.dumps({"header": {"revision": "7"}, "kvs": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    ports = PortReservation()
    dead = ports.take()
    ports.release()  # nothing listens there
    busy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Member)
    good = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Member)
    for srv in (busy, good):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = EtcdClient(f"http://127.0.0.1:{dead},http://127.0.0.1:{busy.server_port},"
                       f"http://127.0.0.1:{good.server_port}", timeout_s=0.5)
        assert c.get(b"k") == (None, 7)
        assert c.base == f"http://127.0.0.1:{good.server_port}" and len(seen) == 2
        assert c.get(b"k") == (None, 7) and len(seen) == 3  # straight to the member that answered
        good.shutdown()
        good.server_close()
        with pytest.raises(TableError) as exc:
            c.get(b"k")
        assert exc.value.error_code == "ServerBusy" and "did not answer" in str(exc.value)
    finally:
        busy.shutdown()
        busy.server_close()


def test_a_commit_asks_the_next_member_when_the_first_hangs() -> None:
    """A member that accepts the request and never answers (an etcd leader cut off with the request in flight)
    gets ``first_try_s``, not the commit's whole timeout; then the next member answers. A lone member gets the
    whole timeout: nobody else could answer."""
    import http.server
    import json
    import socket
    import threading
    import time

    from coordinator.etcd.client import EtcdClient

    class Member(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"succeeded": True, "header": {"revision": "9"}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # accepts (the kernel does) and never answers
    good = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Member)
    threading.Thread(target=good.serve_forever, daemon=True).start()
    try:
        c = EtcdClient(f"http://127.0.0.1:{hung.getsockname()[1]},http://127.0.0.1:{good.server_port}")
        t0 = time.monotonic()
        assert c.txn([], [], timeout_s=10.0, first_try_s=0.3)[0]
        assert 0.3 <= time.monotonic() - t0 < 3.0 and c.base.endswith(str(good.server_port))
        alone = EtcdClient(f"http://127.0.0.1:{hung.getsockname()[1]}")
        t0 = time.monotonic()
        with pytest.raises(TableError):
            alone.txn([], [], timeout_s=0.6, first_try_s=0.1)
        assert time.monotonic() - t0 >= 0.6
    finally:
        good.shutdown()
        good.server_close()
        hung.close()
