"""``$batch`` multipart bodies (reference §6): parse requests, format responses. Pure, no I/O.

A batch body is ``multipart/mixed`` whose parts are either one nested ``multipart/mixed`` changeset
(the write operations, each an ``application/http`` part holding a whole HTTP request) or single
``application/http`` parts outside a changeset (a lone GET). The parser accepts LF or CRLF,
case-insensitive part headers, an optional ``Content-ID``, an optional ``Content-Length`` in
sub-requests and absolute or relative sub-request URLs. Anything it cannot read raises 400
InvalidInput.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from http import HTTPStatus

from rangetable.errors import TableError

MAX_PARTS = 1000


@dataclass
class SubRequest:
    """One HTTP request inside a batch."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    content_id: str | None = None


@dataclass
class Batch:
    """A parsed batch: the changeset's requests (None when there is none) and lone top-level requests."""

    changeset: list[SubRequest] | None = None
    singles: list[SubRequest] = field(default_factory=list)


@dataclass
class SubResponse:
    """One HTTP response inside a batch response."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    content_id: str | None = None


def _bad(message: str) -> TableError:
    return TableError("InvalidInput", message)


def boundary_of(content_type: str | None) -> str:
    """The ``boundary`` parameter of a ``multipart/mixed`` Content-Type; 400 when there is none."""
    if not content_type:
        raise _bad("A batch request needs a multipart/mixed Content-Type.")
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/mixed":
        raise _bad(f"A batch request needs a multipart/mixed Content-Type, not {kind.strip()!r}.")
    for p in params.split(";"):
        name, _, value = p.strip().partition("=")
        if name.strip().lower() == "boundary":
            value = value.strip().strip('"')
            if value and len(value) <= 200:
                return value
    raise _bad("The multipart Content-Type has no boundary.")


def _split_parts(body: bytes, boundary: str) -> list[bytes]:
    """The parts between ``--boundary`` delimiter lines (body already LF-normalised)."""
    delim = b"--" + boundary.encode("latin-1")
    marks: list[tuple[int, int, bool]] = []  # (line start, line end, closing)
    i = body.find(delim)
    while i >= 0:
        if i == 0 or body[i - 1] == 10:  # at the start of a line
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
        if len(parts) > MAX_PARTS:
            raise _bad("Too many parts in the multipart body.")
    return parts


def _headers(block: bytes) -> dict[str, str]:
    """``Name: value`` lines (blank lines ignored) as a dict keyed by lower-case name; 400 on other lines."""
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


def _head_body(part: bytes) -> tuple[bytes, bytes]:
    i = part.find(b"\n\n")
    if i < 0:
        return part, b""
    return part[:i], part[i + 2:]


def _sub_request(part: bytes) -> SubRequest:
    head, payload = _head_body(part)
    ph = _headers(head)
    ctype = ph.get("content-type", "application/http").split(";")[0].strip().lower()
    if ctype != "application/http":
        raise _bad(f"A batch operation must be application/http, not {ctype!r}.")
    req_head, body = _head_body(payload.lstrip(b"\n"))
    lines = req_head.split(b"\n", 1)
    words = lines[0].decode("latin-1").split()
    if len(words) != 3 or not words[2].upper().startswith("HTTP/"):
        raise _bad(f"Malformed request line in a batch operation: {lines[0][:80]!r}")
    headers = _headers(lines[1]) if len(lines) > 1 else {}
    n = headers.get("content-length")
    if n is not None:
        try:
            length = int(n)
        except ValueError:
            raise _bad("Bad Content-Length in a batch operation.") from None
        if length < 0:
            raise _bad("Bad Content-Length in a batch operation.")
        # CRLF was normalised to LF, so a body with CRLF inside (pretty-printed JSON) is now shorter
        body = body[:length] if length <= len(body) else body.rstrip(b"\n")
    else:
        body = body.rstrip(b"\n")
    return SubRequest(words[0].upper(), words[1], headers, body, ph.get("content-id"))


def parse_batch(content_type: str | None, body: bytes) -> Batch:
    """Parse a ``$batch`` request body."""
    boundary = boundary_of(content_type)
    text = body.replace(b"\r\n", b"\n")
    out = Batch()
    for part in _split_parts(text, boundary):
        head, payload = _head_body(part)
        ph = _headers(head)
        ctype = ph.get("content-type", "")
        if ctype.split(";")[0].strip().lower() == "multipart/mixed":
            if out.changeset is not None:
                raise _bad("A batch request may contain only one changeset.")
            out.changeset = [_sub_request(p) for p in _split_parts(payload, boundary_of(ctype))]
        else:
            out.singles.append(_sub_request(part))
    if out.changeset is None and not out.singles:
        raise _bad("The batch request contains no operation.")
    if out.changeset is not None and out.singles:
        raise _bad("A batch request may hold either one changeset or one query operation.")
    if len(out.singles) > 1:
        raise _bad("A batch request may hold only one query operation outside a changeset.")
    return out


# --- responses ------------------------------------------------------------------------------------


_REASONS = {s.value: s.phrase for s in HTTPStatus}


def _http_part(r: SubResponse) -> bytes:
    lines = ["Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n",
             f"HTTP/1.1 {r.status} {_REASONS.get(r.status, 'Unknown')}"]
    if r.content_id is not None:
        lines.append(f"Content-ID: {r.content_id}")
    lines += [f"{k}: {v}" for k, v in r.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + r.body + (b"\r\n" if r.body else b"")


def format_batch(responses: list[SubResponse], changeset: bool = True) -> tuple[str, bytes]:
    """``(content type, body)`` of a batch response: the parts inside one changeset (or top level)."""
    outer = f"batchresponse_{uuid.uuid4()}"
    chunks = [f"--{outer}\r\n".encode()]
    if changeset:
        inner = f"changesetresponse_{uuid.uuid4()}"
        chunks.append(f"Content-Type: multipart/mixed; boundary={inner}\r\n\r\n".encode())
        delimiter = f"--{inner}\r\n".encode()
        for r in responses:
            chunks.append(delimiter)
            chunks.append(_http_part(r))
        chunks.append(f"--{inner}--\r\n".encode())
    else:
        for i, r in enumerate(responses):
            if i:
                chunks.append(f"--{outer}\r\n".encode())
            chunks.append(_http_part(r))
    chunks.append(f"--{outer}--\r\n".encode())
    return f"multipart/mixed; boundary={outer}", b"".join(chunks)
