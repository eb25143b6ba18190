"""The ASGI app of the HTTP frontend (frontend.http.app) against a stub native frontend: the request flow,
body limits, a fuzz that never sees a 5xx, a lone GET in a batch. No processes.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from frontend.http import odata
from frontend.http.app import RestApp
from rangetable.errors import TableError
from tests.unit.test_rest_units import SDK_BATCH, TS

# --- the ASGI app against a stub frontend ---------------------------------------------------------------


class StubFrontend:
    """Answers native requests like a small in-memory cluster would (enough for the app's paths)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list] = {}

    async def request(self, req: dict, timeout: float | None = None):
        op = req["op"]
        if op == "write":
            w = req["write"]
            if w["op"] == "delete":
                if self.rows.pop((w["pk"], w["rk"]), None) is None:
                    raise TableError("ResourceNotFound")
                return None
            ent = [w["pk"], w["rk"], TS, w["props"] or {}]
            self.rows[(w["pk"], w["rk"])] = ent
            return ent
        if op == "get":
            if (req["pk"], req["rk"]) not in self.rows:
                raise TableError("ResourceNotFound")
            return self.rows[(req["pk"], req["rk"])]
        if op == "query":
            return {"entities": list(self.rows.values())[:2], "next": ["a", "b"]}
        if op == "batch":
            return [None if w["op"] == "delete" else [w["pk"], w["rk"], TS, w["props"] or {}] for w in req["ops"]]
        if op == "list_tables":
            return {"tables": ["a", "b"], "next": None}
        if op in ("get_acl",):
            return {"policies": {}}
        if op == "get_service_properties":
            return {"properties": {}}
        return {"table": req.get("table")} if "table" in req else None


def _call(app: RestApp, method: str, path: str, body: bytes = b"", headers: list | None = None) -> tuple[int, dict, bytes]:
    raw_path, _, qs = path.partition("?")
    headers = list(headers or [])
    if body and not any(k == b"content-length" for k, _ in headers):
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "method": method, "path": raw_path, "raw_path": raw_path.encode("latin-1"),
             "query_string": qs.encode("latin-1"), "headers": headers, "scheme": "http", "client": ("127.0.0.1", 1)}
    sent: list[dict] = []
    chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)] or [b""]

    async def receive():
        c = chunks.pop(0) if chunks else b""
        return {"type": "http.request", "body": c, "more_body": bool(chunks)}

    async def send(msg):
        sent.append(msg)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}, sent[1]["body"]


@pytest.fixture
def app():
    a = RestApp(StubFrontend())
    a.security.enabled = False  # signatures are covered by test_auth.py and the conformance tests
    return a


def test_app_basic_flow(app):
    st, h, body = _call(app, "POST", "/devstoreaccount1/t", b'{"PartitionKey":"p","RowKey":"r","A":1}')
    assert st == 201 and h["etag"] and json.loads(body)["A"] == 1 and "preference-applied" not in h
    st, h, body = _call(app, "GET", "/devstoreaccount1/t()?$top=2")
    assert st == 200 and h["x-ms-continuation-nextpartitionkey"] == odata.encode_token("a")
    st, h, _ = _call(app, "DELETE", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')", headers=[(b"if-match", b"*")])
    assert st == 204 and "etag" not in h
    st, h, body = _call(app, "GET", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')")
    assert st == 404 and h["x-ms-error-code"] == "ResourceNotFound"
    st, h, body = _call(app, "POST", "/devstoreaccount1/$batch", SDK_BATCH.replace("Content-Length: 32", "Content-Length: 36").encode(),
                        [(b"content-type", b"multipart/mixed; boundary=batch_f8")])
    assert st == 202 and body.count(b"HTTP/1.1 20") == 2
    st, h, body = _call(app, "HEAD", "/devstoreaccount1/t?comp=acl")
    assert st == 200 and body == b"" and int(h["content-length"]) > 0


def test_app_rejects_oversized_body(app):
    st, h, _ = _call(app, "POST", "/devstoreaccount1/t", b"x" * (4 * 1024 * 1024 + 1))
    assert (st, h["x-ms-error-code"]) == (413, "RequestBodyTooLarge")


def test_app_fuzz_never_5xx(app):
    rnd = random.Random(5)
    methods = ["GET", "POST", "PUT", "MERGE", "PATCH", "DELETE", "HEAD", "OPTIONS", "BREW", "post"]
    paths = ["/devstoreaccount1/t", "/devstoreaccount1/Tables", "/devstoreaccount1/$batch", "/", "/devstoreaccount1/",
             "/devstoreaccount1/t(PartitionKey='a',RowKey='b')", "/x/y/z", "/devstoreaccount1/t(", "/%ff%fe",
             "/devstoreaccount1/?restype=service&comp=properties", "/devstoreaccount1/t?comp=acl",
             "/devstoreaccount1/t()?$filter=a%20eq&$top=-1&NextPartitionKey=zz"]
    bodies = [b"", b"{", b"{}", b'{"PartitionKey":"a","RowKey":"b"}', b"\xff\xfe", b"<x/>", b"--x\r\n", b"[1]",
              b'{"TableName":"abc"}', b'{"PartitionKey":"a","RowKey":"b","X@odata.type":"Edm.Binary","X":"!!"}']
    headers = [[], [(b"content-type", b"multipart/mixed; boundary=x")], [(b"if-match", b"garbage")],
               [(b"x-http-method", b"MERGE")], [(b"accept", b"application/atom+xml")], [(b"prefer", b"bogus")],
               [(b"content-length", b"abc")], [(b"x-http-method", b"A"), (b"x-http-method", b"B")],
               [(b"origin", b"http://x"), (b"access-control-request-method", b"GET")]]
    for _ in range(400):
        path = rnd.choice(paths)
        if rnd.random() < 0.3:
            path = "".join(rnd.choice("/()'=,%?&$abcPKR ") for _ in range(rnd.randint(1, 30)))
            path = "/" + path.lstrip("/")
        st, h, _ = _call(app, rnd.choice(methods), path, rnd.choice(bodies), rnd.choice(headers))
        assert 200 <= st < 500, (path, st)
        assert h["x-ms-request-id"] and h["date"].endswith("GMT")


def test_app_lone_get_in_batch(app):
    _call(app, "POST", "/devstoreaccount1/t", b'{"PartitionKey":"p","RowKey":"r","A":1}')
    body = (b"--batch_g\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
            b"GET http://h/devstoreaccount1/t(PartitionKey='p',RowKey='r') HTTP/1.1\r\nAccept: application/json\r\n\r\n"
            b"\r\n--batch_g--\r\n")
    st, h, out = _call(app, "POST", "/devstoreaccount1/$batch", body, [(b"content-type", b"multipart/mixed; boundary=batch_g")])
    assert st == 202 and b"HTTP/1.1 200 OK" in out and b'"A":1' in out and b"changesetresponse" not in out
