"""The built-in HTTP/1.1 listener over real sockets: keep-alive, pipelining, bodies, limits, bad input.

The app behind it is the real :class:`RestApp` on a stub frontend (the REST semantics have their own
tests); these cases are about the wire: what the listener reads, answers and when it closes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from frontend.http import listener as listener_mod
from frontend.http.app import RestApp
from frontend.http.listener import open_listener
from tests.unit.test_rest_app import StubFrontend

ENTITY = b'{"PartitionKey":"p","RowKey":"r","A":1}'


@contextmanager
def listening(app: RestApp) -> Iterator[dict]:
    """Serve ``app`` with a listener on an ephemeral 127.0.0.1 port, its loop on a thread; yields
    ``{"listener", "loop"}`` and closes everything on the way out."""
    loop = asyncio.new_event_loop()
    box: dict = {}
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        box["listener"] = loop.run_until_complete(open_listener(app, "127.0.0.1", 0))
        ready.set()
        loop.run_forever()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    assert ready.wait(5)
    box["loop"] = loop
    try:
        yield box
    finally:
        asyncio.run_coroutine_threadsafe(box["listener"].close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)
        loop.close()


@pytest.fixture
def server():
    """The listener in front of the real app on a stub frontend."""
    app = RestApp(StubFrontend())
    app.security.enabled = False
    with listening(app) as box:
        yield box


def connect(box: dict) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", box["listener"].port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Reader:
    """Reads HTTP/1.1 responses off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def response(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            assert self._fill(), f"connection closed mid-response: {self.buf!r}"
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        n = 0 if head_only or status in (100, 204) and "content-length" not in headers else int(headers["content-length"])
        while len(self.buf) < n:
            assert self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, headers, body

    def closed(self) -> bool:
        """True when the peer closed the connection (after any buffered bytes)."""
        try:
            return not self.buf and not self._fill()
        except (ConnectionResetError, TimeoutError):
            return False


def req(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, version: str = "1.1") -> bytes:
    h = {"Host": "127.0.0.1", **(headers or {})}
    if body and "Transfer-Encoding" not in h:
        h["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/{version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode("latin-1") + body


def test_keep_alive_serves_many_requests_on_one_connection(server):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("POST", "/devstoreaccount1/t", ENTITY))
    st, h, body = rd.response()
    assert st == 201 and json.loads(body)["A"] == 1 and h["x-ms-request-id"] and "connection" not in h
    s.sendall(req("GET", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')"))
    st, h, body = rd.response()
    assert st == 200 and json.loads(body)["RowKey"] == "r"


def test_pipelined_requests_are_answered_in_order(server):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("POST", "/devstoreaccount1/t", ENTITY) + req("GET", "/devstoreaccount1/t(PartitionKey='p',RowKey='nope')")
              + req("DELETE", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')", headers={"If-Match": "*"})
              + req("GET", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')"))
    assert [rd.response()[0] for _ in range(4)] == [201, 404, 204, 404]


def test_chunked_body(server):
    s = connect(server)
    rd = Reader(s)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (ENTITY[:10], ENTITY[10:])) + b"0\r\n\r\n"
    s.sendall(req("POST", "/devstoreaccount1/t", chunks, {"Transfer-Encoding": "chunked"}))
    st, _, body = rd.response()
    assert st == 201 and json.loads(body)["A"] == 1


def test_expect_100_continue(server):
    s = connect(server)
    rd = Reader(s)
    head = req("POST", "/devstoreaccount1/t", ENTITY, {"Expect": "100-continue"})
    s.sendall(head[: -len(ENTITY)])
    assert rd.response(head_only=True)[0] == 100
    s.sendall(ENTITY)
    assert rd.response()[0] == 201


def test_head_has_length_but_no_body(server):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("POST", "/devstoreaccount1/t", ENTITY))
    rd.response()
    s.sendall(req("HEAD", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')") + req("GET", "/devstoreaccount1/t()"))
    st, h, body = rd.response(head_only=True)
    assert st == 200 and int(h["content-length"]) > 0 and body == b""
    assert rd.response()[0] == 200  # the next response starts right after the head


@pytest.mark.parametrize("raw,code,status", [
    (b"GARBAGE\r\n\r\n", "MethodNotAllowed", 405),
    (b"GET /x HXXP/1.1\r\n\r\n", "InvalidInput", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n", "InvalidInput", 400),
    (b"FOO /devstoreaccount1/t() HTTP/1.1\r\nHost: x\r\n\r\n", "MethodNotAllowed", 405),
    (b"GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n", "InvalidHeaderValue", 400),
    (b"POST /devstoreaccount1/t HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n", "RequestBodyTooLarge", 413),
])
def test_unparseable_requests_get_an_azure_error_and_the_connection_closes(server, raw, code, status):
    s = connect(server)
    rd = Reader(s)
    s.sendall(raw)
    st, h, body = rd.response()
    assert (st, h["x-ms-error-code"]) == (status, code) and h["connection"] == "close" and h["x-ms-request-id"]
    assert f"<Code>{code}</Code>".encode() in body
    assert rd.closed()


def test_a_bad_request_after_a_good_one_is_answered_after_it(server):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("POST", "/devstoreaccount1/t", ENTITY) + b"GET /x HTTP/1.1 and more\r\n\r\n")
    assert rd.response()[0] == 201
    st, h, _ = rd.response()
    assert st == 400 and h["x-ms-error-code"] == "InvalidInput"
    assert rd.closed()


def test_oversized_body_is_drained_and_refused_and_the_connection_stays(server):
    s = connect(server)
    rd = Reader(s)
    big = b'{"PartitionKey":"p","RowKey":"r","S":"' + b"x" * (5 * 1024 * 1024) + b'"}'
    s.sendall(req("POST", "/devstoreaccount1/t", big))
    st, h, _ = rd.response()
    assert (st, h["x-ms-error-code"]) == (413, "RequestBodyTooLarge")
    s.sendall(req("POST", "/devstoreaccount1/t", ENTITY))
    assert rd.response()[0] == 201


def test_connection_close_and_http10(server):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("GET", "/devstoreaccount1/t()", headers={"Connection": "close"}))
    st, h, _ = rd.response()
    assert st == 200 and h["connection"] == "close" and rd.closed()
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("GET", "/devstoreaccount1/t()", version="1.0"))
    assert rd.response()[1]["connection"] == "close" and rd.closed()
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("GET", "/devstoreaccount1/t()", headers={"Connection": "keep-alive"}, version="1.0"))
    assert rd.response()[1]["connection"] == "keep-alive"
    s.sendall(req("GET", "/devstoreaccount1/t()", headers={"Connection": "keep-alive"}, version="1.0"))
    assert rd.response()[0] == 200


def test_upgrade_is_answered_as_plain_http_then_closed(server):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("GET", "/devstoreaccount1/t()", headers={"Connection": "Upgrade", "Upgrade": "websocket"}))
    assert rd.response()[0] == 200
    assert rd.closed()


def test_absolute_form_target(server):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("GET", "http://127.0.0.1/devstoreaccount1/t()?$top=1"))
    st, _, body = rd.response()
    assert st == 200 and "value" in json.loads(body)


def test_idle_connections_are_closed(server, monkeypatch):
    s = connect(server)
    rd = Reader(s)
    s.sendall(req("GET", "/devstoreaccount1/t()"))
    rd.response()
    monkeypatch.setattr(listener_mod, "IDLE_S", 0.05)
    time.sleep(0.1)
    closed = asyncio.run_coroutine_threadsafe(_close_idle(server["listener"]), server["loop"]).result(5)
    assert closed == 1 and rd.closed()


async def _close_idle(listener) -> int:
    return listener.close_idle()
