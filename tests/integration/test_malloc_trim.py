"""rangetable.kernel.malloc_trim: freed heap goes back to the operating system (glibc)."""

from __future__ import annotations

import threading

import pytest

from rangetable.kernel import malloc_trim


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_trim_gives_back_memory_freed_in_fragments() -> None:
    trim = malloc_trim.trimmer()
    if trim is None:
        pytest.skip("no glibc malloc_trim on this platform")
    # 64 MiB in 16 KB objects, every other one freed: glibc keeps the holes for reuse
    blocks = [bytearray(16_000) for _ in range(4_000)]
    del blocks[::2]
    blocks.append(bytearray(1))  # keep the top of the heap in use, so only a trim releases the holes
    before = rss_kib()
    trim()
    assert before - rss_kib() > 8 << 10  # at least 8 MiB returned
    del blocks


def test_the_trimmer_thread_runs_until_stopped() -> None:
    stop = threading.Event()
    t = malloc_trim.start(0.01, stop)
    if t is None:
        pytest.skip("no glibc malloc_trim on this platform")
    assert t.is_alive() and t.daemon
    stop.set()
    t.join(2)
    assert not t.is_alive()
