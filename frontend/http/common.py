"""Small shared pieces of the HTTP frontend: the response object and the time formats."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

_date_cache: list[Any] = [0, b""]


def http_date() -> bytes:
    """The current time as RFC 1123 (cached per second)."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0] = now
        _date_cache[1] = formatdate(now, usegmt=True).encode()
    return _date_cache[1]


def iso_now() -> str:
    """The current time as Azure prints it in error messages."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e7):07d}Z"


class Response:
    """What an operation answers."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]] | None = None, body: bytes = b"") -> None:
        self.status = status
        self.headers = headers if headers is not None else []
        self.body = body
