"""The ``$batch`` fast paths give exactly what their plain versions give, errors included.

Each property runs the fast path (:mod:`frontend.http.fastpath`) and the plain version (``tests/oracles.py``,
or the product's fallback) on the same edge cases and generated input: header blocks (remembered blocks and
lines against ``oracles.read_headers``), delimiter splitting (``split`` against :func:`batch.split_scan`),
whole bodies and sub-requests (the parser under ``oracles.plain_batch()``), the CRLF normalisation, absolute
URLs without ``urlsplit``; responses, written as one string per part, are read back part by part.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.http import batch, batch_ops, fastpath, odata
from frontend.http.parse import Request, parse_resource
from rangetable.errors import TableError
from tests import oracles


def outcome(f: Any, *args: Any) -> Any:
    """What ``f(*args)`` gives, or ``(error code, message)`` for a TableError, or the other error's type."""
    try:
        return f(*args)
    except TableError as exc:
        return ("TableError", exc.error_code, str(exc))
    except (ValueError, UnicodeError) as exc:
        return type(exc).__name__


def same(fast: Any, plain: Any, *args: Any) -> None:
    """The fast path and the plain one give the same outcome (twice: the second from what was remembered)."""
    want = outcome(plain, *args)
    assert outcome(fast, *args) == want
    assert outcome(fast, *args) == want  # again, from whatever was remembered


LATIN = st.characters(max_codepoint=255)
HEADER_LINE = st.one_of(
    st.sampled_from(["Content-Type: application/http", " X-A : y ", "X:\r", "Name\r : v", "\x0bX: y", "\x0cX: y",
                     "\rX: y", ":x", "  :x", "x", "  ", "\t", "\r", " \t\r", "\x1c", "\xa0", "\x85: v", "a\x0b: b",
                     "X-D:\t v \t\r", "X: a:b", "X:", "X: \r a", "\tX\t:\tv\t", "Content-ID: 7", "content-id: 8",
                     "\xe9\xff: \xe9", ""]),
    st.text(LATIN.filter(lambda c: c != "\n"), max_size=12),
    st.builds("{}:{}".format, st.text(LATIN.filter(lambda c: c not in "\n:"), max_size=6),
              st.text(LATIN.filter(lambda c: c != "\n"), max_size=6)),
)


@pytest.mark.parametrize("block", [
    b"", b"\n", b"\n\n", b"A: 1\nB: 2\na: 3", b"A: 1\r\n\r\nB: 2", b"A: 1\n \nB:2", b"A: 1\nbad", b"A: 1\n:x",
    b"\rA: 1", b"\x0bA: 1", b"\x0cA: 1", b" \tA\t : \t v \t\r", b"A: b: c", b"\xe9: \xff\r", b"x" * 300 + b": y",
    b"Content-Type: application/http\nContent-Transfer-Encoding: binary\nContent-ID: 0",
])
def test_headers_edge_cases(block: bytes) -> None:
    same(batch._headers, oracles.read_headers, block)
    same(fastpath.headers_of, oracles.read_headers, block)


@settings(max_examples=500, deadline=None)
@given(st.lists(HEADER_LINE, max_size=7), st.sampled_from(["\n", "\r\n"]))
def test_headers_match_the_old_loop(lines: list[str], eol: str) -> None:
    block = eol.join(lines).encode("latin-1")
    same(batch._headers, oracles.read_headers, block)
    same(fastpath.headers_of, oracles.read_headers, block)


def test_headers_dicts_are_not_shared() -> None:
    block = b"X-A: 1\nX-B: 2"
    first = batch._headers(block)
    first["x-a"] = "changed"
    assert batch._headers(block) == {"x-a": "1", "x-b": "2"}


