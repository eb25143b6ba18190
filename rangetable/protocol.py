"""The wire protocol: ZeroMQ multipart frames carrying msgpack bodies.

Every request is ``[request_id, body]`` sent from a DEALER to a ROUTER; every reply is
``[request_id, body]`` back (the ROUTER adds and strips the peer identity frame). ``request_id`` is
opaque bytes chosen by the sender (at most 64 bytes), so a client may pipeline any number of
requests on one socket and match replies by id. ``body`` is a msgpack map:

* request: ``{"op": str, ...fields}``
* success: ``{"ok": result}``
* failure: ``{"error": {"code": AzureName, "message": str, "index": int?}}``

The same framing is used on every hop: client → frontend, frontend → partition server,
coordinator → partition server, partition server → coordinator (heartbeats), frontend →
coordinator. The coordinator also publishes partition-map updates on a PUB socket as
``[b"delta", body]`` and ``[b"hugz", body]`` (see ``coordinator/map/deltas.py``: the ZeroMQ guide's
*Clone* pattern). The full description, with every op, is in ``docs/protocol.md``; the bodies'
fields and types are :mod:`rangetable.messages`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack
import zmq
from zmq.backend import Socket as _RawSocket
from zmq.backend import zmq_poll

from rangetable.errors import TableError

if TYPE_CHECKING:
    from rangetable.messages import Reply, WireEntity

VERSION = 1
MAX_MESSAGE = 8 * 1024 * 1024  # a request body larger than this is refused with RequestBodyTooLarge
HARD_MAX_MESSAGE = 64 * 1024 * 1024  # zmq.MAXMSGSIZE: beyond this the socket drops the peer
MAX_REQUEST_ID = 64

# --- fast path ----------------------------------------------------------------------------------
# Every hot loop of every process sends, receives, encodes and answers through the helpers of this
# section; they are the core's only shortcuts around the libraries' convenient APIs. Measured with
# time.process_time on the 2-core CI machine (pyzmq 27.3, msgpack 1.2.4):
#
# * frames go through the Cython socket (``zmq.backend.Socket``) with plain int flags, reading "more
#   frames" off each received Frame: 1.85 µs of CPU to send and receive a two-frame request, against
#   4.15 µs with ``send_multipart``/``recv_multipart`` (IntFlag arithmetic, getsockopt(RCVMORE));
#   ``zmq_poll`` likewise costs less than getsockopt(EVENTS);
# * one shared ``msgpack.Packer``: ``msgpack.packb`` builds a new one (with a 1 MiB buffer) per call,
#   0.42 µs against 0.26 µs for a one-entity reply;
# * the module-level aliases ``_send``, ``_recv`` and ``pack`` (bound methods; the only ones in
#   rangetable/) save the attribute lookup or the Python frame of a wrapper on every call: 25-70 ns
#   per two-frame message sent and received, 13-20 ns per pack, ~0.2 µs of the ~4.8 µs a request and
#   its reply cost here;
# * :class:`Packed` results are spliced behind :data:`OK_HEADER` instead of being decoded and packed
#   again: 0.05 µs against 0.68 µs for one stored entity, 0.13 µs against 43 µs for a page of 100.

_send = _RawSocket.send
_recv = _RawSocket.recv
_SNDMORE = int(zmq.SNDMORE)
_POLLIN = int(zmq.POLLIN)
NOBLOCK = int(zmq.NOBLOCK)


def send_frames(sock: zmq.Socket, frames: list[bytes], flags: int = 0) -> None:
    """Send a multipart message (a fast ``send_multipart``); with NOBLOCK, zmq.Again means nothing
    was sent (ZeroMQ takes a message's frames all or none)."""
    for f in frames[:-1]:
        _send(sock, f, _SNDMORE | flags)
    _send(sock, frames[-1], flags)


def recv_frames(sock: zmq.Socket, flags: int = 0) -> list[bytes]:
    """Receive a multipart message (a fast ``recv_multipart``); raises zmq.Again with NOBLOCK."""
    f = _recv(sock, flags, False)
    frames = [f.bytes]
    while f.more:
        f = _recv(sock, 0, False)
        frames.append(f.bytes)
    return frames


def recv_frames_peer(sock: zmq.Socket, flags: int = 0) -> tuple[list[bytes], zmq.Frame]:
    """:func:`recv_frames` on a ROUTER, also returning the first (routing id) frame, whose
    ``get("User-Id")`` names the sender's CURVE key (read it only when it matters: ~0.7 µs)."""
    first = f = _recv(sock, flags, False)
    frames = [f.bytes]
    while f.more:
        f = _recv(sock, 0, False)
        frames.append(f.bytes)
    return frames, first


def peer_key(frame: zmq.Frame | None) -> str | None:
    """The ``User-Id`` (the sender's CURVE public key, Z85) of a received frame, or None."""
    if frame is None:
        return None
    try:
        user_id = frame.get("User-Id")
    except zmq.ZMQError:  # no CURVE on this connection
        return None
    return user_id if isinstance(user_id, str) else None  # a str property (the stubs say int | str)


_monitors = itertools.count(1)


def monitor_socket(sock: zmq.Socket, events: int) -> zmq.Socket:
    """A PAIR socket that receives ``sock``'s ``events``, on an inproc endpoint no other monitor in this process
    uses. (pyzmq's default endpoint is named after the socket's descriptor: a new socket given the number of
    one just closed, whose monitor the context has not unbound yet, failed with "Address already in use".)"""
    return sock.get_monitor_socket(events, addr=f"inproc://rangetable-monitor-{os.getpid()}-{next(_monitors)}")


def readable(sock: zmq.Socket) -> bool:
    """True when a message is waiting on ``sock``. Like ``getsockopt(EVENTS) & POLLIN`` it processes
    the socket's pending commands, so it re-arms the edge-triggered ``ZMQ_FD``."""
    return bool(zmq_poll([(sock, _POLLIN)], 0))


# Packer.pack runs without releasing the GIL and calls no Python code for our types, so threads may
# share one Packer.
pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True).pack
"""Encode a body (``msgpack``, bin type for bytes)."""


