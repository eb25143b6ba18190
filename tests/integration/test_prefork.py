"""Prefork (cli/cluster/prefork.py): a process forked from the preloaded interpreter is what ``python -m cli.main …`` would
be — the caller's own child, its command line, a session of its own, its log, the same open files — and the
supervisor waits for it and signals it as it would a :class:`subprocess.Popen`."""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.cluster.prefork import RANGETABLE, ForkedProcess, Prefork


@pytest.fixture
def prefork() -> Iterator[Prefork]:
    p = Prefork()
    started: list[subprocess.Popen | ForkedProcess] = []
    real_start = p.start

    def start(argv: list[str], log_path: str) -> subprocess.Popen | ForkedProcess:
        proc = real_start(argv, log_path)
        started.append(proc)
        return proc

    p.start = start  # type: ignore[method-assign]
    try:
        yield p
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        p.close()


def _frontend(keys: Path) -> list[str]:
    """A process that runs until signalled: a native frontend waiting for a coordinator that is not there."""
    subprocess.run([*RANGETABLE, "keys", "init", "--keys-dir", str(keys)], check=True, capture_output=True)
    return [*RANGETABLE, "frontend", "--coordinator", "tcp://127.0.0.1:9", "--native", "tcp://127.0.0.1:0",
            "--keys-dir", str(keys)]


def _is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    return bool(flag.value)


def _links(pid: int) -> set[str]:
    """What each open descriptor of ``pid`` is, with its inode (``pipe:[123]``, ``socket:[45]``, a path)."""
    return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}


def _open_files(pid: int) -> list[str]:
    """The files ``pid`` has open, by name. Sockets and event descriptors are left out: how many there are at a
    moment follows ZeroMQ's reconnect attempts to the absent coordinator, not the fork."""
    links = (os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
    return sorted(link for link in links if "[" not in link)


def _wait_for_log(path: Path, text: str) -> None:
    deadline = time.monotonic() + 30
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} not in {path}"
        time.sleep(0.05)


def test_a_forked_process_is_the_command_it_was_asked_for(prefork: Prefork, tmp_path: Path) -> None:
    argv = _frontend(tmp_path / "keys")
    forked = prefork.start(argv, str(tmp_path / "forked.log"))
    executed = subprocess.Popen(argv, stdout=open(tmp_path / "exec.log", "ab"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert isinstance(forked, ForkedProcess)
        for log in ("forked.log", "exec.log"):
            _wait_for_log(tmp_path / log, "serving native clients")
        assert Path(f"/proc/{forked.pid}/cmdline").read_text().strip("\0") == shlex.join(argv)  # what ps shows
        assert os.getsid(forked.pid) == forked.pid  # a session of its own, as start_new_session gives
        with open(f"/proc/{forked.pid}/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid()  # adopted: the caller's own child
        same = [name.replace("exec.log", "forked.log") for name in _open_files(executed.pid)]
        assert _open_files(forked.pid) == same
        assert prefork._server is not None
        inherited = _links(forked.pid) & {link for link in _links(prefork._server.pid) if "[" in link}
        assert not inherited  # nothing of the fork server's (its pipes, sockets, event descriptors) is left open
    finally:
        executed.terminate()
        executed.wait(10)
    forked.terminate()  # SIGTERM: the server stops cleanly
    assert forked.wait(10) == 0
    forked.send_signal(signal.SIGKILL)  # waited for: no signal to a pid that may be another process's now


def test_exit_codes_and_signals_read_as_a_popen_s(prefork: Prefork, tmp_path: Path) -> None:
    log = tmp_path / "cmd.log"
    assert prefork.start([*RANGETABLE, "no-such-command"], str(log)).wait(10) == 2
    assert "No such command 'no-such-command'" in log.read_text()
    proc = prefork.start(_frontend(tmp_path / "keys"), str(log))
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    proc.kill()
    assert proc.wait(10) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL


def test_other_commands_are_executed(prefork: Prefork, tmp_path: Path) -> None:
    proc = prefork.start(["sh", "-c", "echo from sh; exit 3"], str(tmp_path / "sh.log"))
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(10) == 3
    assert (tmp_path / "sh.log").read_text() == "from sh\n"


def test_the_fork_server_ends_with_its_supervisor_s_close_and_comes_back_when_killed(prefork: Prefork,
                                                                                     tmp_path: Path) -> None:
    log = str(tmp_path / "help.log")
    assert prefork.start([*RANGETABLE, "--help"], log).wait(10) == 0
    assert _is_subreaper()  # so the processes it forks are this process's children
    server = prefork._server
    assert server is not None
    server.kill()
    server.wait()
    assert prefork.start([*RANGETABLE, "--help"], log).wait(10) == 0  # a new fork server
    assert prefork._server is not None and prefork._server.pid != server.pid
    again = prefork._server
    prefork.close()
    assert again.poll() is not None  # close() waited for it
    assert not _is_subreaper()  # this process adopts no more orphans (a test worker would collect zombies)
    assert (tmp_path / "help.log").read_text().count("Usage: rangetable") == 2
