"""``$batch`` multipart bodies (reference §6): parse requests, format responses. Pure, no I/O.

A batch body is ``multipart/mixed`` whose parts are either one nested ``multipart/mixed`` changeset
(the write operations, each an ``application/http`` part holding a whole HTTP request) or single
``application/http`` parts outside a changeset (a lone GET). The parser accepts LF or CRLF,
case-insensitive part headers, an optional ``Content-ID``, an optional ``Content-Length`` in
sub-requests and absolute or relative sub-request URLs. Anything it cannot read raises 400
InvalidInput.

A changeset holds up to 100 operations, so the per-operation work is kept small: the fast paths of
:mod:`frontend.http.fastpath` remember header blocks and lines, cut parts by ``split`` when the
delimiter lines are plain and normalise line ends in one pass; sub-requests are read by offsets;
response parts are written as one string each (:func:`http_part`). :func:`split_scan` cuts the parts
where ``split`` cannot (a delimiter line with trailing blanks); the plain versions that only check the
fast paths are in ``tests/oracles.py``, and ``tests/unit/test_batch_speed.py`` runs both on generated input.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from http import HTTPStatus

from frontend.http import fastpath
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
    if 10 not in delim:
        parts = fastpath.split_plain(body, delim, MAX_PARTS)
        if parts is not None:
            return parts
    return split_scan(body, delim)


def split_scan(body: bytes, delim: bytes) -> list[bytes]:
    """The parts between the delimiter lines ``delim`` of a body, found line by line (where
    :func:`frontend.http.fastpath.split_plain` declines)."""
    n = len(delim)
    marks: list[tuple[int, int, bool]] = []  # (line start, line end, closing)
    i = body.find(delim)
    while i >= 0:
        if i == 0 or body[i - 1] == 10:  # at the start of a line
            end = body.find(b"\n", i)
            end = len(body) if end < 0 else end
            tail = body[i + n:end].rstrip(b" \t")
            if tail in (b"", b"--"):
                marks.append((i, end, tail == b"--"))
                if tail == b"--":
                    break
        i = body.find(delim, i + n)
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
    return fastpath.headers_of(block).copy()


def _head_body(part: bytes) -> tuple[bytes, bytes]:
    i = part.find(b"\n\n")
    if i < 0:
        return part, b""
    return part[:i], part[i + 2:]


def _sub_request(part: bytes) -> SubRequest:
    """One ``application/http`` part as a :class:`SubRequest`."""
    headers_of = fastpath.headers_of
    i = part.find(b"\n\n")
    if i < 0:
        ph = headers_of(part)
        k = len(part)  # no payload
    else:
        ph = headers_of(part[:i])
        k = i + 2  # where the payload starts (offsets, not copies, from here on)
    ctype = ph.get("content-type")
    if ctype is not None and ctype != "application/http":
        ctype = ctype.split(";")[0].strip().lower()
        if ctype != "application/http":
            raise _bad(f"A batch operation must be application/http, not {ctype!r}.")
    if part[k:k + 1] == b"\n":
        part = part[k:].lstrip(b"\n")
        k = 0
    e = part.find(b"\n\n", k)  # the end of the request line and headers
    if e < 0:
        e = len(part)
        body = b""
    else:
        body = part[e + 2:]
    j = part.find(b"\n", k, e)
    line = part[k:e] if j < 0 else part[k:j]
    words = line.decode("latin-1").split()
    if len(words) != 3 or (words[2] != "HTTP/1.1" and not words[2].upper().startswith("HTTP/")):
        raise _bad(f"Malformed request line in a batch operation: {line[:80]!r}")
    headers = headers_of(part[j + 1:e]).copy() if j >= 0 else {}
    n = headers.get("content-length")
    if n is not None:
        try:
            length = int(n)
        except ValueError:
            raise _bad("Bad Content-Length in a batch operation.") from None
        if length < 0:
            raise _bad("Bad Content-Length in a batch operation.")
        # CRLF was normalised to LF, so a body with CRLF inside (pretty-printed JSON) is now shorter
        if length < len(body):
            body = body[:length]
        elif length > len(body):
            body = body.rstrip(b"\n")
    else:
        body = body.rstrip(b"\n")
    return SubRequest(words[0].upper(), words[1], headers, body, ph.get("content-id"))


def parse_batch(content_type: str | None, body: bytes) -> Batch:
    """Parse a ``$batch`` request body."""
    boundary = boundary_of(content_type)
    text = fastpath.lf(body)
    headers_of = fastpath.headers_of
    out = Batch()
    for part in _split_parts(text, boundary):
        head, payload = _head_body(part)
        ph = headers_of(head)
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
_PART_HEAD = "Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 "
_status_lines = {code: f"{_PART_HEAD}{code} {reason}" for code, reason in _REASONS.items()}


def header_text(headers: list[tuple[str, str]]) -> str:
    """``headers`` as :func:`http_part` wants them: ``"\\r\\nName: value"`` per header."""
    return "".join([f"\r\n{k}: {v}" for k, v in headers])


def http_part(status: int, content_id: str | None, headers: str, body: bytes = b"") -> bytes:
    """One ``application/http`` response part; ``headers`` as written by :func:`header_text`."""
    line = _status_lines.get(status) or f"{_PART_HEAD}{status} {_REASONS.get(status, 'Unknown')}"
    if content_id is None:
        text = f"{line}{headers}\r\n\r\n".encode()
    else:
        text = f"{line}\r\nContent-ID: {content_id}{headers}\r\n\r\n".encode()
    return text + body + b"\r\n" if body else text


def response_part(r: SubResponse) -> bytes:
    """:func:`http_part` of a :class:`SubResponse`."""
    return http_part(r.status, r.content_id, header_text(r.headers), r.body)


def format_parts(parts: list[bytes], changeset: bool = True) -> tuple[str, bytes]:
    """:func:`format_batch` of parts already written by :func:`http_part`."""
    outer = f"batchresponse_{uuid.uuid4()}"
    if changeset:
        inner = f"changesetresponse_{uuid.uuid4()}"
        delimiter = f"--{inner}\r\n".encode()
        head = f"--{outer}\r\nContent-Type: multipart/mixed; boundary={inner}\r\n\r\n".encode()
        body = b"".join([head, delimiter if parts else b"", delimiter.join(parts),
                         f"--{inner}--\r\n--{outer}--\r\n".encode()])
    else:
        delimiter = f"--{outer}\r\n".encode()
        body = b"".join([delimiter, delimiter.join(parts), f"--{outer}--\r\n".encode()])
    return f"multipart/mixed; boundary={outer}", body


def format_batch(responses: list[SubResponse], changeset: bool = True) -> tuple[str, bytes]:
    """``(content type, body)`` of a batch response: the parts inside one changeset (or top level)."""
    return format_parts([response_part(r) for r in responses], changeset)
