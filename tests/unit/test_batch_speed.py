"""The ``$batch`` fast paths give exactly what the code they replaced gave, errors included.

The replaced functions are kept below as ``_old_*`` (verbatim, but for names) and compared with the
current ones on edge cases and random input: header blocks (remembered blocks and lines), delimiter
splitting (``split`` instead of the delimiter scan), sub-request parsing by offsets, the CRLF
normalisation, absolute URLs without ``urlsplit``, and responses written as one string per part.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.http import batch, batch_ops, odata
from frontend.http.entity_ops import prefer, write_op
from frontend.http.parse import Request
from frontend.http.urls import parse_query, parse_resource
from rangetable.errors import TableError

# --- the replaced code --------------------------------------------------------------------------------


def _bad(message: str) -> TableError:
    return TableError("InvalidInput", message)


def _old_split_parts(body: bytes, boundary: str) -> list[bytes]:
    delim = b"--" + boundary.encode("latin-1")
    marks: list[tuple[int, int, bool]] = []
    i = body.find(delim)
    while i >= 0:
        if i == 0 or body[i - 1] == 10:
            end = body.find(b"\n", i)
            end = len(body) if end < 0 else end
            tail = body[i + len(delim):end].rstrip(b" \t")
            if tail in (b"", b"--"):
                marks.append((i, end, tail == b"--"))
                if tail == b"--":
                    break
        i = body.find(delim, i + len(delim))
    if not marks:
        raise _bad("The multipart body has no delimiter for its boundary.")
    if not marks[-1][2]:
        raise _bad("The multipart body is not terminated by its closing delimiter.")
    parts = []
    for (_, end, _), (nxt, _, _) in zip(marks, marks[1:], strict=False):
        start = end + 1
        parts.append(body[start:max(start, nxt - 1)])
        if len(parts) > batch.MAX_PARTS:
            raise _bad("Too many parts in the multipart body.")
    return parts


def _old_headers(block: bytes) -> dict[str, str]:
    text = block.decode("latin-1")
    out: dict[str, str] = {}
    for line in text.split("\n"):
        name, colon, value = line.partition(":")
        name = name.strip(" \t")
        if colon and name and name[0] not in "\r\x0b\x0c":
            out[name.lower()] = value.lstrip(" \t").rstrip(" \t\r")
        elif line.strip():
            raise _bad(f"Malformed header line in a batch part: {line[:80]!r}")
    return out


def _old_head_body(part: bytes) -> tuple[bytes, bytes]:
    i = part.find(b"\n\n")
    if i < 0:
        return part, b""
    return part[:i], part[i + 2:]


def _old_sub_request(part: bytes) -> batch.SubRequest:
    head, payload = _old_head_body(part)
    ph = _old_headers(head)
    ctype = ph.get("content-type", "application/http").split(";")[0].strip().lower()
    if ctype != "application/http":
        raise _bad(f"A batch operation must be application/http, not {ctype!r}.")
    req_head, body = _old_head_body(payload.lstrip(b"\n"))
    lines = req_head.split(b"\n", 1)
    words = lines[0].decode("latin-1").split()
    if len(words) != 3 or not words[2].upper().startswith("HTTP/"):
        raise _bad(f"Malformed request line in a batch operation: {lines[0][:80]!r}")
    headers = _old_headers(lines[1]) if len(lines) > 1 else {}
    n = headers.get("content-length")
    if n is not None:
        try:
            length = int(n)
        except ValueError:
            raise _bad("Bad Content-Length in a batch operation.") from None
        if length < 0:
            raise _bad("Bad Content-Length in a batch operation.")
        body = body[:length] if length <= len(body) else body.rstrip(b"\n")
    else:
        body = body.rstrip(b"\n")
    return batch.SubRequest(words[0].upper(), words[1], headers, body, ph.get("content-id"))


def _old_parse_batch(content_type: str | None, body: bytes) -> batch.Batch:
    boundary = batch.boundary_of(content_type)
    text = body.replace(b"\r\n", b"\n")
    out = batch.Batch()
    for part in _old_split_parts(text, boundary):
        head, payload = _old_head_body(part)
        ph = _old_headers(head)
        ctype = ph.get("content-type", "")
        if ctype.split(";")[0].strip().lower() == "multipart/mixed":
            if out.changeset is not None:
                raise _bad("A batch request may contain only one changeset.")
            out.changeset = [_old_sub_request(p) for p in _old_split_parts(payload, batch.boundary_of(ctype))]
        else:
            out.singles.append(_old_sub_request(part))
    if out.changeset is None and not out.singles:
        raise _bad("The batch request contains no operation.")
    if out.changeset is not None and out.singles:
        raise _bad("A batch request may hold either one changeset or one query operation.")
    if len(out.singles) > 1:
        raise _bad("A batch request may hold only one query operation outside a changeset.")
    return out


def _old_http_part(r: batch.SubResponse) -> bytes:
    lines = ["Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n",
             f"HTTP/1.1 {r.status} {batch._REASONS.get(r.status, 'Unknown')}"]
    if r.content_id is not None:
        lines.append(f"Content-ID: {r.content_id}")
    lines += [f"{k}: {v}" for k, v in r.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + r.body + (b"\r\n" if r.body else b"")


def _old_format_batch(responses: list[batch.SubResponse], changeset: bool = True) -> tuple[str, bytes]:
    outer = f"batchresponse_{uuid.uuid4()}"
    chunks = [f"--{outer}\r\n".encode()]
    if changeset:
        inner = f"changesetresponse_{uuid.uuid4()}"
        chunks.append(f"Content-Type: multipart/mixed; boundary={inner}\r\n\r\n".encode())
        delimiter = f"--{inner}\r\n".encode()
        for r in responses:
            chunks.append(delimiter)
            chunks.append(_old_http_part(r))
        chunks.append(f"--{inner}--\r\n".encode())
    else:
        for i, r in enumerate(responses):
            if i:
                chunks.append(f"--{outer}\r\n".encode())
            chunks.append(_old_http_part(r))
    chunks.append(f"--{outer}--\r\n".encode())
    return f"multipart/mixed; boundary={outer}", b"".join(chunks)


def _old_op_response(base: str, sub: batch.SubRequest, op: dict, pref: str | None, level: str, res: Any,
                     ent: Any) -> batch.SubResponse:
    headers = list(batch_ops._HDRS)
    if ent is None:
        return batch.SubResponse(204, headers, b"", sub.content_id)
    headers.append(("ETag", odata.etag_of(ent[2])))
    if op["op"] != "insert":
        return batch.SubResponse(204, headers, b"", sub.content_id)
    link = f"{base}/{odata.edit_link(res.table, ent[0], ent[1])}"
    headers += [("Location", link), ("DataServiceId", link)]
    if pref is not None:
        headers.append(("Preference-Applied", pref))
    if pref == "return-no-content":
        return batch.SubResponse(204, headers, b"", sub.content_id)
    headers.append(("Content-Type", batch_ops._CONTENT_TYPES[level]))
    prefix = odata.element_prefix(level, base, res.table)
    body = odata.entity_text(ent, level, prefix=prefix, base=base, account=res.account, table=res.table)
    return batch.SubResponse(201, headers, body.encode(), sub.content_id)


def _old_sub_resource(rq: Any, sub: batch.SubRequest) -> Any:
    url = sub.url
    if "://" in url:
        parts = urlsplit(url)
        path, qs, host = parts.path, parts.query, parts.netloc
    else:
        path, _, qs = url.partition("?")
        host = rq.host
        if not path.startswith("/"):
            path = f"/{rq.res.account}/{path}"
    return parse_resource(path, parse_query(qs), host)


# --- helpers --------------------------------------------------------------------------------------------


def outcome(f: Any, *args: Any) -> Any:
    """What ``f(*args)`` gives, or ``(error code, message)`` for a TableError, or the other error's type."""
    try:
        return f(*args)
    except TableError as exc:
        return ("TableError", exc.error_code, str(exc))
    except (ValueError, UnicodeError) as exc:
        return type(exc).__name__