class Packed:
    """A result that is already msgpack-encoded, as parts to concatenate: :func:`ok` splices it into
    the reply as is.

    Servers use it to answer with stored bytes without decoding and re-encoding them; the reply is
    byte for byte what packing the decoded result would give.
    """

    __slots__ = ("parts",)

    def __init__(self, *parts: bytes) -> None:
        self.parts = parts

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


OK_HEADER = pack({"ok": None})[:-1]  # a one-entry map with the key "ok", without the value (nil, 1 byte)


def ok(result: Any = None) -> bytes:
    """A success reply body (a :class:`Packed` result is spliced in, not packed)."""
    if type(result) is Packed:
        return b"".join((OK_HEADER, *result.parts))
    return pack({"ok": result})


# --- bodies --------------------------------------------------------------------------------------


def unpack(data: bytes, use_list: bool = True) -> Any:
    """Decode a body; raises TableError(InvalidInput) on malformed msgpack.

    ``use_list=False`` decodes arrays as tuples: ~40% cheaper for a page of entities, for readers
    that only index and iterate them.
    """
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=use_list)
    except Exception as exc:  # msgpack raises several unrelated exception types
        raise TableError("InvalidInput", f"malformed message body: {exc}") from None


def error(exc: TableError) -> bytes:
    """A failure reply body."""
    return pack({"error": exc.to_wire()})


def result(body: bytes | Reply) -> Any:
    """Return a reply's result, or raise the TableError it carries."""
    reply: Any = unpack(body) if isinstance(body, bytes | bytearray | memoryview) else body  # untrusted
    if not isinstance(reply, dict):
        raise TableError("InternalError", "malformed reply")
    if "error" in reply:
        raise TableError.from_wire(reply["error"])
    return reply.get("ok")


_MISSING = object()


def field(req: dict, name: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
    """``req[name]`` checked to be a ``kind`` (``default`` when absent, if given); raises
    TableError(InvalidInput) naming the field otherwise. ``bool`` never passes for ``int``."""
    value = req.get(name, _MISSING)
    if value is _MISSING or (value is None and default is not _MISSING):
        if default is _MISSING:
            raise TableError("InvalidInput", f"field {name!r} is missing")
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise TableError("InvalidInput", f"field {name!r} has the wrong type ({type(value).__name__})")
    return value


def parse_request(frames: list[bytes]) -> tuple[bytes, dict]:
    """Split ``[request_id, body]`` into the id and the decoded request map.

    Raises TableError(InvalidInput / RequestBodyTooLarge) for anything else; the id is returned
    when it could be read so the caller can still address its error reply.
    """
    if len(frames) != 2:
        raise TableError("InvalidInput", f"expected 2 frames [request_id, body], got {len(frames)}")
    rid, body = frames
    if len(rid) > MAX_REQUEST_ID:
        raise TableError("InvalidInput", "request id longer than 64 bytes")
    if len(body) > MAX_MESSAGE:
        raise TableError("RequestBodyTooLarge", f"message of {len(body)} bytes exceeds {MAX_MESSAGE}")
    req = unpack(body)
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        raise TableError("InvalidInput", "request body must be a map with a string 'op'")
    return rid, req


def entity_to_wire(e: Any) -> WireEntity:
    """An :class:`rangetable.edm.Entity` as ``[pk, rk, ts, props]``."""
    return [e.pk, e.rk, e.ts, e.props]
