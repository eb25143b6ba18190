"""One-shot requests from the CLI to a coordinator or frontend endpoint."""

from __future__ import annotations

import itertools
from typing import Any

import zmq

from rangetable import curve, protocol
from rangetable.errors import TableError

_ids = itertools.count(1)


def call(endpoint: str, body: dict, timeout: float = 10.0) -> Any:
    """Send one request and return its result; raises TableError (OperationTimedOut on silence).

    The CURVE keys are those remembered for ``endpoint`` (``curve.remember_cluster``, done by
    ``read_cluster``); TableError(AuthenticationFailed) when none are known."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        try:
            curve.connect(sock, endpoint)
        except ValueError as exc:
            raise TableError("AuthenticationFailed", str(exc)) from None
        rid = b"cli%d" % next(_ids)
        sock.send_multipart([rid, protocol.pack(body)])
        if not sock.poll(int(timeout * 1000)):
            raise TableError("OperationTimedOut", f"no answer from {endpoint} within {timeout:.1f} s")
        frames = sock.recv_multipart()
        return protocol.result(frames[-1])
    finally:
        sock.close(0)


def range_loads(status: dict) -> dict[str, dict]:
    """Each range's last load report (range id → report), from a coordinator ``status`` answer."""
    return {rid: ld for s in status.get("servers", []) for rid, ld in (s.get("load") or {}).items()}
