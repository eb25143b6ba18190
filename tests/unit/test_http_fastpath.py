"""The HTTP frontend's fast paths answer exactly as the plain ones in the product do.

* :meth:`RestApp.serve` (the listener's path: point operations run through ``fe.submit`` and a
  callback, no coroutine) against :meth:`RestApp.respond` (the ASGI path, ``await fe.request``), on
  the same sequence of signed requests: same status, headers and body, request ids and dates aside;
* the remembered URL parses of :func:`frontend.http.url_parse.parse_resource` against fresh ones, on edge
  cases and generated paths (Hypothesis);
* the listener when answers come back synchronously: pipelined requests in order, without recursion.
"""

from __future__ import annotations

import asyncio
import re
import socket
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from typing import Any

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.data.tables import TableSasPermissions, generate_table_sas
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.http import parse as url_parse
from frontend.http.app import RestApp
from frontend.http.parse import Request
from frontend.http.render import Response
from rangetable.errors import TableError
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, sign
from tests.unit.test_http_listener import listening
from tests.unit.test_rest_app import StubFrontend

T = "/devstoreaccount1/t"
E = "/devstoreaccount1/t(PartitionKey='p',RowKey='r')"
ENTITY = '{"PartitionKey":"p","RowKey":"r","A":1,"B":"x","C@odata.type":"Edm.Int64","C":"5"}'
SAS = generate_table_sas(AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY), "t", permission=TableSasPermissions(read=True),
                         expiry=datetime.now(UTC) + timedelta(hours=1))


class SubmitStub(StubFrontend):
    """StubFrontend with ``submit``: answers at once (``deferred=False``) or on the next loop turn."""

    def __init__(self, deferred: bool) -> None:
        super().__init__()
        self.deferred = deferred
        self.submitted = 0

    def submit(self, req: dict, cb: Any, timeout: float | None = None) -> None:
        self.submitted += 1
        coro = self.request(req)
        try:
            coro.send(None)
        except StopIteration as stop:
            outcome: tuple = (stop.value, None)
        except TableError as exc:
            outcome = (None, exc)
        else:  # pragma: no cover - the stub never waits
            raise AssertionError("the stub awaited something")
        if self.deferred:
            asyncio.get_running_loop().call_soon(cb, *outcome)
        else:
            cb(*outcome)


def signed(method: str, path: str, body: str = "", headers: dict[str, str] | None = None,
           bad: bool = False) -> tuple[str, str, str, dict[str, str], bytes]:
    """A request as the listener hands it over: (method, raw path, query string, headers, body)."""
    raw_path, _, qs = path.partition("?")
    h = {"host": "127.0.0.1:10002", "x-ms-version": "2019-02-02", "dataserviceversion": "3.0",
         "accept": "application/json;odata=minimalmetadata", "x-ms-client-request-id": "c-1"}
    if body:
        h["content-type"] = "application/json"
        h["content-length"] = str(len(body))
    h.update({k.lower(): v for k, v in (headers or {}).items()})
    date = formatdate(usegmt=True)
    h["x-ms-date"] = date
    if "sig=" not in qs:
        sts = f"{method}\n\n{h.get('content-type', '')}\n{date}\n/{DEV_ACCOUNT}{raw_path}"
        h["authorization"] = f"SharedKey {DEV_ACCOUNT}:{sign(sts + ('x' if bad else ''))}"
    return method, raw_path, qs, h, body.encode()


CASES = [
    signed("GET", E),  # 404 from the frontend
    signed("POST", T, ENTITY),
    signed("GET", E),
    signed("HEAD", E),
    signed("GET", E + "?$select=A,Nope"),
    signed("GET", E + "?$format=application/json;odata=fullmetadata"),
    signed("GET", E, headers={"accept": "application/json;odata=nometadata"}),
    signed("GET", E, headers={"accept": "application/atom+xml"}),
    signed("POST", T, ENTITY, {"prefer": "return-no-content"}),
    signed("POST", T, ENTITY, {"prefer": "return-content"}),
    signed("POST", T, ENTITY, {"prefer": "bogus"}),
    signed("POST", T, ENTITY, {"if-match": "*"}),
    signed("POST", T, '{"PartitionKey":"p","RowKey":"r","A":1,"A":2}'),
    signed("POST", T, "not json"),
    signed("PUT", E, '{"A":2}'),
    signed("PUT", E, '{"A":3}', {"if-match": "*"}),
    signed("MERGE", E, '{"D":true}'),
    signed("PATCH", E, '{"D":false}', {"if-match": "*"}),
    signed("POST", E, '{"E":1.5}', {"x-http-method": "MERGE"}),
    signed("PUT", E, '{"E":1.5}', {"x-http-method": "MERGE"}),
    signed("PUT", E, '{"E":1.5}', {"if-none-match": "*"}),
    signed("GET", E, headers={"origin": "http://example.com"}),  # CORS: the general path
    signed("GET", E, bad=True),
    signed("GET", E + "?" + SAS),
    signed("DELETE", E + "?" + SAS, headers={"if-match": "*"}),
    signed("GET", "/devstoreaccount1/t(PartitionKey='p',RowKey='r',X='y')"),
    signed("GET", "/otheraccount/t(PartitionKey='p',RowKey='r')"),
    signed("DELETE", E),
    signed("DELETE", E, headers={"if-match": "*"}),
    signed("DELETE", E, headers={"if-match": "*"}),
    signed("BREW", E),
    signed("GET", T + "()"),  # queries are plans too
    signed("GET", T + "()?$filter=PartitionKey%20eq%20'p'&$top=2&$select=A"),
    signed("GET", T + "()?$top=0"),
    signed("GET", T + "()?NextPartitionKey=1!cA&NextRowKey=1!cg"),
    signed("GET", T + "()?NextPartitionKey=bogus"),
    signed("GET", T + "()", headers={"accept": "application/json;odata=fullmetadata"}),
    signed("GET", "/devstoreaccount1/Tables"),
]