def same(new: Any, old: Any, *args: Any) -> None:
    want = outcome(old, *args)
    assert outcome(new, *args) == want
    assert outcome(new, *args) == want  # again, from whatever was remembered


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
    same(batch._headers, _old_headers, block)
    same(batch._headers_of, _old_headers, block)


@settings(max_examples=1500, deadline=None)
@given(st.lists(HEADER_LINE, max_size=7), st.sampled_from(["\n", "\r\n"]))
def test_headers_match_the_old_loop(lines: list[str], eol: str) -> None:
    block = eol.join(lines).encode("latin-1")
    same(batch._headers, _old_headers, block)
    same(batch._headers_of, _old_headers, block)


def test_headers_dicts_are_not_shared() -> None:
    block = b"X-A: 1\nX-B: 2"
    first = batch._headers(block)
    first["x-a"] = "changed"
    assert batch._headers(block) == {"x-a": "1", "x-b": "2"}


def test_header_memory_is_bounded() -> None:
    for i in range(3 * batch._CACHE_BLOCKS):
        batch._headers(f"X-N: {i}\nX-M: {i}".encode())
    batch._headers(b"X: " + b"v" * 10 * batch._CACHE_BLOCK)
    assert len(batch._blocks) <= batch._CACHE_BLOCKS and len(batch._lines) <= batch._CACHE_LINES
    assert all(len(k) <= batch._CACHE_BLOCK for k in batch._blocks)
    assert all(len(k) <= batch._CACHE_LINE for k in batch._lines)


