"""The lease watchdog (rangetable/kernel/watchdog.py): sd_notify pings and the alive file of deploy/'s fencing rule.

The tests that start no process; those that do are in tests/integration/test_watchdog.py.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

from rangetable.kernel.watchdog import LeaseWatchdog, is_fresh, notify_address, ping_interval


def test_notify_address_and_interval() -> None:
    assert notify_address({}) is None
    assert notify_address({"NOTIFY_SOCKET": "/run/systemd/notify"}) == "/run/systemd/notify"
    assert notify_address({"NOTIFY_SOCKET": "@abstract"}) == b"\0abstract"
    assert notify_address({"NOTIFY_SOCKET": "relative"}) is None
    assert ping_interval({"WATCHDOG_USEC": "2000000"}) == 0.5
    assert ping_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}) == 0.5
    assert ping_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}) is None
    assert ping_interval({"WATCHDOG_USEC": "x"}) is None and ping_interval({}) is None
    assert is_fresh(100.0, 102.0, 3.0) and not is_fresh(100.0, 104.0, 3.0)


def test_pings_systemd_over_a_real_datagram_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    try:
        wd = LeaseWatchdog(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
        assert wd.active and wd.interval == 0.5
        wd.renewed(now=10.0)
        assert sock.recv(64) == b"WATCHDOG=1"
        wd.renewed(now=10.2)  # rate-limited to a quarter of the watchdog period
        wd.renewed(now=10.6)
        assert sock.recv(64) == b"WATCHDOG=1"
        sock.setblocking(False)
        try:
            extra = sock.recv(64)
        except BlockingIOError:
            extra = b""
        assert extra == b""
        wd.close()
    finally:
        sock.close()
