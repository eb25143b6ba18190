"""FAST PATHS of the HTTP frontend process — the one module where speed, not reading order, shapes the code.

What each speeds up, and its plain version: the product's own fallback where the fast one declines an
input, or, where it declines none, the readable definition in ``tests/oracles.py`` (``tests/unit/
test_batch_speed.py``, ``test_conversion_speed.py`` and ``test_http_fastpath.py`` run both on the same
generated input and assert the same result, errors included):

* :func:`headers_of` — ``$batch`` header blocks: the SDK sends the same few blocks (and lines) in every
  part of every batch, so both are remembered in small tables emptied when full. Plain:
  ``tests.oracles.read_headers``.
* :func:`split_plain` — cutting a multipart body at its delimiter lines with one ``bytes.split`` when
  they are bare (what clients send). Plain: :func:`frontend.http.batch.split_scan`.
* :func:`lf` — CRLF → LF of a batch body by deleting every CR (one ``memchr`` pass) when no CR stands
  alone. Plain: ``tests.oracles.lf``.
* :func:`split_url` — the (netloc, path, query) of a batch operation's absolute URL by one regex and a
  memo, instead of ``urllib.parse.urlsplit``. Plain: :func:`frontend.http.batch_ops.split_url_plain`.
* :func:`parse_json_fast` — an entity body decoded by orjson when it provably gives what the stdlib
  decoder gives. Plain: :func:`frontend.http.odata.parse_json_plain`.

A few more fast paths stay with the code they shortcut, because each is one branch of it:

* :meth:`frontend.http.app.RestApp.serve` — a point operation without a coroutine; plain:
  :meth:`~frontend.http.app.RestApp.respond`;
* in :mod:`frontend.http.parse`: the remembered URL parses of :func:`~frontend.http.parse.parse_resource`,
  the SDK's plain ``PartitionKey='…',RowKey='…'`` form matched at once before
  :func:`~frontend.http.parse.parse_keys`, and the memo of the account a Host header names
  (``split_account``);
* in :mod:`frontend.http.odata`: JSON written by orjson with pre-rendered fragments, and edit links of
  plain keys without :func:`~frontend.http.odata.entity_path`'s percent-encoding.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from rangetable.errors import TableError

# --- $batch header blocks -------------------------------------------------------------------------

_CACHE_BLOCKS, _CACHE_BLOCK = 512, 512  # remembered blocks, longest block remembered
_CACHE_LINES, _CACHE_LINE = 1024, 256
_blocks: dict[bytes, dict[str, str]] = {}  # header block -> its headers (never changed)
_lines: dict[str, tuple[str, str]] = {}  # header line -> (lower-case name, value)


def headers_of(block: bytes) -> dict[str, str]:
    """``Name: value`` lines of a batch part as a dict keyed by lower-case name (blank lines ignored;
    400 InvalidInput on other lines), remembered for short blocks: callers must not change the dict."""
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
                raise TableError("InvalidInput", f"Malformed header line in a batch part: {line[:80]!r}")
            else:
                continue
        out[pair[0]] = pair[1]
    return out


# --- multipart bodies -----------------------------------------------------------------------------

_LONE_CR = re.compile(rb"\r(?!\n)")


def split_plain(body: bytes, delim: bytes, max_parts: int) -> list[bytes] | None:
    """The parts of a body whose delimiter lines are all bare, or None when it is not one.

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
        if len(parts) > max_parts:
            raise TableError("InvalidInput", "Too many parts in the multipart body.")
        return parts
    return None


def lf(body: bytes) -> bytes:
    """``body`` with every CRLF turned into LF."""
    # Deleting every CR (memchr) after a regex scan for a CR not followed by LF costs less than half
    # what replacing the 2-byte CRLF (two substring searches) does, and gives the same bytes when
    # every CR is followed by LF, which is what clients send.
    if _LONE_CR.search(body) is None:
        return body.replace(b"\r", b"")
    return body.replace(b"\r\n", b"\n")


# --- absolute URLs of batch operations ----------------------------------------------------------------

# An absolute URL whose urlsplit is plain: scheme://netloc[/path][?query] with an ASCII netloc without
# brackets, no fragment and nothing urlsplit strips or removes (C0 controls, space).
PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#\[\]\x00-\x20\x7f-\U0010ffff]*)"
                       r"(/[^?#\x00-\x20]*)?(?:\?([^#\x00-\x20]*))?")
_urls: dict[str, tuple[str, str, str]] = {}  # absolute URL -> (netloc, path, query), emptied when full


def split_url(url: str) -> tuple[str, str, str] | None:
    """``(netloc, path, query)`` of an absolute URL as ``urlsplit`` gives them, or None when the URL is
    not plain (see :data:`PLAIN_URL`); remembered for URLs up to 1 KiB."""
    split = _urls.get(url)
    if split is None:
        m = PLAIN_URL.fullmatch(url)
        if m is None:
            return None
        split = (m[1], m[2] or "", m[3] or "")
        if len(url) <= 1024:
            if len(_urls) >= 1024:
                _urls.clear()
            _urls[url] = split
    return split


# --- JSON request bodies ----------------------------------------------------------------------------


def parse_json_fast(body: bytes) -> dict[str, Any] | None:
    """The JSON object ``body`` holds, decoded by orjson, when that is provably what the plain (stdlib)
    decoder returns; None otherwise (the caller then decodes it the plain way).

    Every ``"`` in ``body`` delimits a string or is escaped inside one, so ``body`` holds exactly two
    per name and string value of the object iff it has no escaped quote and orjson dropped no member
    as a duplicate (nor anything nested, which is checked for by value). Floats beyond ±1e18 may be
    integers orjson rounded (json keeps them exact), so they take the plain path too.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    strings = len(doc)
    for v in doc.values():
        t = type(v)
        if t is str:
            strings += 1
        elif t is dict or t is list or (t is float and not -1e18 < v < 1e18):
            return None
    return doc if body.count(b'"') == 2 * strings else None