_VOLATILE = re.compile(rb"(RequestId:|Time:)[^\\<\"]*")


def _comparable(resp: Response) -> tuple:
    headers = [(k, v) for k, v in resp.headers if k not in (b"x-ms-request-id", b"date")]
    return resp.status, headers, _VOLATILE.sub(rb"\1", resp.body)


def _request(case: tuple) -> Request:
    method, raw_path, qs, headers, body = case
    rq = Request(method, raw_path, qs, dict(headers), "127.0.0.1")
    rq.body = body
    return rq


@pytest.mark.parametrize("deferred", [False, True])
def test_serve_answers_like_respond(deferred: bool) -> None:
    general = RestApp(StubFrontend())
    fast_fe = SubmitStub(deferred)
    fast = RestApp(fast_fe)

    async def run() -> list[tuple[tuple, tuple]]:
        out = []
        for case in CASES:
            want = await general.respond(_request(case))
            answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
            fast.serve(_request(case), False, answer.set_result)  # a second call would raise
            out.append((_comparable(want), _comparable(await answer)))
        return out

    for (want, got), case in zip(asyncio.run(run()), CASES, strict=True):
        assert got == want, case[:3]
    assert fast_fe.submitted >= 15  # the point operations did take the callback path


def test_serve_too_big_and_unexpected_errors() -> None:
    app = RestApp(SubmitStub(False))
    got: list[Response] = []
    app.serve(_request(signed("POST", T, ENTITY)), True, got.append)
    assert got[0].status == 413

    def boom(req: dict, cb: Any, timeout: float | None = None) -> None:
        cb(["p", "r"], None)  # a malformed entity: the finisher fails

    app._submit = boom
    got.clear()
    app.serve(_request(signed("GET", E)), False, got.append)
    assert got[0].status == 500 and b"InternalError" in got[0].body


@pytest.mark.parametrize("path", [
    "/devstoreaccount1/t(PartitionKey='a',RowKey='b')", "/devstoreaccount1/t(PartitionKey='a%2Fb',RowKey='c')",
    "/devstoreaccount1/t(PartitionKey='it''s',RowKey='x')", "/devstoreaccount1/t(PartitionKey='a',RowKey='b')/",
    "/devstoreaccount1/t(RowKey='b',PartitionKey='a')", "/devstoreaccount1-secondary/devstoreaccount1/t(PartitionKey='a',RowKey='b')",
    "/devstoreaccount1/t", "/devstoreaccount1/t()", "/devstoreaccount1/Tables", "/devstoreaccount1/Tables('t')",
    "/devstoreaccount1/$batch", "/devstoreaccount1/", "/devstoreaccount1/t%28PartitionKey='a',RowKey='b'%29",
    "/devstoreaccount1/t%28%29(PartitionKey='a',RowKey='b')", "/mytable(PartitionKey='a',RowKey='b')",
    "/devstoreaccount1/t(PartitionKey='a',RowKey='b')x", "/devstoreaccount1/a/b(PartitionKey='a',RowKey='b')",
    "/devstoreaccount1/t(PartitionKey='a/b',RowKey='c')", "/devstoreaccount1/t x",
])
@pytest.mark.parametrize("host", [None, "127.0.0.1:10002", "acct.table.core.windows.net"])
def test_remembered_parses_equal_fresh_ones(path: str, host: str | None) -> None:
    def outcome(parse: Any, p: str) -> Any:
        try:
            r = parse(p, {"q": ["1"]}, host)
        except TableError as exc:
            return exc.error_code
        return (r.kind, r.account, r.secondary, r.table, r.pk, r.rk, r.query)

    url_parse._shapes.clear()
    fresh = outcome(url_parse._parse_resource, path)
    assert outcome(url_parse.parse_resource, path) == fresh  # parsed and remembered
    assert outcome(url_parse.parse_resource, path) == fresh  # from memory
    other = path.replace("'a'", "'zz'")  # same table, other keys
    assert outcome(url_parse.parse_resource, other) == outcome(url_parse._parse_resource, other)


