"""What ``/proc`` says of a process: its CPU seconds and its resident memory (the benchmarks' meters)."""

from __future__ import annotations

import os

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


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