def test_header_memory_is_bounded() -> None:
    for i in range(3 * fastpath._CACHE_BLOCKS):
        batch._headers(f"X-N: {i}\nX-M: {i}".encode())
    batch._headers(b"X: " + b"v" * 10 * fastpath._CACHE_BLOCK)
    assert len(fastpath._blocks) <= fastpath._CACHE_BLOCKS and len(fastpath._lines) <= fastpath._CACHE_LINES
    assert all(len(k) <= fastpath._CACHE_BLOCK for k in fastpath._blocks)
    assert all(len(k) <= fastpath._CACHE_LINE for k in fastpath._lines)


# --- multipart splitting, sub-requests, whole bodies ------------------------------------------------------

DELIM_LINE = st.sampled_from(["--b", "--b--", "--b ", "--b\t", "--b --", "--b-- \t", "--bx", "x--b", " --b", "--b\r",
                              "--b--x", "--", "-b", "--b--\r"])
CONTENT_LINE = st.one_of(st.sampled_from(["", "A: 1", "body", "--c", "\r"]), st.text(LATIN.filter(lambda c: c != "\n"),
                                                                                     max_size=5))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(DELIM_LINE, CONTENT_LINE), max_size=12), st.booleans(),
       st.sampled_from(["b", "b\nx", "b\n", "\n", "-", "b b"]))
def test_split_parts_matches_the_scan(lines: list[str], trailing_lf: bool, boundary: str) -> None:
    body = ("\n".join(lines) + ("\n" if trailing_lf else "")).encode("latin-1")
    same(batch._split_parts, _split_plainly, body, boundary)
    body = body.replace(b"--b", b"--" + boundary.encode())
    same(batch._split_parts, _split_plainly, body, boundary)


def _split_plainly(body: bytes, boundary: str) -> list[bytes]:
    with oracles.plain_batch():
        return batch._split_parts(body, boundary)


@pytest.mark.parametrize("n", [batch.MAX_PARTS - 1, batch.MAX_PARTS, batch.MAX_PARTS + 1])
@pytest.mark.parametrize("tail", ["", "  ", "\nx\n--b-x"])
def test_split_parts_limit(n: int, tail: str) -> None:
    body = ("--b" + tail + "\nx\n") * n + "--b--\n"
    same(batch._split_parts, _split_plainly, body.encode(), "b")


PART_LINE = st.one_of(
    st.sampled_from(["", "", "Content-Type: application/http", "Content-Type: Application/HTTP; x=1", "content-type: text/x",
                     "Content-ID: 3", "PATCH http://h/a/t HTTP/1.1", "POST /t http/1.0", "GET t HTTP/1.1 x",
                     "DELETE t FTP/1", "Content-Length: 2", "Content-Length: 0", "Content-Length:  5 ",
                     "Content-Length: -1", "Content-Length: x", "Content-Length: 99", "If-Match: *", "bad line",
                     "{\"a\": 1}", "\r", "x-http-method: MERGE"]),
    st.text(LATIN.filter(lambda c: c != "\n"), max_size=6),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(PART_LINE, max_size=12), st.sampled_from(["", "\n", "\n\n"]))
def test_sub_request_fast_matches_plain(lines: list[str], end: str) -> None:
    part = ("\n".join(lines) + end).encode("latin-1")
    same(batch._sub_request, _sub_request_plainly, part)


def _sub_request_plainly(part: bytes) -> batch.SubRequest:
    with oracles.plain_batch():
        return batch._sub_request(part)


SDK_PART = ("--changeset_y\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: {i}\r\n"
            "\r\n{method} http://127.0.0.1:10002/devstoreaccount1/t{key} HTTP/1.1\r\nx-ms-version: 2019-02-02\r\n"
            "DataServiceVersion: 3.0\r\nAccept: application/json;odata={level}\r\n{extra}Content-Type: application/json"
            "\r\nContent-Length: {n}\r\n\r\n{body}\r\n")


def sdk_body(ops: list[tuple[str, str, str, str]]) -> bytes:
    """A $batch body in the SDK's shape; ops are (method, key path, extra header lines, JSON body)."""
    parts = [SDK_PART.format(i=i, method=m, key=k, level=(odata.NO, odata.MINIMAL, odata.FULL)[i % 3], extra=x,
                             n=len(b.encode()), body=b) for i, (m, k, x, b) in enumerate(ops)]
    return ("--batch_x\r\nContent-Type: multipart/mixed; boundary=changeset_y\r\n\r\n" + "".join(parts)
            + "--changeset_y--\r\n\r\n--batch_x--\r\n").encode()


