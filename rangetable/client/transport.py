"""The native client's transport: one ZeroMQ DEALER socket, one request in flight at a time.

Requests are ``[request_id, msgpack body]`` (see ``docs/protocol.md``); ids come from a counter.
The first request on a transport is preceded by a ``hello`` handshake checking the protocol
version. A lock serialises requests, so a transport (and the clients sharing it) may be used from
several threads. On a timeout the socket is closed with linger 0 and a new one connected, so a
late reply to the abandoned request can never be taken for the answer to a later one.

A request does not wait out its timeout when the connection it went out on drops (a frontend killed
or restarted): the socket's monitor reports the disconnect, and the request fails at once with the
retriable ``OperationTimedOut`` ("connection lost"), so a retry (same request id for writes) goes out
as soon as ZeroMQ has reconnected. Found by the chaos drill (issue 24): a killed frontend was the most
common cause of operations slower than 3 s, each waiting out the client's whole timeout.

The socket authenticates with CURVE, with the keys remembered for the endpoint
(:func:`rangetable.curve.connect`: from ``cluster.json`` or a connection file, which
:func:`cluster_endpoint` reads for ``TableServiceClient.from_cluster``).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from typing import TYPE_CHECKING, Any, NoReturn, cast

import zmq
from zmq.backend import zmq_poll
from zmq.utils.monitor import parse_monitor_message

from rangetable import curve, protocol
from rangetable.client.models import specific_error
from rangetable.data_dir import resolve_data_dir
from rangetable.errors import TableError

if TYPE_CHECKING:
    from rangetable.messages import HelloAnswer, NativeRequest


def cluster_endpoint(data_dir: str | os.PathLike[str] | None = None) -> str:
    """The native endpoint recorded in ``<data_dir>/cluster.json`` (or in a connection file from
    ``rangetable keys add --out``); its CURVE keys are remembered for the connection. ``data_dir``
    None: the default data root (:func:`rangetable.data_dir.default_data_dir`, as the CLI's)."""
    path = resolve_data_dir(data_dir)
    if os.path.isdir(path):
        path = os.path.join(path, "cluster.json")
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: is a cluster running (rangetable up)?") from None
    endpoint = info.get("native") if isinstance(info, dict) else None
    if not isinstance(endpoint, str):
        raise ValueError(f"{path} has no 'native' endpoint")
    try:
        curve.remember_cluster(info)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} has a malformed 'curve' section: {exc}") from None
    return endpoint


HELLO: NativeRequest = {"op": "hello", "version": protocol.VERSION}
# what the monitor reports: handshakes (to say why a request got no answer) and a dropped connection
MONITORED = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
POLLIN = int(zmq.POLLIN)