# --- multipart splitting, sub-requests, whole bodies ------------------------------------------------------

DELIM_LINE = st.sampled_from(["--b", "--b--", "--b ", "--b\t", "--b --", "--b-- \t", "--bx", "x--b", " --b", "--b\r",
                              "--b--x", "--", "-b", "--b--\r"])
CONTENT_LINE = st.one_of(st.sampled_from(["", "A: 1", "body", "--c", "\r"]), st.text(LATIN.filter(lambda c: c != "\n"),
                                                                                     max_size=5))


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(DELIM_LINE, CONTENT_LINE), max_size=12), st.booleans(),
       st.sampled_from(["b", "b\nx", "b\n", "\n", "-", "b b"]))
def test_split_parts_matches_the_scan(lines: list[str], trailing_lf: bool, boundary: str) -> None:
    body = ("\n".join(lines) + ("\n" if trailing_lf else "")).encode("latin-1")
    same(batch._split_parts, _old_split_parts, body, boundary)
    body = body.replace(b"--b", b"--" + boundary.encode())
    same(batch._split_parts, _old_split_parts, body, boundary)


@pytest.mark.parametrize("n", [batch.MAX_PARTS - 1, batch.MAX_PARTS, batch.MAX_PARTS + 1])
@pytest.mark.parametrize("tail", ["", "  ", "\nx\n--b-x"])
def test_split_parts_limit(n: int, tail: str) -> None:
    body = ("--b" + tail + "\nx\n") * n + "--b--\n"
    same(batch._split_parts, _old_split_parts, body.encode(), "b")


PART_LINE = st.one_of(
    st.sampled_from(["", "", "Content-Type: application/http", "Content-Type: Application/HTTP; x=1", "content-type: text/x",
                     "Content-ID: 3", "PATCH http://h/a/t HTTP/1.1", "POST /t http/1.0", "GET t HTTP/1.1 x",
                     "DELETE t FTP/1", "Content-Length: 2", "Content-Length: 0", "Content-Length:  5 ",
                     "Content-Length: -1", "Content-Length: x", "Content-Length: 99", "If-Match: *", "bad line",
                     "{\"a\": 1}", "\r", "x-http-method: MERGE"]),
    st.text(LATIN.filter(lambda c: c != "\n"), max_size=6),
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(PART_LINE, max_size=12), st.sampled_from(["", "\n", "\n\n"]))
def test_sub_request_matches_the_old_parser(lines: list[str], end: str) -> None:
    part = ("\n".join(lines) + end).encode("latin-1")
    same(batch._sub_request, _old_sub_request, part)


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