SAMPLE_OPS = [
    ("POST", "", "Prefer: return-no-content\r\n", '{"PartitionKey": "p", "RowKey": "r1", "A": 1}'),
    ("POST", "", "Prefer: return-content\r\n", '{"PartitionKey": "p", "RowKey": "r\\u00e9", "B": "x"}'),
    ("POST", "", "", '{"PartitionKey": "p", "RowKey": "r 3/x", "C": true}'),
    ("PATCH", "(PartitionKey='p',RowKey='r4')", "", '{"A": 2}'),
    ("PUT", "(PartitionKey='p',RowKey='r5')", "If-Match: *\r\n", '{"A": 2}'),
    ("MERGE", "(PartitionKey='p',RowKey='r6')", "If-Match: W/\"x\"\r\n", '{"A": 2}'),
    ("DELETE", "(PartitionKey='p',RowKey='r7')", "If-Match: *\r\n", ""),
]
SAMPLE = sdk_body(SAMPLE_OPS)
EDIT = st.tuples(st.integers(0, len(SAMPLE)), st.integers(0, 4),
                 st.sampled_from(["", "\r", "\n", "\r\n", "\n\n", " ", "\t", ":", "-", "--", "--changeset_y", "--batch_x",
                                  "x", "\xe9", "Content-Length: 1\r\n"]))


@settings(max_examples=500, deadline=None)
@given(st.lists(EDIT, max_size=4), st.sampled_from(["multipart/mixed; boundary=batch_x", "multipart/mixed; boundary=changeset_y"]))
def test_parse_batch_fast_matches_plain(edits: list[tuple[int, int, str]], ctype: str) -> None:
    body = SAMPLE
    for at, cut, text in edits:
        at = min(at, len(body))
        body = body[:at] + text.encode("latin-1") + body[at + cut:]
    same(batch.parse_batch, _parse_plainly, ctype, body)
    same(batch.parse_batch, _parse_plainly, ctype, body.replace(b"\r\n", b"\n"))


def _parse_plainly(content_type: str, body: bytes) -> batch.Batch:
    with oracles.plain_batch():
        return batch.parse_batch(content_type, body)


def test_parse_batch_reads_the_sdk_sample() -> None:
    got = batch.parse_batch("multipart/mixed; boundary=batch_x", SAMPLE)
    assert got.changeset is not None and not got.singles
    assert [(s.method, s.content_id) for s in got.changeset] == [(m, str(i)) for i, (m, *_) in enumerate(SAMPLE_OPS)]
    assert [s.body.decode() for s in got.changeset] == [b for *_, b in SAMPLE_OPS]
    assert got.changeset[4].headers["if-match"] == "*" and got.changeset[0].headers["prefer"] == "return-no-content"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40).map(lambda b: b.translate(bytes(b"\r\na "[i % 4] for i in range(256)))))
def test_crlf_normalisation(body: bytes) -> None:
    assert fastpath.lf(body) == oracles.lf(body) == body.replace(b"\r\n", b"\n")


# --- URLs -----------------------------------------------------------------------------------------------

URL = st.one_of(
    st.builds("{}{}{}{}".format, st.sampled_from(["http://", "https://", "HTTP://", "a+b.c-d://", "1http://", "ht tp://",
                                                   " http://", "\thttp://", "http:/", "http:///", "://"]),
              st.sampled_from(["127.0.0.1:10002", "acct.table.core.windows.net", "[::1]:1", "[::1", "h]", "h\xe9", "",
                               "u@h:1", "h\t", "h%41"]),
              st.sampled_from(["", "/", "/devstoreaccount1/t", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')",
                               "/a/t()", "/a/t\xe9", "/a/t%28", "/a /t", "/a/t\r", "/a/t#f", "/a/$batch"]),
              st.sampled_from(["", "?", "?a=1", "?a=1&b=2?c", "?a#b", "?\t", "?x=%ZZ", "?$format=json"])),
    st.text(st.sampled_from("h:/?#[]@ \t\r\n\x00\x7f\xe9%aT(),='"), max_size=14).map(lambda s: "http://" + s),
)


