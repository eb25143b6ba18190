"""Free TCP ports for a local cluster, reserved until its processes bind them."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterator

FIRST_DRAWN = 10200
"""Random ports are drawn from here up to the ephemeral range: below it are the ports clusters are told to
use by default (`rangetable up`: REST 10002, native 10012 and up, dashboard 10081; Azurite 10000-10002).
Drawing those too let one cluster's internal socket take another cluster's native port 10012 while that
cluster's frontend restarted: the frontend then crash-looped on 'Address already in use' (a 29 s stall
in a chaos drill that shared the machine with test clusters)."""


RECENT_FILE = os.path.join(tempfile.gettempdir(), "rangetable-ports.json")
"""Ports handed out on this machine in the last :data:`RECENT_S` seconds, by any process: a port is bound only
while a cluster is planned, then released for its process to bind, and in between another cluster planned at the
same moment (tests run several at once) could draw it too — the second process to bind it then ran without its
metrics endpoint ('Address already in use'), which a soak test read as a server missing."""
RECENT_S = 120.0


@contextlib.contextmanager
def _recent() -> Iterator[dict[str, float]]:
    """The machine's recently handed-out ports (port -> when), locked, written back on exit (the old ones dropped)."""
    with open(RECENT_FILE + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(RECENT_FILE) as f:
                held = json.load(f)
        except (OSError, ValueError):
            held = {}
        now = time.time()
        recent = {k: v for k, v in held.items() if isinstance(v, int | float) and now - v < RECENT_S} \
            if isinstance(held, dict) else {}
        yield recent
        tmp = f"{RECENT_FILE}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(recent, f)
        os.replace(tmp, RECENT_FILE)


class PortReservation:
    """Free ports on 127.0.0.1 that are distinct from one another.

    Each port stays bound until `release()`, so the kernel cannot hand the same port out twice while
    a cluster is being planned (binding port 0 and closing it at once, call after call, can return
    one port twice, and two processes of one cluster then collide on bind). Ports are drawn below
    the kernel's ephemeral range, so an outgoing connection's source port cannot take a listener's
    port between planning and bind either, and above the well-known defaults (:data:`FIRST_DRAWN`).
    """

    def __init__(self) -> None:
        self._held: list[socket.socket] = []

    def take(self) -> int:
        """One more free port, distinct from every port taken before it and from those any process of this machine
        was handed in the last :data:`RECENT_S` seconds."""
        low = ephemeral_range()[0]
        candidates = [random.randrange(FIRST_DRAWN, low) for _ in range(64)] if low > FIRST_DRAWN + 100 else []
        with _recent() as recent:
            for port in [*candidates, 0]:
                if port and str(port) in recent:
                    continue
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    s.close()
                    continue
                self._held.append(s)
                got = s.getsockname()[1]
                recent[str(got)] = time.time()
                return got
        raise OSError("no free TCP port on 127.0.0.1")

    def release(self) -> None:
        """Unbind every reserved port so the cluster's processes can bind them."""
        for s in self._held:
            s.close()
        self._held.clear()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux default 32768–60999)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = f.read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999
