"""A small client of etcd's v3 JSON gateway (``POST /v3/...``, keys and values base64), over urllib.

Only what the election and the meta store need: range (with paging), transactions, lease grant and
keep-alive. etcd numbers int64 fields as JSON strings and leaves out fields at their default (a
failed transaction has no ``succeeded``), which the helpers here smooth over.

Several members (``etcd://h1:p1,h2:p2,h3:p3/prefix``): a request goes to the member that answered
last; when it does not answer (no connection, a timeout, or a 5xx such as a member without a leader)
the next member is tried at once (a member that does not accept the connection within ``CONNECT_S``, one
that does not answer within ``timeout_s``), like etcd's own clientv3 balancer. Every
read is linearizable (etcd's default), so a member cut off in a minority never answers a stale value.
A request retried on another member may have been applied by the first: the puts and deletes here are
idempotent, the meta store's transactions compare the term only, and a retried election transaction at
worst fails its comparison (the term then waits one TTL for the orphaned leader key to expire).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from rangetable.errors import TableError

# Keys per range request. etcd 3.4 walks the whole rest of the range in its index for every page and
# the JSON gateway's marshalling is slow: at 100,000 keys pages of 10,000 read in ~5 s, pages of 1,000
# in 7-12 s (one run each on the loaded 2-core host, load ~16; docs/control-plane.md).
PAGE = 10_000
CONNECT_S = 0.25  # a member whose host does not even answer the connection within this is skipped
SCAN_TIMEOUT_S = 30.0  # per page of a whole-store scan (100,000 ranges in pages of 10,000; a page took over
# 0.8 s, the election's timeout, on the loaded host)
COMMIT_TIMEOUT_S = 10.0  # a meta-store transaction (up to --max-txn-ops puts: a 500-key commit outlived the
# election's 1 s on the 2-core host under the test suite's load)
COMMIT_FIRST_TRY_S = 2.0  # … but the member asked first gets this long before the others are asked: a commit in flight
# to an etcd leader that was cut off waited the whole COMMIT_TIMEOUT_S, and every controller job (a dead server's
# failover too) behind it (the netsplit drill's primary-and-etcd fault)
RETRY_PAUSE_S = 0.1  # … and a member that refused at once ("no leader") is not asked again before this


def parse_url(url: str) -> tuple[str, str]:
    """``etcd://host:port[,host:port...][/prefix]`` as (``http://host:port[,http://host:port...]``, prefix
    without a trailing slash); the first part is what :class:`EtcdClient` takes."""
    u = urllib.parse.urlparse(url)
    members = u.netloc.split(",") if u.scheme == "etcd" else []
    bases: list[str] = []
    for m in members:
        one = urllib.parse.urlparse(f"etcd://{m}")
        try:
            port = one.port
        except ValueError:
            port = None
        if not one.hostname or not port:
            bases = []
            break
        bases.append(f"http://{m}")
    if not bases:
        raise ValueError(f"--meta wants etcd://HOST:PORT[,HOST:PORT...][/prefix], not {url!r}")
    return ",".join(bases), (u.path.rstrip("/") or "/rangetable")


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
    """An etcd cluster's members (``base``: ``http://host:port``, comma-separated), spoken to through their
    JSON gateway; fails over between members (see the module's docstring)."""

    def __init__(self, base: str, timeout_s: float = 2.0) -> None:
        self.bases = [b for b in base.split(",") if b]
        self.current = 0  # the member that answered last
        self.timeout_s = timeout_s

    @property
    def base(self) -> str:
        """The member requests go to first."""
        return self.bases[self.current % len(self.bases)]

    def call(self, path: str, body: dict, timeout_s: float | None = None, first_try_s: float | None = None) -> dict:
        """POST ``body`` to ``/v3/<path>`` on the first member that answers (each within ``timeout_s``, by
        default the client's); raises TableError(ServerBusy) when none does, TableError(InternalError) when
        etcd refuses the request. With several members and ``first_try_s``, the members are asked in turn, each
        for ``first_try_s`` at most, pausing :data:`RETRY_PAUSE_S` after a quick refusal, until one serves the
        request; the last try, to the member asked first, gets what is left of ``first_try_s`` + ``timeout_s``
        (slow rather than gone). An etcd leader cut off answers nothing, and while the others elect a new one they
        refuse ("no leader") or hold the request until etcd's own timeout (a proposal sent to the lost leader):
        a new request to them is served as soon as they have one."""
        data = json.dumps(body).encode()
        timeout = timeout_s or self.timeout_s
        n = len(self.bases)
        order = [(self.current + i) % n for i in range(n)]
        failures: list[str] = []
        if n == 1 or first_try_s is None or first_try_s >= timeout:
            for k in order:
                out = self._try(k, path, data, timeout, failures)
                if out is not None:
                    return out
            raise TableError("ServerBusy", f"etcd did not answer ({'; '.join(failures)})")
        deadline = time.monotonic() + first_try_s + timeout
        turn = 0
        while deadline - time.monotonic() > 2 * first_try_s:
            k = order[turn % n]
            turn += 1
            t0 = time.monotonic()
            out = self._try(k, path, data, first_try_s, failures)
            if out is not None:
                return out
            if time.monotonic() - t0 < RETRY_PAUSE_S:  # refused at once: not again at once
                time.sleep(RETRY_PAUSE_S)
        out = self._try(order[0], path, data, max(first_try_s, deadline - time.monotonic()), failures)
        if out is not None:
            return out
        raise TableError("ServerBusy", f"etcd did not answer ({'; '.join(failures[-2 * n:])})")

    def _try(self, k: int, path: str, data: bytes, patience: float, failures: list[str]) -> dict | None:
        """Ask member ``k`` once: its answer (it becomes :attr:`current`), or None with the failure noted;
        TableError(InternalError) when etcd refuses the request."""
        base = self.bases[k]
        try:
            status, raw = self._post(base, f"/v3/{path}", data, patience)
            out = json.loads(raw or b"{}") if status < 400 else None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            failures.append(f"{base}: {exc or type(exc).__name__}")
            return None
        if out is not None:
            self.current = k
            return out if isinstance(out, dict) else {}
        detail = f"{status} {raw[:200]!r}"
        if status < 500:
            raise TableError("InternalError", f"etcd {path}: {detail}")
        failures.append(f"{base}: {detail}")  # e.g. a member without a leader: try the next
        return None

    def _post(self, base: str, path: str, data: bytes, timeout_s: float) -> tuple[int, bytes]:
        """One POST to one member: (HTTP status, body)."""
        u = urllib.parse.urlsplit(base)
        host, port = u.hostname or "", u.port or 2379
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.sock = socket.create_connection((host, port), timeout=min(CONNECT_S, timeout_s))
            conn.sock.settimeout(timeout_s)
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def get(self, key: bytes) -> tuple[bytes | None, int]:
        """(the value of ``key`` or None, the store's revision)."""
        res = self.call("kv/range", {"key": b64(key)})
        kvs = res.get("kvs", [])
        return (unb64(kvs[0].get("value", "")) if kvs else None), int(res["header"].get("revision", 0))

    def scan(self, prefix: bytes, timeout_s: float = SCAN_TIMEOUT_S) -> tuple[list[tuple[bytes, bytes]], int]:
        """(every (key, value) under ``prefix`` in key order, the revision they were read at): pages
        of PAGE keys, all read at the first page's revision, so the whole is one consistent view; each
        page may take ``timeout_s``."""
        out: list[tuple[bytes, bytes]] = []
        start, end, rev = prefix, prefix_end(prefix), 0
        while True:
            body: dict[str, Any] = {"key": b64(start), "range_end": b64(end), "limit": str(PAGE)}
            if rev:
                body["revision"] = str(rev)
            res = self.call("kv/range", body, timeout_s)
            rev = rev or int(res["header"].get("revision", 0))
            kvs = res.get("kvs", [])
            out.extend((unb64(kv["key"]), unb64(kv.get("value", ""))) for kv in kvs)
            if not res.get("more") or not kvs:
                return out, rev
            start = out[-1][0] + b"\x00"

    def txn(self, compare: list[dict], success: list[dict], failure: Sequence[dict] = (),
            timeout_s: float | None = None, first_try_s: float | None = None) -> tuple[bool, dict]:
        """Run a transaction (each member within ``timeout_s``, by default the client's, the first one asked
        within ``first_try_s``: :meth:`call`); returns (whether the comparisons held, etcd's answer)."""
        res = self.call("kv/txn", {"compare": compare, "success": success, "failure": list(failure)}, timeout_s,
                        first_try_s)
        return bool(res.get("succeeded", False)), res

    def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (its id, the TTL etcd granted)."""
        res = self.call("lease/grant", {"TTL": str(ttl_s)})
        return int(res["ID"]), int(res.get("TTL", 0))

    def keepalive(self, lease: int) -> int:
        """Renew a lease; returns its TTL (0: it had expired, and is gone)."""
        res = self.call("lease/keepalive", {"ID": str(lease)})
        return int(res.get("result", res).get("TTL", 0))
