"""Lease watchdog: tells an outside supervisor that a partition server still holds its lease.

deploy/README.md's fencing rule: a partition server that stops renewing its lease (frozen, cut off
from the coordinator) must be killed, because a frozen process still holds the RocksDB ``LOCK`` files
of its ranges. The server calls :meth:`LeaseWatchdog.renewed` each time the coordinator renews its
lease; this module turns that into what the supervisor watches:

* **systemd** (``WatchdogSec=`` in ``deploy/systemd/rangetable-partition-server@.service``): a
  ``WATCHDOG=1`` datagram to ``$NOTIFY_SOCKET`` (the sd_notify protocol), at most every quarter of
  ``$WATCHDOG_USEC``; systemd kills the process when they stop;
* **Kubernetes** (a liveness probe in ``deploy/k8s/partition-servers.yaml``): the mtime of
  ``--alive-file``, which ``python -m rangetable.kernel.watchdog check FILE --max-age S`` compares with now.

No lease, no ping: a server that lost its lease is restarted, releasing its locks.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping


def notify_address(env: Mapping[str, str]) -> str | bytes | None:
    """The sd_notify socket address from ``$NOTIFY_SOCKET`` (abstract names start with ``@``)."""
    path = env.get("NOTIFY_SOCKET", "")
    if not path:
        return None
    if path.startswith("@"):
        return b"\0" + path[1:].encode()
    return path if path.startswith("/") else None


def ping_interval(env: Mapping[str, str]) -> float | None:
    """Seconds between pings: a quarter of ``$WATCHDOG_USEC`` (None when systemd set no watchdog)."""
    try:
        usec = int(env.get("WATCHDOG_USEC", "0"))
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None  # the watchdog is meant for another process of the unit
    return usec / 4e6


def is_fresh(mtime: float, now: float, max_age_s: float) -> bool:
    """Whether a lease renewed at ``mtime`` is recent enough at ``now``."""
    return now - mtime <= max_age_s


class LeaseWatchdog:
    """Pings systemd's watchdog and/or touches an alive file on every lease renewal."""

    def __init__(self, alive_file: str = "", env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.alive_file = alive_file
        self.address = notify_address(env)
        self.interval = ping_interval(env) if self.address else None
        self._sock: socket.socket | None = None
        self._last = float("-inf")

    @property
    def active(self) -> bool:
        """Whether anything watches this process."""
        return bool(self.alive_file) or self.interval is not None

    def renewed(self, now: float | None = None) -> None:
        """The lease was just renewed: ping (rate-limited to a quarter of the watchdog period)."""
        if not self.active:
            return
        now = time.monotonic() if now is None else now
        if now - self._last < (self.interval or 0.0):  # heartbeats come every 0.5 s: the file follows them
            return
        self._last = now
        if self.interval is not None:
            self._notify(b"WATCHDOG=1")
        if self.alive_file:
            with open(self.alive_file, "a"):
                pass
            os.utime(self.alive_file)

    def _notify(self, message: bytes) -> None:
        if self.address is None:  # no systemd watching (interval is None then, so never called)
            return
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message, self.address)
        except OSError:
            pass  # systemd gone or restarting: the next ping retries

    def close(self) -> None:
        """Close the notify socket."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def main(argv: list[str]) -> int:
    """``python -m rangetable.kernel.watchdog check FILE --max-age S``: exit 0 when the lease is fresh (a liveness probe)."""
    if len(argv) != 4 or argv[0] != "check" or argv[2] != "--max-age":
        print("usage: python -m rangetable.kernel.watchdog check FILE --max-age SECONDS", file=sys.stderr)
        return 2
    try:
        mtime = os.stat(argv[1]).st_mtime
    except OSError as exc:
        print(f"no lease: {exc}", file=sys.stderr)
        return 1
    if not is_fresh(mtime, time.time(), float(argv[3])):
        print(f"lease not renewed for {time.time() - mtime:.1f} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
