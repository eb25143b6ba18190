"""Asks a cut-off partition server, from inside its own namespace, whether it still serves.

``python -m cli.drills.fence_probe KEYS_DIR ENDPOINT RANGE EPOCH PK OUT`` runs in the cut server's
namespace (its own address still answers there) with the frontend key of KEYS_DIR. Every 100 ms it
sends a ``ping`` (the server answers whether its lease holds, and closes its ranges when it lapsed)
and a data request (a ``get`` of PK in RANGE at EPOCH, which passes the same lease check as a
write). On SIGTERM it writes to OUT one ``[monotonic time, lease, data outcome]`` per round, where
lease is true/false/null (no answer) and the outcome is ``ok``, an error code, or ``silence``.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

import zmq

from rangetable.files import write_json_atomic

if TYPE_CHECKING:
    from rangetable.curve import KeyPair


def ask(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, pair: KeyPair, server: bytes, body: dict,
        timeout: float = 0.3) -> object:
    """One request to the server; returns the result, a TableError code, or ``silence``."""
    from rangetable import curve, protocol
    from rangetable.errors import TableError

    sock: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        curve.secure_client(sock, pair, server)
        sock.connect(endpoint)
        sock.send_multipart([b"probe", protocol.pack(body)])
        if not sock.poll(int(timeout * 1000)):
            return "silence"
        try:
            return protocol.result(sock.recv_multipart()[-1])
        except TableError as exc:
            return exc.error_code
    finally:
        sock.close(0)


def main(argv: list[str]) -> int:
    """Probe until SIGTERM, then write the rounds."""
    from rangetable import curve

    keys_dir, endpoint, rid, epoch, pk, out = argv
    ring = curve.KeyRing.load(keys_dir)
    pair, server = ring.pair("frontend"), ring.public("partition-server")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    rounds = []
    while not stop.is_set():
        t = time.monotonic()
        ping = ask(ctx, endpoint, pair, server, {"op": "ping"})
        lease = ping.get("lease") if isinstance(ping, dict) else None
        got = ask(ctx, endpoint, pair, server, {"op": "get", "range": rid, "epoch": int(epoch), "pk": pk, "rk": "fence"})
        rounds.append([t, lease, got if isinstance(got, str) else "ok"])
        stop.wait(max(0.0, 0.1 - (time.monotonic() - t)))
    write_json_atomic(out, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