@settings(max_examples=1500, deadline=None)
@given(st.lists(EDIT, max_size=4), st.sampled_from(["multipart/mixed; boundary=batch_x", "multipart/mixed; boundary=changeset_y"]))
def test_parse_batch_matches_the_old_parser(edits: list[tuple[int, int, str]], ctype: str) -> None:
    body = SAMPLE
    for at, cut, text in edits:
        at = min(at, len(body))
        body = body[:at] + text.encode("latin-1") + body[at + cut:]
    same(batch.parse_batch, _old_parse_batch, ctype, body)
    same(batch.parse_batch, _old_parse_batch, ctype, body.replace(b"\r\n", b"\n"))


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=40).map(lambda b: b.translate(bytes(b"\r\na "[i % 4] for i in range(256)))))
def test_crlf_normalisation(body: bytes) -> None:
    assert batch._lf(body) == body.replace(b"\r\n", b"\n")


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


@settings(max_examples=1500, deadline=None)
@given(URL)
def test_absolute_urls_split_like_urlsplit(url: str) -> None:
    m = batch_ops._PLAIN_URL.fullmatch(url)
    if m is not None:
        parts = urlsplit(url)
        assert (m[1], m[2] or "", m[3] or "") == (parts.netloc, parts.path, parts.query)
    rq = Request("POST", "/devstoreaccount1/$batch", "", {"host": "127.0.0.1:10002"})
    rq.res = parse_resource("/devstoreaccount1/$batch", {}, "127.0.0.1:10002")
    for u in (url, url.partition("://")[2], url.partition("://")[2].lstrip("/")):
        same(batch_ops.sub_resource, _old_sub_resource, rq, batch.SubRequest("PUT", u, {}, b""))


# --- responses ------------------------------------------------------------------------------------------


def fixed_uuids(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = itertools.count()
    monkeypatch.setattr(batch.uuid, "uuid4", lambda: uuid.UUID(int=next(counter)))


RESPONSE = st.builds(batch.SubResponse, st.sampled_from([200, 201, 204, 299, 404, 412, 999]),
                     st.lists(st.tuples(st.sampled_from(["ETag", "Content-Type", "x"]), st.text(max_size=5)), max_size=3),
                     st.sampled_from([b"", b"{}", b"\r\n"]), st.one_of(st.none(), st.text(max_size=4)))


@settings(max_examples=300, deadline=None)
@given(st.lists(RESPONSE, max_size=4), st.booleans())
def test_format_batch_matches(responses: list[batch.SubResponse], changeset: bool) -> None:
    with pytest.MonkeyPatch.context() as mp:
        fixed_uuids(mp)
        want = outcome(_old_format_batch, responses, changeset)
    with pytest.MonkeyPatch.context() as mp:
        fixed_uuids(mp)
        assert outcome(batch.format_batch, responses, changeset) == want


class _FE:
    def __init__(self, results: list) -> None:
        self.results = results

    async def request(self, req: dict) -> list:
        return self.results


class _App:
    def __init__(self, results: list) -> None:
        self.fe = _FE(results)


@pytest.mark.parametrize("cid", [True, False])
def test_run_batch_response_matches_the_old_parts(monkeypatch: pytest.MonkeyPatch, cid: bool) -> None:
    body = SAMPLE if cid else SAMPLE.replace(b"Content-ID: ", b"X-No-ID: ")
    rq = Request("POST", "/devstoreaccount1/$batch", "", {"host": "127.0.0.1:10002",
                                                          "content-type": "multipart/mixed; boundary=batch_x"})
    rq.body = body
    rq.res = parse_resource("/devstoreaccount1/$batch", {}, "127.0.0.1:10002")
    subs = _old_parse_batch(rq.headers["content-type"], body).changeset
    assert subs is not None
    results: list = [[s.url[-3:], "r\u00e9 /x", 638500000001234567 + i, {"A": [1, i]}] for i, s in enumerate(subs)]
    results[-1] = None
    old = []
    for sub, ent in zip(subs, results, strict=True):
        res = batch_ops.sub_resource(rq, sub)
        method = batch_ops._effective_method(sub)
        op = write_op(method, sub.headers, res, sub.body)
        pref = prefer(sub.headers) if op["op"] == "insert" else None
        old.append(_old_op_response(rq.base, sub, op, pref, odata.metadata_level(sub.headers.get("accept")), res, ent))
    fixed_uuids(monkeypatch)
    _, want = _old_format_batch(old)
    fixed_uuids(monkeypatch)
    got = asyncio.run(batch_ops.run_batch(_App(results), rq))  # type: ignore[arg-type]
    assert got.status == 202 and got.body == want
