"""Simulated partition servers: many per process, for benchmarking the control plane at scale.

Each simulated server speaks the real protocol (``docs/protocol.md``) on its own two sockets, as a
real partition server does: a ROUTER bound on an ephemeral port, where the coordinator's commands
arrive (``load``, ``unload``, ``prepare``, ``split_key``, ``split``, ``merge``, ``destroy``,
``ping``), and a DEALER to the coordinator, on which it heartbeats every ``heartbeat_s`` with the
real body: its ranges as ``[id, epoch, state]`` and per-range load reports, only the changed ones
plus all of them every ``FULL_REPORT_S`` (:func:`partition_server.served.only_changed`). It keeps
no data (no RocksDB): a command only changes which ranges it says it serves.

One process runs hundreds of them in one loop over all their sockets (``zmq_poll`` on a prebuilt
list). A control DEALER connects to the benchmark, which asks for statistics (heartbeat round-trip
times, when each range was loaded) and kills single servers (their sockets close, so they fall
silent and refuse connections, like a killed process).

Run as ``python -m cli.workload.simulated SPEC.json``; the spec names the coordinator, the
benchmark's control endpoint, and each server's id with its initial ranges. The servers bind their
sockets at once and start heartbeating when the benchmark says ``go`` (once the coordinator is up).
"""

from __future__ import annotations

import heapq
import json
import os
import random
import sys
import time
import uuid
from typing import Any

import zmq
from zmq.backend import zmq_poll

from partition_server.served import FULL_REPORT_S, only_changed
from rangetable import curve, protocol
from rangetable.errors import TableError

IDLE_LOAD = {"entities": 1000, "bytes": 1 << 20}  # what RangeSet.load_report gives an idle range
_POLLIN = int(zmq.POLLIN)
_OK_NONE = protocol.ok(None)


def make_socket(ctx: zmq.Context, kind: int) -> zmq.Socket:
    """Every socket of this module is made here (one place for socket options and security)."""
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
    return s


class SimServer:
    """One simulated partition server: its ranges, its two sockets, its heartbeat state."""

    def __init__(self, ctx: zmq.Context, sid: str, coordinator: str, ranges: list[list],
                 heartbeat_s: float, keys: curve.KeyRing) -> None:
        self.id = sid
        self.incarnation = uuid.uuid4().hex[:12]
        self.ranges: dict[str, int] = {rid: int(epoch) for rid, epoch in ranges}  # range id -> epoch
        self.heartbeat_s = heartbeat_s
        self.router = make_socket(ctx, zmq.ROUTER)
        curve.secure_server(self.router, keys.pair("partition-server"), "partition-server")  # no ZAP: any keyed peer
        self.router.bind("tcp://127.0.0.1:0")
        self.endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.coord = make_socket(ctx, zmq.DEALER)
        curve.secure_client(self.coord, keys.pair("partition-server"), keys.public("coordinator"))
        self.coord.connect(coordinator)
        self.alive = True
        self.seq = 0
        self.sent: dict[bytes, float] = {}
        self.reported: dict[str, dict] = {}
        self.full_at = time.monotonic() - random.uniform(0, FULL_REPORT_S)  # staggered full reports
        self.lease_until = 0.0

    def heartbeat(self, now: float) -> None:
        """Send one heartbeat with the real body."""
        self.seq += 1
        rid = b"hb%d" % self.seq
        self.sent[rid] = now
        if len(self.sent) > 64:
            for k in sorted(self.sent, key=self.sent.__getitem__)[:32]:
                del self.sent[k]
        full = now - self.full_at >= FULL_REPORT_S
        if full:
            self.full_at = now
        load = only_changed({r: IDLE_LOAD for r in self.ranges}, self.reported, full)
        body = {"op": "heartbeat", "server": self.id, "endpoint": self.endpoint, "incarnation": self.incarnation,
                "pid": os.getpid(), "ranges": [[r, e, "serving"] for r, e in self.ranges.items()],
                "load": load, "pending": 0}
        protocol.send_frames(self.coord, [rid, protocol.pack(body)])

    def on_heartbeat_reply(self, frames: list[bytes], now: float) -> float | None:
        """Take a heartbeat answer; returns its round-trip time in seconds (None if unknown)."""
        sent = self.sent.pop(frames[0], None) if len(frames) == 2 else None
        if sent is None:
            return None
        try:
            reply = protocol.result(frames[1])
            self.lease_until = max(self.lease_until, sent + float(reply["lease_s"]))
        except TableError:
            pass
        return now - sent

    def command(self, req: dict) -> Any:
        """Carry out a control command the way a partition server answers it (without data)."""
        op = req["op"]
        if op == "load":
            rec = req["range"]
            self.ranges[rec["id"]] = int(rec["epoch"])
            return None
        if op == "unload":
            self.ranges.pop(req["range"], None)
            return None
        if op in ("prepare", "status"):
            return None
        if op == "split_key":
            return None  # no data: the benchmark always names the split key
        if op == "split":  # answered as RangeSet.split_finish answers (no data: nothing offline)
            self.ranges.pop(req["range"], None)
            return {"ms": 0.0, "offline_ms": 0.0, "steps": {}}
        if op == "merge":
            for side in ("left", "right"):
                self.ranges.pop(req[side]["id"], None)
            return None
        if op == "destroy":
            self.ranges.pop(req["range"]["id"], None)
            return None
        if op == "ping":
            return {"server": self.id, "lease": time.monotonic() < self.lease_until}
        raise TableError("NotPrimary", f"{self.id} is simulated and serves no data")

    def close(self) -> None:
        """Fall silent like a killed process: both sockets closed."""
        self.alive = False
        self.router.close(0)
        self.coord.close(0)


