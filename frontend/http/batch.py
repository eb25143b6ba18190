"""``$batch`` multipart bodies (reference §6): parse requests, format responses. Pure, no I/O.

A batch body is ``multipart/mixed`` whose parts are either one nested ``multipart/mixed`` changeset
(the write operations, each an ``application/http`` part holding a whole HTTP request) or single
``application/http`` parts outside a changeset (a lone GET). The parser accepts LF or CRLF,
case-insensitive part headers, an optional ``Content-ID``, an optional ``Content-Length`` in
sub-requests and absolute or relative sub-request URLs. Anything it cannot read raises 400
InvalidInput.

A changeset holds up to 100 operations, so the per-operation work is kept small: header blocks (and
lines) are remembered, since the SDK sends the same few in every batch; parts are cut by ``split``
when the delimiter lines are plain; sub-requests are read by offsets; response parts are written as
one string each (:func:`http_part`). Each fast path gives exactly what the general code gives, errors
included; ``tests/unit/test_batch_speed.py`` compares them with the code they replaced on random input.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus

from rangetable.errors import TableError

MAX_PARTS = 1000

_LONE_CR = re.compile(rb"\r(?!\n)")
# Header blocks repeat from operation to operation and from batch to batch (the SDK's part headers
# differ only by Content-ID, its request headers by Content-Length): both the blocks and their lines
# are remembered, in small tables emptied when full.
_CACHE_BLOCKS, _CACHE_BLOCK = 512, 512  # remembered blocks, longest block remembered
_CACHE_LINES, _CACHE_LINE = 1024, 256
_blocks: dict[bytes, dict[str, str]] = {}  # header block -> its headers (never changed)
_lines: dict[str, tuple[str, str]] = {}  # header line -> (lower-case name, value)


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
        parts = _split_plain(body, delim)
        if parts is not None:
            return parts
    return _split_scan(body, delim)


def _split_plain(body: bytes, delim: bytes) -> list[bytes] | None:
    """:func:`_split_scan` of a body whose delimiter lines are all bare, or None when it is not one.

    Without LF in the delimiter, the delimiters at line starts are those ``split`` finds after an LF
    (or at 0); each piece then starts with the rest of its delimiter line. Anything else on a
    delimiter line (a closing ``--`` aside) or a body that does not close is left to the scan.
    """
    pieces = body.split(b"\n" + delim)
    if body.startswith(delim):
        pieces[0] = pieces[0][len(delim):]
    else:
        del pieces[0]  # the preamble
    parts = []
    for piece in pieces:
        end = piece.find(b"\n")
        if end > 0:
            tail = piece[:end]
        elif end == 0:
            parts.append(piece[1:])
            continue
        else:
            tail = piece
        if tail.rstrip(b" \t") != b"--":
            return None
        if len(parts) > MAX_PARTS:
            raise _bad("Too many parts in the multipart body.")
        return parts
    return None


def _split_scan(body: bytes, delim: bytes) -> list[bytes]:
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
    return _headers_of(block).copy()


def _headers_of(block: bytes) -> dict[str, str]:
    """:func:`_headers`, remembered for short blocks: callers must not change the dict."""
    out = _blocks.get(block)
    if out is None:
        out = _read_headers(block)
        if len(block) <= _CACHE_BLOCK:
            if len(_blocks) >= _CACHE_BLOCKS:
                _blocks.clear()
            _blocks[block] = out
    return out


def _read_headers(block: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = _lines
    for line in block.decode("latin-1").split("\n"):
        pair = lines.get(line)
        if pair is None:
            name, colon, value = line.partition(":")
            name = name.strip(" \t")
            if colon and name and name[0] not in "\r\x0b\x0c":
                pair = (name.lower(), value.lstrip(" \t").rstrip(" \t\r"))
                if len(line) <= _CACHE_LINE:
                    if len(lines) >= _CACHE_LINES:
                        lines.clear()
                    lines[line] = pair
            elif line.strip():
                raise _bad(f"Malformed header line in a batch part: {line[:80]!r}")
            else:
                continue
        out[pair[0]] = pair[1]
    return out


def _head_body(part: bytes) -> tuple[bytes, bytes]:
    i = part.find(b"\n\n")
    if i < 0:
        return part, b""
    return part[:i], part[i + 2:]


def _sub_request(part: bytes) -> SubRequest:
    i = part.find(b"\n\n")
    if i < 0:
        ph = _headers_of(part)
        k = len(part)  # no payload
    else:
        ph = _headers_of(part[:i])
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
    headers = _headers_of(part[j + 1:e]).copy() if j >= 0 else {}
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


def _lf(body: bytes) -> bytes:
    """``body`` with every CRLF turned into LF."""
    # Deleting every CR (memchr) after a regex scan for a CR not followed by LF costs less than half
    # what replacing the 2-byte CRLF (two substring searches) does, and gives the same bytes when
    # every CR is followed by LF, which is what clients send.
    if _LONE_CR.search(body) is None:
        return body.replace(b"\r", b"")
    return body.replace(b"\r\n", b"\n")


def parse_batch(content_type: str | None, body: bytes) -> Batch:
    """Parse a ``$batch`` request body."""
    boundary = boundary_of(content_type)
    text = _lf(body)
    out = Batch()
    for part in _split_parts(text, boundary):
        head, payload = _head_body(part)
        ph = _headers_of(head)
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
