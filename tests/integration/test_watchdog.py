"""The lease watchdog (rangetable/kernel/watchdog.py): sd_notify pings and the alive file of deploy/'s fencing rule."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rangetable.kernel.watchdog import LeaseWatchdog
from tests.cluster import ROOT, ClusterFactory


def test_alive_file_and_probe(tmp_path: Path) -> None:
    alive = str(tmp_path / "lease-ok")
    probe = [sys.executable, "-m", "rangetable.kernel.watchdog", "check", alive, "--max-age", "3"]
    assert subprocess.run(probe, cwd=ROOT, capture_output=True).returncode == 1  # no lease yet
    wd = LeaseWatchdog(alive_file=alive, env={})
    assert wd.active and wd.interval is None
    wd.renewed()
    assert subprocess.run(probe, cwd=ROOT, capture_output=True).returncode == 0
    os.utime(alive, (time.time() - 10, time.time() - 10))  # lease not renewed for 10 s
    out = subprocess.run(probe, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and "not renewed" in out.stderr
    assert subprocess.run([sys.executable, "-m", "rangetable.kernel.watchdog"], cwd=ROOT).returncode == 2
    assert not LeaseWatchdog(env={}).active


def test_partition_server_pings_only_while_it_renews_its_lease(tmp_path: Path, cluster_factory: ClusterFactory) -> None:
    alive = str(tmp_path / "lease-ok")
    probe = [sys.executable, "-m", "rangetable.kernel.watchdog", "check", alive, "--max-age", "5"]
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # stands in for systemd's notify socket
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(5)
    env = {"RANGETABLE_ALIVE_FILE": alive, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "2000000"}
    with notify, cluster_factory(env=env, extra=["--no-restart"], data_dir=tmp_path / "rt") as cluster:
        assert notify.recv(64) == b"WATCHDOG=1"  # what systemd's WatchdogSec waits for
        deadline = time.monotonic() + 10
        while not os.path.exists(alive) and time.monotonic() < deadline:
            time.sleep(0.1)
        first = os.stat(alive).st_mtime
        time.sleep(1.2)
        assert os.stat(alive).st_mtime > first  # renewed with every heartbeat answer
        assert subprocess.run(probe, cwd=ROOT).returncode == 0
        # every partition server of the cluster shares the alive file and the notify socket: freeze them all
        pids = [p["pid"] for p in cluster.refresh()["processes"] if p["role"] == "partition-server"]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # frozen, holding its locks
        try:
            time.sleep(0.3)  # before the lease lapses and the local supervisor kills the frozen server
            notify.setblocking(False)
            while True:  # drain what was sent before the freeze …
                try:
                    notify.recv(64)
                except BlockingIOError:
                    break
            time.sleep(1.0)
            with pytest.raises(BlockingIOError):  # … then silence: systemd would kill it now
                notify.recv(64)
            out = subprocess.run(probe[:-1] + ["1"], cwd=ROOT, capture_output=True, text=True)
            assert out.returncode == 1 and "not renewed" in out.stderr  # the probe would have it killed
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # the supervisor may have killed it meanwhile
                    os.kill(pid, signal.SIGCONT)
