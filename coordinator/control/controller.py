"""The controller: the coordinator's worker thread that carries out multi-step changes.

Jobs run one at a time, in order: create/delete table, move, split, merge, failover, reconcile.
Each one is logged (as a map state or an intent) and committed to the meta store before it acts, and
is idempotent, so a crash at any step converges to one valid map on restart. The controller talks
to partition servers over its own DEALER sockets; it hands replies and map publications back to the
coordinator's loop through an inproc socket, because ZeroMQ sockets belong to one thread. Every
command carries the leader's term and is preceded by the fencing check (:meth:`Leader.fence`).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import zmq

from rangetable import curve, protocol
from rangetable.errors import TableError

if TYPE_CHECKING:
    from coordinator.state.cluster import Cluster
    from rangetable.messages import ControlCommand

log = logging.getLogger("rangetable.coordinator")
JobReply = Callable[[Any, "TableError | None"], None]  # how a controller job's result is answered


class Leader(Protocol):
    """The leader a command is sent for (the coordinator process, which makes the controller): every
    command carries its term, and it steps down before sending when a later term exists."""

    term: int

    def fence(self) -> None:
        """Step down at once when a later term exists."""
        ...


class Controller(threading.Thread):
    """Runs jobs sequentially against the partition map and the partition servers.

    It reaches each server at the endpoint ``cl.registry`` has for it, with the coordinator's keys, and sends
    every command with ``leader``'s term, fenced (:meth:`Leader.fence`) before it leaves.
    """

    def __init__(self, cl: Cluster, leader: Leader, ctx: zmq.Context, name: str = "controller") -> None:
        super().__init__(name=name, daemon=True)
        self.cl = cl
        self.leader = leader
        self.ctx = ctx
        self.jobs: queue.Queue = queue.Queue()
        self.pending_keys: set[str] = set()
        self._keys_lock = threading.Lock()  # pending_keys: submitted from any thread
        self._socks: dict[str, tuple[str, zmq.Socket]] = {}
        self._ids = itertools.count()
        self.stopping = False

    # --- job queue ----------------------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], *args: Any, reply: JobReply | None = None, key: str | None = None) -> bool:
        """Queue a job; with ``key``, at most one such job waits at a time (returns False if queued)."""
        if key is not None:
            with self._keys_lock:
                if key in self.pending_keys:
                    return False
                self.pending_keys.add(key)
        self.jobs.put((fn, args, reply, key))
        return True

    def run(self) -> None:
        """The thread body."""
        while not self.stopping:
            try:
                fn, args, reply, key = self.jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            if key is not None:
                with self._keys_lock:
                    self.pending_keys.discard(key)
            try:
                res, err = fn(*args), None
            except TableError as exc:
                res, err = None, exc
            except Exception as exc:
                log.exception("job %s failed", getattr(fn, "__name__", fn))
                res, err = None, TableError("InternalError", f"{type(exc).__name__}: {exc}")
            if reply is not None:
                reply(res, err)
        for _, s in self._socks.values():
            s.close(0)

    # --- talking to partition servers ---------------------------------------------------------

    def _socket(self, server: str) -> zmq.Socket:
        """The DEALER connected to a server's endpoint (made anew when the endpoint changed)."""
        endpoint = self.cl.registry.endpoint(server)
        if not endpoint:  # unknown, or remembered from the meta store of a restored backup (no endpoint)
            raise TableError("ServerBusy", f"partition server {server} is not registered")
        ent = self._socks.get(server)
        if ent is None or ent[0] != endpoint:
            if ent is not None:
                ent[1].close(0)
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            keys = self.cl.keys
            curve.secure_client(s, keys.pair("coordinator"), keys.public("partition-server"))
            s.connect(endpoint)
            ent = self._socks[server] = (endpoint, s)
        return ent[1]

    def _drop(self, server: str) -> None:
        """Close a server's socket, so a late answer is never taken for another command's."""
        ent = self._socks.pop(server, None)
        if ent is not None:
            ent[1].close(0)

    def call_many(self, calls: list[tuple[str, ControlCommand]], timeout: float | None = None) -> list[Any]:
        """Send commands to partition servers all at once and wait for every answer.

        Returns one item per call, in order: the result, or the TableError it failed with (a server
        that died, restarted or stayed silent past the timeout fails its remaining calls).
        """
        out: list[Any] = [None] * len(calls)
        pending: dict[bytes, tuple[int, str]] = {}
        socks: dict[str, zmq.Socket] = {}
        incarnations: dict[str, str | None] = {}
        for i, (server, body) in enumerate(calls):
            try:
                sock = socks.get(server) or self._socket(server)
            except TableError as exc:
                out[i] = exc
                continue
            socks[server] = sock
            incarnations.setdefault(server, self.cl.registry.incarnation(server))
            rid = b"c%d" % next(self._ids)
            self.leader.fence()
            sock.send_multipart([rid, protocol.pack({**body, "term": self.leader.term})])
            pending[rid] = (i, server)
        poller = zmq.Poller()
        for sock in socks.values():
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + (timeout or self.cl.cfg.command_timeout_s)
        while pending:
            left = deadline - time.monotonic()
            gone = {s for s in socks if self.cl.registry.incarnation(s) != incarnations[s]
                    or not self.cl.registry.is_alive(s)}
            if left <= 0 or gone:
                failed = {s for _, s in pending.values()} if left <= 0 else gone
                for rid, (i, server) in list(pending.items()):
                    if server in failed:
                        del pending[rid]
                        why = "died or restarted" if server in gone else "timed out"
                        out[i] = TableError("OperationTimedOut", f"{calls[i][1]['op']} on {server} {why}")
                for server in failed:
                    poller.unregister(socks.pop(server))
                    self._drop(server)
                continue
            for sock, _ in poller.poll(min(100, int(left * 1000) + 1)):
                while sock.poll(0):
                    frames = sock.recv_multipart()
                    ent = pending.pop(frames[0], None)
                    if ent is None or len(frames) != 2:
                        continue
                    try:
                        out[ent[0]] = protocol.result(frames[1])
                    except TableError as exc:
                        out[ent[0]] = exc
        return out

    def call(self, server: str, body: ControlCommand, timeout: float | None = None) -> Any:
        """Send one command to a partition server and wait for its answer (raises TableError)."""
        sock = self._socket(server)
        rid = b"c%d" % next(self._ids)
        incarnation = self.cl.registry.incarnation(server)
        self.leader.fence()  # a deposed leader sends nothing; the term lets servers refuse it anyway
        sock.send_multipart([rid, protocol.pack({**body, "term": self.leader.term})])
        deadline = time.monotonic() + (timeout or self.cl.cfg.command_timeout_s)
        while True:
            left = deadline - time.monotonic()
            gone = self.cl.registry.incarnation(server) != incarnation or not self.cl.registry.is_alive(server)
            if left <= 0 or gone:
                self._drop(server)
                why = "died or restarted" if gone else "timed out"
                raise TableError("OperationTimedOut", f"{body['op']} on {server} {why}")
            if not sock.poll(min(100, int(left * 1000) + 1)):
                continue
            frames = sock.recv_multipart()
            if frames[0] == rid:
                return protocol.result(frames[1])