@settings(max_examples=500, deadline=None)
@given(URL)
def test_absolute_urls_split_like_urlsplit(url: str) -> None:
    m = fastpath.PLAIN_URL.fullmatch(url)
    if m is not None:
        parts = urlsplit(url)
        assert (m[1], m[2] or "", m[3] or "") == (parts.netloc, parts.path, parts.query)
        assert fastpath.split_url(url) == batch_ops.split_url_plain(url)
    rq = Request("POST", "/devstoreaccount1/$batch", "", {"host": "127.0.0.1:10002"})
    rq.res = parse_resource("/devstoreaccount1/$batch", {}, "127.0.0.1:10002")
    for u in (url, url.partition("://")[2], url.partition("://")[2].lstrip("/")):
        sub = batch.SubRequest("PUT", u, {}, b"")
        same(batch_ops.sub_resource, _sub_resource_plainly, rq, sub)


def _sub_resource_plainly(rq: Request, sub: batch.SubRequest) -> Any:
    with oracles.plain_batch():
        return batch_ops.sub_resource(rq, sub)


# --- responses ------------------------------------------------------------------------------------------


RESPONSE = st.builds(batch.SubResponse, st.sampled_from([200, 201, 204, 299, 404, 412, 999]),
                     st.lists(st.tuples(st.sampled_from(["ETag", "Content-Type", "x"]), st.text(max_size=5)), max_size=3),
                     st.sampled_from([b"", b"{}", b"\r\n"]), st.one_of(st.none(), st.text(max_size=4)))
_STATUS_TEXT = {200: "OK", 201: "Created", 204: "No Content", 404: "Not Found", 412: "Precondition Failed"}


def _cut(body: bytes, boundary: str) -> tuple[bytes, list[bytes]]:
    """(what precedes the first delimiter, the parts) of a CRLF multipart body."""
    pieces = body.split(b"--" + boundary.encode())
    assert pieces[-1].startswith(b"--\r\n")
    assert all(p.startswith(b"\r\n") for p in pieces[1:-1])
    return pieces[0], [p[2:] for p in pieces[1:-1]]


def read_back(content_type: str, body: bytes) -> list[tuple[int, str, dict[str, str], bytes]]:
    """The parts of a batch response, cut at their delimiters: (status, reason, headers, body) each."""
    assert content_type.startswith("multipart/mixed; boundary=batchresponse_")
    pre, outer = _cut(body, batch.boundary_of(content_type))
    assert pre == b""
    parts = outer
    if len(outer) == 1 and outer[0].startswith(b"Content-Type: multipart/mixed"):
        head, _, rest = outer[0].partition(b"\r\n\r\n")
        inner_type = oracles.read_headers(head).get("content-type", "")
        assert batch.boundary_of(inner_type).startswith("changesetresponse_")
        pre, parts = _cut(rest, batch.boundary_of(inner_type))
        assert pre == b""
    out = []
    for part in parts:
        mime, _, http = part.partition(b"\r\n\r\n")
        assert mime == b"Content-Type: application/http\r\nContent-Transfer-Encoding: binary"
        head, _, payload = http.partition(b"\r\n\r\n")
        line, _, hdrs = head.partition(b"\r\n")
        version, code, reason = line.decode().split(" ", 2)
        assert version == "HTTP/1.1"
        headers = {}
        for h in hdrs.decode().split("\r\n") if hdrs else []:
            name, _, value = h.partition(": ")
            headers[name] = value
        out.append((int(code), reason, headers, payload))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(RESPONSE, max_size=4), st.booleans())
