"""Prefork: the supervisor's Python children are forked from one interpreter that has imported them already.

A partition server, coordinator or frontend started as ``python -m cli.main <role>`` spends about 0.3 s of CPU
importing its modules before it does anything (pyzmq, asyncio, click and ours); a local cluster starts seven
of them, and restarts them when they die. The supervisor instead starts one *fork server* (the zygote of
Android, the ``forkserver`` of :mod:`multiprocessing`): ``python -m cli.cluster.prefork`` imports every role's modules
once (:data:`PRELOAD`), then waits on its stdin for commands. For each it forks twice: the first child forks the
process that runs the command and exits, so that process becomes the supervisor's own child (the supervisor is
a *child subreaper*, ``PR_SET_CHILD_SUBREAPER``) and the supervisor waits for it, signals it and reads its exit
status as it would a :class:`subprocess.Popen`'s (:class:`ForkedProcess`).

The forked process is what ``python -m cli.main <args>`` would be after its imports: a session of its own,
its output appended to its log, stdin from ``/dev/null``, default signal handlers, ``sys.argv`` and
``sys.orig_argv`` of that command line (a deposed coordinator re-executes it; ``ps`` shows it), and it exits through the
interpreter's normal exit. The fork server holds no socket, thread or file besides its two pipes, so nothing
else is inherited. Commands that are not ``rangetable`` in this interpreter (etcd, a command entered in a network
namespace) are still executed (:meth:`Prefork.start`).

Protocol (one JSON line each way): ``{"args": [...], "log": path}`` → ``{"pid": n}`` or ``{"error": text}``.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

PRELOAD = ("cli.main", "cli.cluster.processes", "coordinator.server", "partition_server.server", "frontend.native.server",
           "frontend.http.serve", "cli.dashboard.command")
"""The modules of every role the supervisor starts (what ``cli.cluster.processes``' commands import when they run)."""

RANGETABLE = [sys.executable, "-m", "cli.main"]
"""The command line prefix of a ``rangetable`` command in this interpreter: such commands are forked."""

PR_SET_CHILD_SUBREAPER = 36


class ForkedProcess:
    """A forked child of the supervisor, with the part of :class:`subprocess.Popen`'s interface it uses."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # waited for elsewhere: gone, its status unknown (as Popen.poll takes it)
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to exit; :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return code

    def send_signal(self, sig: int) -> None:
        """Signal it, unless it has been waited for (its pid may be another process's by then)."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


class Prefork:
    """The supervisor's side: starts the fork server on first use and asks it for processes."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | None = None

    def start(self, argv: list[str], log_path: str) -> subprocess.Popen | ForkedProcess:
        """Start ``argv`` with its output appended to ``log_path``: forked when it is a ``rangetable`` command
        (:data:`RANGETABLE`) and this kernel lets the supervisor adopt it, else executed."""
        if argv[:len(RANGETABLE)] == RANGETABLE and _set_subreaper(True):
            args = argv[len(RANGETABLE):]
            for attempt in (1, 2):  # a fork server that died (killed with the supervisor's group) is started anew
                try:
                    return ForkedProcess(self._ask(args, log_path), argv)
                except (BrokenPipeError, EOFError):
                    self._stop_server()
                    if attempt == 2:
                        raise
        with open(log_path, "ab") as log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

    def _ask(self, args: list[str], log_path: str) -> int:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen([*RANGETABLE[:2], "cli.cluster.prefork"], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE)
        assert self._server.stdin is not None and self._server.stdout is not None
        self._server.stdin.write(json.dumps({"args": args, "log": log_path}).encode() + b"\n")
        self._server.stdin.flush()
        line = self._server.stdout.readline()
        if not line:
            raise EOFError("the fork server exited")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the fork server could not start {args[:1]}: {reply['error']}")
        return int(reply["pid"])

    def close(self) -> None:
        """Stop the fork server (its stdin closes; it exits), and stop adopting orphans."""
        self._stop_server()
        _set_subreaper(False)

    def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        assert server.stdin is not None and server.stdout is not None
        try:
            server.stdin.close()
        except BrokenPipeError:
            pass
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()


def _set_subreaper(on: bool) -> bool:
    """Make this process adopt its orphaned descendants, or stop (Linux 3.4+); False where the kernel cannot.

    Only while a supervisor runs its cluster: a process that stays a subreaper also adopts the orphans of
    everything else it starts (a test worker would collect every detached supervisor's zombie).
    """
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


# --- the fork server's side ------------------------------------------------------------------------------------

def _fork(request: dict[str, Any]) -> list[str] | None:
    """Fork the process of one request: returns its arguments in that process, None in the fork server (which
    has answered the supervisor by then)."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process: fork the command's process, say its pid, exit (it is adopted)
        os.close(r)
        try:
            pid = os.fork()
        except OSError as exc:
            os.write(w, json.dumps({"error": str(exc)}).encode())
            os._exit(1)
        if pid == 0:
            os.close(w)
            _become(request["log"])
            return list(request["args"])
        os.write(w, json.dumps({"pid": pid}).encode())
        os._exit(0)
    os.close(w)
    reply = b""
    while chunk := os.read(r, 4096):
        reply += chunk
    os.close(r)
    os.waitpid(middle, 0)
    os.write(1, (reply or b'{"error": "the middle process died"}') + b"\n")
    return None


def _become(log_path: str) -> None:
    """Turn this fork into a process of its own: a new session, stdio on /dev/null and the log, signals as a
    fresh interpreter has them (the fork server's pipes were fds 0 and 1: replacing them closes them)."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except OSError as exc:
        os.write(2, f"prefork: cannot start the process: {exc}\n".encode())
        os._exit(1)


def serve() -> list[str] | None:
    """The fork server's loop: None when the supervisor closes its stdin, a command's arguments in each forked
    process."""
    buffered = b""
    while True:
        while b"\n" not in buffered:
            chunk = os.read(0, 65536)
            if not chunk:
                return None
            buffered += chunk
        line, buffered = buffered.split(b"\n", 1)
        args = _fork(json.loads(line))
        if args is not None:
            return args


def main() -> None:
    """``python -m cli.cluster.prefork``: import every role, then fork a process for each command asked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on `rangetable up` is the supervisor's to handle
    for module in PRELOAD:
        importlib.import_module(module)
    import gc

    gc.collect()
    gc.freeze()  # the imported heap is shared by every forked process: collections leave its pages alone
    from setproctitle import setproctitle

    args = serve()
    if args is None:
        return
    sys.argv = [sys.modules["cli.main"].__file__ or "cli/main.py", *args]
    sys.orig_argv = [*RANGETABLE, *args]
    setproctitle(shlex.join(sys.orig_argv))  # what ps and pgrep -f show
    sys.modules["cli.main"].main(args=args, prog_name="rangetable")


if __name__ == "__main__":
    main()
