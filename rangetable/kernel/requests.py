"""Requests to a coordinator or frontend endpoint of a cluster, as its operator or another cluster makes them:
one-shot, or over the kept sockets of a :class:`Connections` for a caller that asks again and again (the CLI,
the dashboard, a secondary's coordinator fencing its old source: ``docs/geo.md``)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import zmq

from rangetable import curve, protocol
from rangetable.errors import TableError
from rangetable.kernel.coordinators import LeaderTracker, leader_hint

_ids = itertools.count(1)
SILENCE = "no answer from"
_known_leader: dict[str, str] = {}  # coordinator list -> the endpoint that answered last


class Connections:
    """Kept sockets, one per endpoint, for a caller that asks the same cluster again and again (the supervisor's
    fence, the dashboard, a drill's map watcher): one CURVE handshake per endpoint rather than one per request,
    which the server pays for too. The ZeroMQ guide's Lazy Pirate: a request that gets no answer closes its
    socket, and the next request opens a new one, so a late answer is never read as the next one's. One per thread
    (ZeroMQ sockets are not thread-safe); :meth:`close` when done."""

    def __init__(self) -> None:
        self._socks: dict[str, zmq.Socket] = {}

    def take(self, endpoint: str) -> zmq.Socket | None:
        """The kept socket to ``endpoint`` (now the caller's), or None."""
        return self._socks.pop(endpoint, None)

    def keep(self, endpoint: str, sock: zmq.Socket) -> None:
        """Keep ``sock`` for the next request to ``endpoint`` (taken from here, so none is kept for it now)."""
        self._socks[endpoint] = sock

    def close(self) -> None:
        """Close every kept socket."""
        for sock in self._socks.values():
            sock.close(0)
        self._socks.clear()


def call(endpoint: str, body: dict, timeout: float = 10.0, conns: Connections | None = None) -> Any:
    """Send one request and return its result; raises TableError (OperationTimedOut on silence). With ``conns``,
    over its kept socket to the endpoint (opened by the first request).

    ``endpoint`` may list several coordinators (comma-separated): the request goes to the leader,
    following ``NotLeader`` answers and moving past silent endpoints, until ``timeout``. The CURVE
    keys are those remembered for each endpoint (``curve.remember_cluster``, done by ``read_cluster``);
    TableError(AuthenticationFailed) when none are known.
    """
    if "," not in endpoint:
        return _call_one(endpoint, body, timeout, conns)
    leaders = LeaderTracker(endpoint)
    leaders.current = _known_leader.get(endpoint, leaders.current)
    deadline = time.monotonic() + timeout
    last: TableError | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise last or TableError("OperationTimedOut", f"no coordinator of {endpoint} answered")
        try:
            res = _call_one(leaders.current, body, min(left, max(0.1, timeout / len(leaders.endpoints))), conns)
            _known_leader[endpoint] = leaders.current
            return res
        except TableError as exc:
            last = exc
            if exc.error_code == "NotLeader":
                leaders.on_not_leader(exc)
                if leader_hint(exc) is None:
                    time.sleep(0.05)  # an election is under way
            elif exc.error_code == "OperationTimedOut" and exc.message.startswith(SILENCE):
                leaders.on_silence()
            else:
                raise


def _connect(endpoint: str) -> zmq.Socket:
    """A DEALER socket connected to ``endpoint`` with the keys remembered for it."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        return curve.connect(sock, endpoint)
    except ValueError as exc:
        sock.close(0)
        raise TableError("AuthenticationFailed", str(exc)) from None


def _call_one(endpoint: str, body: dict, timeout: float, conns: Connections | None = None) -> Any:
    sock = conns.take(endpoint) if conns is not None else None
    if sock is None:
        sock = _connect(endpoint)
    answered = False
    try:
        rid = b"req%d" % next(_ids)
        sock.send_multipart([rid, protocol.pack(body)])
        if not sock.poll(int(timeout * 1000)):
            raise TableError("OperationTimedOut", f"{SILENCE} {endpoint} within {timeout:.1f} s")
        frames = sock.recv_multipart()
        answered = True
        return protocol.result(frames[-1])
    finally:
        if answered and conns is not None:
            conns.keep(endpoint, sock)
        else:
            sock.close(0)
