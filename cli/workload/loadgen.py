"""A pipelined load generator over the native protocol, used by ``stress`` and ``drill rebalance``.

One DEALER socket keeps ``window`` requests in flight (so one Python client can saturate a
partition), choosing each request's key with a function and GET or PUT by a share.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from rangetable import curve, protocol
from rangetable.kernel.stats import percentile_ms

KeyFn = Callable[[random.Random, int], tuple[str, str]]


@dataclass
class LoadResult:
    """What a load generator saw."""

    gets: int = 0
    puts: int = 0
    busy: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    lat: dict[str, list[float]] = field(default_factory=lambda: {"get": [], "put": []})
    elapsed: float = 0.0

    def pct(self, kind: str, p: float) -> float:
        """Latency percentile in ms."""
        return percentile_ms(self.lat[kind], p)

    @property
    def error_count(self) -> int:
        """Errors other than ServerBusy."""
        return sum(self.errors.values())


class LoadGen(threading.Thread):
    """Sends GETs and PUTs to one table for ``duration`` seconds (or until stopped)."""

    def __init__(self, native: str, table: str, key_fn: KeyFn, *, get_share: float = 0.5, window: int = 64,
                 duration: float = 10.0, seed: int = 0, pad: int = 100) -> None:
        super().__init__(daemon=True)
        self.native, self.table, self.key_fn = native, table, key_fn
        self.get_share, self.window, self.duration = get_share, window, duration
        self.rnd = random.Random(seed)
        self.pad = "x" * pad
        self.result = LoadResult()
        self.halt = threading.Event()

    def run(self) -> None:
        """Drive the load; the result is in ``self.result``."""
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        curve.connect(sock, self.native)
        ids = itertools.count(1)
        inflight: dict[bytes, tuple[str, float]] = {}
        res = self.result
        n = itertools.count()

        def send() -> None:
            pk, rk = self.key_fn(self.rnd, next(n))
            kind = "get" if self.rnd.random() < self.get_share else "put"
            body: dict[str, object]
            if kind == "get":
                body = {"op": "get", "table": self.table, "pk": pk, "rk": rk}
            else:
                body = {"op": "write", "table": self.table, "write": {
                    "op": "insert_or_replace", "pk": pk, "rk": rk,
                    "props": {"n": [1, self.rnd.randrange(1 << 30)], "pad": [0, self.pad]}, "if_match": None}}
            rid = b"%d" % next(ids)
            inflight[rid] = (kind, time.perf_counter())
            protocol.send_frames(sock, [rid, protocol.pack(body)])

        try:
            t0 = time.monotonic()
            end = t0 + self.duration
            while len(inflight) < self.window:
                send()
            while inflight:
                if not sock.poll(15000):
                    res.errors["NoAnswer"] = res.errors.get("NoAnswer", 0) + len(inflight)
                    break
                rid, body = protocol.recv_frames(sock)
                kind, sent = inflight.pop(rid)
                err = protocol.unpack(body).get("error")
                if err is None or err["code"] == "ResourceNotFound":
                    if kind == "get":
                        res.gets += 1
                    else:
                        res.puts += 1
                    res.lat[kind].append(time.perf_counter() - sent)
                elif err["code"] == "ServerBusy":
                    res.busy += 1
                else:
                    res.errors[err["code"]] = res.errors.get(err["code"], 0) + 1
                if time.monotonic() < end and not self.halt.is_set():
                    send()
            res.elapsed = time.monotonic() - t0
        finally:
            sock.close(0)