def test_format_batch_reads_back(responses: list[batch.SubResponse], changeset: bool) -> None:
    ctype, body = batch.format_batch(responses, changeset)
    if not changeset and not responses:  # one delimiter, then the closing one
        outer = batch.boundary_of(ctype)
        assert body == f"--{outer}\r\n--{outer}--\r\n".encode()
        return
    got = read_back(ctype, body)
    assert len(got) == len(responses)
    for (status, reason, headers, payload), r in zip(got, responses, strict=True):
        assert status == r.status and reason == _STATUS_TEXT.get(r.status, batch._REASONS.get(r.status, "Unknown"))
        want = ({"Content-ID": r.content_id} if r.content_id is not None else {}) | dict(r.headers)
        if any("\r" in v or "\n" in v for v in want.values()):
            continue  # a line break in a header value ends the header block early: no HTTP message can carry it
        if all(": " not in k for k in want) and len({k for k, _ in r.headers} | (
                {"Content-ID"} if r.content_id is not None else set())) == len(r.headers) + (r.content_id is not None):
            assert headers == want
        assert payload == (r.body + b"\r\n" if r.body else b"")


class _FE:
    def __init__(self, results: list) -> None:
        self.results = results

    async def request(self, req: dict) -> list:
        return self.results


class _App:
    def __init__(self, results: list) -> None:
        self.fe = _FE(results)


@pytest.mark.parametrize("cid", [True, False])
def test_run_batch_response_parts(cid: bool) -> None:
    body = SAMPLE if cid else SAMPLE.replace(b"Content-ID: ", b"X-No-ID: ")
    rq = Request("POST", "/devstoreaccount1/$batch", "", {"host": "127.0.0.1:10002",
                                                          "content-type": "multipart/mixed; boundary=batch_x"})
    rq.body = body
    rq.res = parse_resource("/devstoreaccount1/$batch", {}, "127.0.0.1:10002")
    with oracles.plain_batch():
        subs = batch.parse_batch(rq.headers["content-type"], body).changeset
    assert subs is not None
    results: list = [[s.url[-3:], "r\u00e9 /x", 638500000001234567 + i, {"A": [1, i]}] for i, s in enumerate(subs)]
    results[-1] = None
    got = asyncio.run(batch_ops.run_batch(_App(results), rq))  # type: ignore[arg-type]
    assert got.status == 202
    ctype = dict(got.headers)[b"content-type"].decode()
    parts = read_back(ctype, got.body)
    assert [p[0] for p in parts] == [204, 201, 201, 204, 204, 204, 204]
    for i, ((status, _, headers, payload), sub, ent) in enumerate(zip(parts, subs, results, strict=True)):
        assert headers.get("Content-ID") == (str(i) if cid else None)
        assert headers["cache-control"] == "no-cache" and headers["dataserviceversion"] == "3.0;"
        if ent is None:
            assert "ETag" not in headers and payload == b""
            continue
        assert headers["ETag"] == odata.etag_of(ent[2])
        if sub.method != "POST":
            assert payload == b""
            continue
        res = batch_ops.sub_resource(rq, sub)
        link = f"{rq.base}/{odata.edit_link(res.table, ent[0], ent[1])}"
        assert headers["Location"] == link and headers["DataServiceId"] == link
        prefer = sub.headers.get("prefer")
        assert headers.get("Preference-Applied") == prefer
        if prefer == "return-no-content":
            assert status == 204 and payload == b""
            continue
        level = odata.metadata_level(sub.headers.get("accept"))
        assert headers["Content-Type"] == odata.CONTENT_TYPES[level].decode()
        prefix = odata.element_prefix(level, rq.base, res.table)
        want = odata.entity_bytes(ent, level, prefix=prefix, base=rq.base, account=res.account, table=res.table)
        assert payload == want + b"\r\n"
        doc = json.loads(payload)
        assert doc["PartitionKey"] == ent[0] and doc["RowKey"] == ent[1] and doc["A"] == ent[3]["A"][1]
