"""What ``/proc`` says of a process: its CPU seconds, by thread kind too, how often its threads went to sleep,
and its resident memory (the benchmarks' meters)."""

from __future__ import annotations

import os
from collections.abc import Callable

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_cpu(path: str) -> tuple[str, float]:
    """(command name, user+system CPU seconds) from a ``/proc/<pid>/stat`` or
    ``/proc/<pid>/task/<tid>/stat`` file; ``("", 0.0)`` when it is gone or unreadable."""
    try:
        with open(path) as f:
            stat = f.read()
        name, rest = stat[stat.index("(") + 1:].rsplit(")", 1)
        fields = rest.split()
        return name, (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return "", 0.0


def cpu_seconds(pids: list[int]) -> float:
    """Sum of user+system CPU seconds of processes (and their threads); missing pids count 0."""
    return sum(stat_cpu(f"/proc/{pid}/stat")[1] for pid in pids)


def thread_kind(pid: int, tid: int, name: str) -> str:
    """What a thread of a rangetable process is, by its name: ``loop`` (the main thread, where requests and
    replication are handled), ``zmq_io`` (ZeroMQ's I/O thread: sockets, CURVE), ``rocksdb`` (flushes and
    compactions) or ``other`` (metrics, the reclaimer, ZeroMQ's reaper, ...)."""
    if tid == pid:
        return "loop"
    if name.startswith("ZMQbg/IO"):
        return "zmq_io"
    if name.startswith("rocksdb"):
        return "rocksdb"
    return "other"


def by_thread_kind(pid: int, read: Callable[[str], tuple[str, float]]) -> dict[str, float]:
    """``read`` of each thread of a process (its ``/proc/<pid>/task/<tid>`` directory → (command name, figure);
    an empty name for a thread gone meanwhile), summed by :func:`thread_kind` (empty when the process is gone)."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        name, figure = read(f"/proc/{pid}/task/{t}")
        if name:
            kind = thread_kind(pid, int(t), name)
            out[kind] = out.get(kind, 0.0) + figure
    return out


def thread_cpu(pid: int) -> dict[str, float]:
    """User+system CPU seconds of a process's threads, summed by :func:`thread_kind` (empty when it is gone;
    a thread that ended took its seconds with it)."""
    return by_thread_kind(pid, lambda task: stat_cpu(f"{task}/stat"))


def status_value(path: str, key: str) -> int | None:
    """The number a ``/proc/<pid>/status`` (or ``…/task/<tid>/status``) file gives for ``key`` (``VmRSS`` in kB,
    ``voluntary_ctxt_switches``, …); None when the file is gone or unreadable or has no such line."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key) and line[len(key)] == ":":
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _sleeps(task: str) -> tuple[str, float]:
    try:
        with open(f"{task}/comm") as f:
            name = f.read().strip()
    except OSError:
        return "", 0.0
    n = status_value(f"{task}/status", "voluntary_ctxt_switches")
    return ("", 0.0) if n is None else (name, float(n))


def thread_sleeps(pid: int) -> dict[str, float]:
    """How many times a process's threads went to sleep (``voluntary_ctxt_switches``: a wait on a socket, a
    lock or a timer, each ended by a wake-up), summed by :func:`thread_kind` (empty when it is gone)."""
    return by_thread_kind(pid, _sleeps)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (0 if it is gone)."""
    kb = status_value(f"/proc/{pid}/status", "VmRSS")
    return 0 if kb is None else kb * 1024
