"""A small client of etcd's v3 JSON gateway (``POST /v3/...``, keys and values base64), over urllib.

Only what the election and the meta store need: range (with paging), transactions, lease grant and
keep-alive. etcd numbers int64 fields as JSON strings and leaves out fields at their default (a
failed transaction has no ``succeeded``), which the helpers here smooth over.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from rangetable.errors import TableError

# Keys per range request. etcd 3.4 walks the whole rest of the range in its index for every page and
# the JSON gateway's marshalling is slow: at 100,000 keys pages of 10,000 read in ~5 s, pages of 1,000
# in 7-12 s (one run each on the loaded 2-core host, load ~16; docs/control-plane.md).
PAGE = 10_000


def parse_url(url: str) -> tuple[str, str]:
    """``etcd://host:port[/prefix]`` as (``http://host:port``, prefix without a trailing slash)."""
    u = urllib.parse.urlparse(url)
    if u.scheme != "etcd" or not u.hostname or not u.port:
        raise ValueError(f"--meta wants etcd://HOST:PORT[/prefix], not {url!r}")
    return f"http://{u.hostname}:{u.port}", (u.path.rstrip("/") or "/rangetable")


def b64(data: bytes) -> str:
    """Bytes as etcd's JSON gateway wants them."""
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    """Bytes from etcd's JSON gateway."""
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The range end that selects every key starting with ``prefix`` (etcd's convention)."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return b"\x00"


def put_op(key: bytes, value: bytes, lease: int = 0) -> dict:
    """A put request inside a transaction."""
    req: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        req["lease"] = str(lease)
    return {"request_put": req}


def delete_op(key: bytes) -> dict:
    """A delete request inside a transaction."""
    return {"request_delete_range": {"key": b64(key)}}


def value_is(key: bytes, value: bytes) -> dict:
    """A transaction comparison: the key holds ``value``."""
    return {"key": b64(key), "result": "EQUAL", "target": "VALUE", "value": b64(value)}


def absent(key: bytes) -> dict:
    """A transaction comparison: the key does not exist."""
    return {"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": "0"}


class EtcdClient:
    """One etcd endpoint, spoken to through its JSON gateway."""

    def __init__(self, base: str, timeout_s: float = 2.0) -> None:
        self.base = base
        self.timeout_s = timeout_s

    def call(self, path: str, body: dict) -> dict:
        """POST ``body`` to ``/v3/<path>``; raises TableError(ServiceUnavailable) when etcd does not answer."""
        req = urllib.request.Request(f"{self.base}/v3/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise TableError("InternalError", f"etcd {path}: {exc.code} {exc.read()[:200]!r}") from None
        except (OSError, ValueError) as exc:
            raise TableError("ServerBusy", f"etcd at {self.base} did not answer: {exc}") from None

    def get(self, key: bytes) -> tuple[bytes | None, int]:
        """(the value of ``key`` or None, the store's revision)."""
        res = self.call("kv/range", {"key": b64(key)})
        kvs = res.get("kvs", [])
        return (unb64(kvs[0].get("value", "")) if kvs else None), int(res["header"].get("revision", 0))

    def scan(self, prefix: bytes) -> tuple[list[tuple[bytes, bytes]], int]:
        """(every (key, value) under ``prefix`` in key order, the revision they were read at): pages
        of PAGE keys, all read at the first page's revision, so the whole is one consistent view."""
        out: list[tuple[bytes, bytes]] = []
        start, end, rev = prefix, prefix_end(prefix), 0
        while True:
            body: dict[str, Any] = {"key": b64(start), "range_end": b64(end), "limit": str(PAGE)}
            if rev:
                body["revision"] = str(rev)
            res = self.call("kv/range", body)
            rev = rev or int(res["header"].get("revision", 0))
            kvs = res.get("kvs", [])
            out.extend((unb64(kv["key"]), unb64(kv.get("value", ""))) for kv in kvs)
            if not res.get("more") or not kvs:
                return out, rev
            start = out[-1][0] + b"\x00"

    def txn(self, compare: list[dict], success: list[dict], failure: Sequence[dict] = ()) -> tuple[bool, dict]:
        """Run a transaction; returns (whether the comparisons held, etcd's answer)."""
        res = self.call("kv/txn", {"compare": compare, "success": success, "failure": list(failure)})
        return bool(res.get("succeeded", False)), res

    def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (its id, the TTL etcd granted)."""
        res = self.call("lease/grant", {"TTL": str(ttl_s)})
        return int(res["ID"]), int(res.get("TTL", 0))

    def keepalive(self, lease: int) -> int:
        """Renew a lease; returns its TTL (0: it had expired, and is gone)."""
        res = self.call("lease/keepalive", {"ID": str(lease)})
        return int(res.get("result", res).get("TTL", 0))