class Connection:
    """What the blocking :class:`Transport` and the asyncio one (:mod:`rangetable.client.aio.transport`)
    share: the DEALER socket with its CURVE keys and handshake monitor, request ids, the ``hello``
    check, encoding a request, decoding a reply, and the error of a request that got no reply."""

    def __init__(self, endpoint: str, timeout: float, ctx: zmq.Context) -> None:
        if not isinstance(endpoint, str) or "://" not in endpoint:
            raise ValueError(f"endpoint must look like tcp://host:port, not {endpoint!r}")
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.server_info: HelloAnswer | None = None
        self._max_message = protocol.MAX_MESSAGE
        self._ctx = ctx
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._handshake: int | None = None  # the latest handshake event the monitor reported
        self._ids = itertools.count(1)
        self._closed = False

    # --- socket lifecycle -----------------------------------------------------------------------

    def _socket(self) -> zmq.Socket:
        if self._closed:
            raise ValueError("the client is closed")
        if self._sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
            # handshakes (read when a request goes unanswered, to say why) and dropped connections
            self._monitor = protocol.monitor_socket(sock, MONITORED)
            try:
                curve.connect(sock, self.endpoint)
            except ValueError:
                self._close_monitor(sock)
                sock.close(0)
                raise
            self._sock = sock
        return self._sock

    def _close_monitor(self, sock: zmq.Socket) -> None:
        if self._monitor is not None:
            sock.disable_monitor()
            self._monitor.close(0)
            self._monitor = None

    def _events(self) -> bool:
        """Take the monitor's queued events; True when one of them says the connection dropped."""
        lost = False
        mon = self._monitor
        while mon is not None and protocol.readable(mon):
            lost = self._note(protocol.recv_frames(mon, protocol.NOBLOCK)) or lost
        return lost

    def _note(self, frames: list[bytes]) -> bool:
        """Take one monitor event: a handshake's outcome is kept (see :meth:`_refused`); True when the
        event says the connection dropped."""
        event = parse_monitor_message(frames)["event"]
        if event == zmq.EVENT_DISCONNECTED:
            return True
        self._handshake = event
        return False

    def _refused(self) -> bool:
        """True when the latest handshake was refused by the server (this client's CURVE key)."""
        self._events()
        return self._handshake == zmq.EVENT_HANDSHAKE_FAILED_AUTH

    def _reset(self) -> None:
        if self._sock is not None:
            self._close_monitor(self._sock)
            self._sock.close(linger=0)
            self._sock = None
        self._handshake = None

    @property
    def closed(self) -> bool:
        """True once the transport was closed."""
        return self._closed

    # --- messages -------------------------------------------------------------------------------

    def _request_id(self) -> bytes:
        return next(self._ids).to_bytes(8, "big")

    def _encode(self, body: NativeRequest) -> bytes:
        """The request's bytes; RequestBodyTooLarge beyond the server's limit."""
        data = protocol.pack(body)
        if len(data) > self._max_message:
            raise specific_error(
                TableError("RequestBodyTooLarge", f"request of {len(data)} bytes exceeds {self._max_message}")
            )
        return data

    def _accept_hello(self, info: Any) -> None:
        """Check the server's answer to ``hello`` (its protocol version) and keep its limits."""
        if not isinstance(info, dict) or info.get("version") != protocol.VERSION:
            version = info.get("version") if isinstance(info, dict) else None
            raise TableError("InvalidInput", f"the server speaks protocol version {version}, not {protocol.VERSION}")
        self._max_message = int(info.get("max_message") or protocol.MAX_MESSAGE)
        self.server_info = cast("HelloAnswer", info)

    @staticmethod
    def _decode(data: bytes) -> Any:
        """A reply's result, or its error raised (404/409/412 as the azure-core-named subclasses)."""
        try:
            return protocol.result(data)
        except TableError as exc:
            raise specific_error(exc) from None

    def _unanswered(self, body: NativeRequest, limit: float) -> TableError:
        """The error of a request without a reply within ``limit`` s: AuthenticationFailed when the
        server refused this client's key, else OperationTimedOut (retriable)."""
        if self._refused():
            return TableError("AuthenticationFailed", f"{self.endpoint} refused this client's CURVE key "
                                                      "(not registered, or revoked)")
        return TableError(
            "OperationTimedOut", f"no reply to {body.get('op')!r} from {self.endpoint} within {limit:g} s"
        )

    def _lost(self, body: NativeRequest, waited: float) -> TableError:
        """The error of a request whose connection dropped before its reply: AuthenticationFailed when
        the server refused this client's key, else OperationTimedOut (retriable) at once."""
        if self._handshake == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return self._unanswered(body, waited)
        return TableError("OperationTimedOut", f"the connection to {self.endpoint} was lost after {waited:.2f} s "
                                               f"with no reply to {body.get('op')!r} (the frontend closed it or died)")


class Transport(Connection):
    """A DEALER connection to a frontend's native endpoint, one request at a time."""

    def __init__(self, endpoint: str, timeout: float = 30.0) -> None:
        super().__init__(endpoint, timeout, zmq.Context.instance())
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the socket; later requests raise ValueError."""
        with self._lock:
            self._reset()
            self._closed = True

    def request(self, body: NativeRequest, timeout: float | None = None) -> Any:
        """Send one request and return its result.

        Raises the reply's error as a TableError (404/409/412 as the azure-core-named subclasses) or
        ``OperationTimedOut`` when no reply arrives within ``timeout`` (default: the transport's).
        """
        with self._lock:
            if self.server_info is None:
                self._accept_hello(self._roundtrip(HELLO, timeout))
            return self._roundtrip(body, timeout)

    def _roundtrip(self, body: NativeRequest, timeout: float | None) -> Any:
        data = self._encode(body)
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        sock = self._socket()
        request_id = self._request_id()
        if not sock.poll(int(limit * 1000), zmq.POLLOUT):
            self._timed_out(body, limit)
        self._events()  # what happened before this request says nothing about it
        protocol.send_frames(sock, [request_id, data])
        monitor = self._monitor
        assert monitor is not None  # made with the socket
        watch = [(sock, POLLIN), (monitor, POLLIN)]
        while True:
            remaining = deadline - time.monotonic()
            ready = zmq_poll(watch, int(remaining * 1000)) if remaining > 0 else []
            if not ready:
                self._timed_out(body, limit)
            if ready[0][0] is not sock:  # only the monitor spoke: a dropped connection fails the request now
                if self._events():
                    raise self._lost(body, limit - (deadline - time.monotonic()))
                continue
            frames = protocol.recv_frames(sock)
            if len(frames) != 2 or frames[0] != request_id:
                continue  # not ours (cannot happen after a reset, but never misattribute a reply)
            return self._decode(frames[1])

    def _timed_out(self, body: NativeRequest, limit: float) -> NoReturn:
        error = self._unanswered(body, limit)
        self._reset()  # a late reply to this request can never be taken for a later one's
        raise error
