"""Coordinators elected through etcd, their meta store in etcd (``--meta etcd://``), on a real etcd.

The tests that start no process; those that do are in tests/integration/test_etcd.py.
"""
from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from cli.cluster.port_reservation import PortReservation
from coordinator.etcd.client import EtcdClient, parse_url, prefix_end
from coordinator.leadership.etcd_election import EtcdLeadership
from rangetable.errors import TableError


def fake_member(body: dict, status: int = 200, seen: list[str] | None = None,
                first: list[int] | None = None, hold_first_s: float = 0.0) -> http.server.ThreadingHTTPServer:
    """An etcd member's JSON gateway on 127.0.0.1 that answers every POST with ``status`` and ``body`` (503: a
    member without a leader) — the first ones with the statuses in ``first``, in order; the very first only after
    ``hold_first_s`` (a proposal sent to a leader that was lost) — and records each path in ``seen``; serving on
    a thread of its own (a request each)."""
    raw = json.dumps(body).encode()
    early = list(first or [])
    held = [hold_first_s]

    class Member(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            if seen is not None:
                seen.append(self.path)
            hold, held[0] = held[0], 0.0
            time.sleep(hold)
            self.send_response(early.pop(0) if early else status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Member)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@contextlib.contextmanager
def behind_a_silent_member(member: http.server.ThreadingHTTPServer) -> Iterator[EtcdClient]:
    """A client of two members: first one that accepts requests and never answers (an etcd leader cut off with
    the request in flight), then ``member``; both are closed after."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # accepts (the kernel does) and never answers
    try:
        yield EtcdClient(f"http://127.0.0.1:{hung.getsockname()[1]},http://127.0.0.1:{member.server_port}")
    finally:
        member.shutdown()
        member.server_close()
        hung.close()


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
    seen: list[str] = []
    ports = PortReservation()
    dead = ports.take()
    ports.release()  # nothing listens there
    busy = fake_member({}, 503, seen)
    good = fake_member({"header": {"revision": "7"}, "kvs": []}, 200, seen)
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
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # accepts (the kernel does) and never answers
    good = fake_member({"succeeded": True, "header": {"revision": "9"}})
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


def test_a_commit_asks_the_members_in_turn_while_they_elect_a_leader() -> None:
    """The etcd leader is cut off with the commit in flight; the other member answers "no leader" until it has
    one. The commit asks the members in turn, each for ``first_try_s`` at most, until one serves it — not the
    cut-off leader, nor a member refusing, for the rest of its timeout (which made a dead server's failover
    wait behind other jobs' commits: the netsplit drill)."""
    seen: list[str] = []
    electing = fake_member({"succeeded": True, "header": {"revision": "9"}}, seen=seen, first=[503, 503])
    with behind_a_silent_member(electing) as c:
        t0 = time.monotonic()
        assert c.txn([], [], timeout_s=3.0, first_try_s=0.2)[0]
        took = time.monotonic() - t0
        assert 3 * 0.2 <= took < 1.5, took
        assert len(seen) == 3 and c.base.endswith(str(electing.server_port))


def test_a_commit_does_not_wait_out_a_member_holding_its_request() -> None:
    """A member that got the request while its leader was being lost holds it until etcd's own request timeout (7 s
    at etcd's defaults), though a new request is served as soon as it has a new leader: that member gets
    ``first_try_s`` too, and the next turn's new request succeeds."""
    with behind_a_silent_member(fake_member({"succeeded": True, "header": {"revision": "9"}}, hold_first_s=5.0)) as c:
        t0 = time.monotonic()
        assert c.txn([], [], timeout_s=3.0, first_try_s=0.2)[0]
        took = time.monotonic() - t0
        assert 3 * 0.2 <= took < 1.5, took


def test_a_commit_gives_up_within_its_budget_when_no_member_serves() -> None:
    """etcd lost its majority: the leader is silent, the other member answers "no leader" every time. The
    commit asks them in turn until only the last try's share is left, then the first one once more, and fails
    with ServerBusy within ``first_try_s`` + ``timeout_s`` (and a last connect)."""
    seen: list[str] = []
    with behind_a_silent_member(fake_member({}, 503, seen)) as c:
        t0 = time.monotonic()
        with pytest.raises(TableError) as exc:
            c.txn([], [], timeout_s=1.0, first_try_s=0.1)
        took = time.monotonic() - t0
        assert exc.value.error_code == "ServerBusy"
        assert 1.1 <= took < 2.0, took
        assert len(seen) >= 3  # asked in turn while it could still answer