KEY_TEXT = st.text(st.sampled_from("ab'%2F/() =,x\u00e9"), max_size=6)
PATH = st.builds("/{}/{}{}{}".format, st.sampled_from(["devstoreaccount1", "devstoreaccount1-secondary", "acct", ""]),
                 st.sampled_from(["t", "Tables", "$batch", "t%28%29", "a/b", "Tables('t')", ""]),
                 st.one_of(st.just(""), st.just("()"),
                           st.builds("(PartitionKey='{}',RowKey='{}')".format, KEY_TEXT, KEY_TEXT),
                           st.builds("(RowKey='{}',PartitionKey='{}')".format, KEY_TEXT, KEY_TEXT)),
                 st.sampled_from(["", "/", "x", " "]))


@settings(max_examples=200, deadline=None)
@given(PATH, st.sampled_from([None, "127.0.0.1:10002", "acct.table.core.windows.net"]))
def test_remembered_parses_equal_fresh_ones_generated(path: str, host: str | None) -> None:
    def outcome(parse: Any) -> Any:
        try:
            r = parse(path, {}, host)
        except TableError as exc:
            return exc.error_code
        return (r.kind, r.account, r.secondary, r.table, r.pk, r.rk, r.query)

    fresh = outcome(url_parse._parse_resource)
    assert outcome(url_parse.parse_resource) == fresh  # parsed and perhaps remembered
    assert outcome(url_parse.parse_resource) == fresh  # perhaps from memory


@pytest.fixture
def fast_server():
    """A listener whose frontend answers point operations synchronously (SubmitStub), its loop on a thread."""
    app = RestApp(SubmitStub(False))
    app.security.enabled = False
    with listening(app) as box:
        yield box


def test_many_pipelined_requests_answered_synchronously_in_order(fast_server: dict) -> None:
    s = socket.create_connection(("127.0.0.1", fast_server["listener"].port), timeout=10)
    body = b'{"PartitionKey":"p","RowKey":"r","A":1}'
    insert = (b"POST /devstoreaccount1/t HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    # a table listing first (a Task: the rest queues up behind it), then 1500 point reads answered at once
    query = b"GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: x\r\n\r\n"
    get = b"GET /devstoreaccount1/t(PartitionKey='p',RowKey='r') HTTP/1.1\r\nHost: x\r\n\r\n"
    n = 1500
    s.sendall(insert + query + get * n)
    buf = b""
    statuses: list[bytes] = []
    while len(statuses) < n + 2:
        chunk = s.recv(1 << 20)
        assert chunk, "connection closed"
        buf += chunk
        while True:
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                break
            head = buf[:head_end]
            length = int(re.search(rb"content-length: (\d+)", head).group(1))
            if len(buf) < head_end + 4 + length:
                break
            statuses.append(head.split(b" ", 2)[1])
            buf = buf[head_end + 4 + length:]
    s.close()
    assert statuses == [b"201", b"200"] + [b"200"] * n


def test_connection_semantics_when_answered_synchronously(fast_server: dict) -> None:
    from tests.unit.test_http_listener import Reader, connect, req

    s = connect(fast_server)
    rd = Reader(s)
    s.sendall(req("POST", T, ENTITY.encode()))
    assert rd.response()[0] == 201
    s.sendall(req("HEAD", E) + req("GET", E))
    st, h, body = rd.response(head_only=True)
    assert st == 200 and int(h["content-length"]) > 0 and body == b""
    assert rd.response()[0] == 200
    s.sendall(req("GET", E, headers={"Connection": "Upgrade", "Upgrade": "websocket"}))
    st, h, _ = rd.response()
    assert st == 200 and h["connection"] == "close"
    assert rd.closed()
    for extra, version, closes in (({"Connection": "close"}, "1.1", True), ({"Connection": "keep-alive"}, "1.0", False)):
        s = connect(fast_server)
        rd = Reader(s)
        s.sendall(req("GET", E, headers=extra, version=version))
        st, h, _ = rd.response()
        assert st == 200 and h["connection"] == ("close" if closes else "keep-alive")
        if closes:
            assert rd.closed()
        s.close()