class SimProcess:
    """The loop of one process of simulated servers."""

    due: list[tuple[float, str]]  # (when, server id): the heartbeat schedule, a heap

    def __init__(self, spec: dict) -> None:
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, 4 * len(spec["servers"]) + 64)
        hb = float(spec.get("heartbeat_s", 0.5))
        keys = curve.KeyRing.load(spec["keys_dir"], own="partition-server")
        self.servers = {s["id"]: SimServer(self.ctx, s["id"], spec["coordinator"], s["ranges"], hb, keys)
                        for s in spec["servers"]}
        self.control = make_socket(self.ctx, zmq.DEALER)
        self.control.connect(spec["control"])
        self.rtts: list[float] = []
        self.lags: list[float] = []  # how late each heartbeat left (this process's own scheduling delay)
        self.loads: dict[str, list] = {}  # range id -> [server, wall time] of its latest load
        self.heartbeats = 0
        self.stopping = False
        self._rebuild()

    def _rebuild(self) -> None:
        self.items = [(self.control, _POLLIN)]
        self.primary: dict[Any, tuple[SimServer, bool]] = {}
        for s in self.servers.values():
            if s.alive:
                self.items += [(s.router, _POLLIN), (s.coord, _POLLIN)]
                self.primary[s.router] = (s, True)
                self.primary[s.coord] = (s, False)

    def _on_control(self, req: dict) -> Any:
        op = req["op"]
        if op == "stats":
            out = {"rtts": self.rtts, "lags": self.lags, "heartbeats": self.heartbeats, "loads": self.loads,
                   "ranges": {s.id: len(s.ranges) for s in self.servers.values() if s.alive}}
            if req.get("reset", True):
                self.rtts, self.lags, self.loads, self.heartbeats = [], [], {}, 0
            return out
        if op == "kill":
            s = self.servers[req["server"]]
            t = time.time()
            s.close()
            self._rebuild()
            return {"killed": s.id, "time": t, "ranges": sorted(s.ranges)}
        if op == "go":  # start heartbeating, each server at a random phase of its interval
            now = time.monotonic()
            self.due = [(now + random.uniform(0, s.heartbeat_s), s.id) for s in self.servers.values()]
            heapq.heapify(self.due)
            return None
        if op == "quit":
            self.stopping = True
            return None
        raise TableError("InvalidInput", f"unknown op {op!r}")

    def run(self) -> None:
        """Heartbeat every server on schedule and answer whatever arrives, until told to quit."""
        protocol.send_frames(self.control, [b"ready", protocol.pack(
            {s.id: s.endpoint for s in self.servers.values()})])
        self.due = []  # filled by the benchmark's "go"
        while not self.stopping:
            now = time.monotonic()
            due = self.due
            while due and due[0][0] <= now:
                t, sid = heapq.heappop(due)
                s = self.servers[sid]
                if s.alive:
                    self.lags.append(now - t)
                    s.heartbeat(now)
                    self.heartbeats += 1
                    heapq.heappush(due, (max(t + s.heartbeat_s, now), sid))
            timeout = max(0, int((due[0][0] - time.monotonic()) * 1000) + 1) if due else 100
            for sock, _ in zmq_poll(self.items, timeout):
                if sock is self.control or sock in self.primary:  # not closed by a kill just now
                    self._drain(sock)

    def _drain(self, sock: zmq.Socket) -> None:
        while protocol.readable(sock):
            frames = protocol.recv_frames(sock, protocol.NOBLOCK)
            if sock is self.control:
                body = self._answer(lambda req: self._on_control(req), frames)
                protocol.send_frames(sock, [frames[0], body])
                if self.stopping:
                    return
                continue
            s, is_router = self.primary[sock]
            if not is_router:
                rtt = s.on_heartbeat_reply(frames, time.monotonic())
                if rtt is not None:
                    self.rtts.append(rtt)
                continue
            body = self._answer(s.command, frames[1:])
            if body == _OK_NONE and len(frames) > 2:
                self._note_load(s, frames[2])
            protocol.send_frames(sock, [frames[0], frames[1] if len(frames) > 1 else b"", body])

    def _note_load(self, s: SimServer, raw: bytes) -> None:
        try:
            req = protocol.unpack(raw)
        except TableError:
            return
        if isinstance(req, dict) and req.get("op") == "load":
            self.loads[req["range"]["id"]] = [s.id, time.time()]

    @staticmethod
    def _answer(fn: Any, frames: list[bytes]) -> bytes:
        try:
            _, req = protocol.parse_request(frames)
            return protocol.ok(fn(req))
        except TableError as exc:
            return protocol.error(exc)
        except Exception as exc:  # a bug must not stop the simulation; report it
            return protocol.error(TableError("InternalError", f"{type(exc).__name__}: {exc}"))

    def close(self) -> None:
        """Close every socket."""
        for s in self.servers.values():
            if s.alive:
                s.close()
        self.control.close(0)
        self.ctx.term()


def main(argv: list[str]) -> None:
    """Entry point: ``python -m cli.workload.simulated SPEC.json``."""
    with open(argv[0]) as f:
        spec = json.load(f)
    proc = SimProcess(spec)
    try:
        proc.run()
    finally:
        proc.close()


if __name__ == "__main__":
    main(sys.argv[1:])
