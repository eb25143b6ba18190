"""The benchmarks' /proc meters: one reader of a status file's numbers for memory and for sleeps."""

from __future__ import annotations

import os
import time

from cli.bench.proc import rss_bytes, status_value, thread_sleeps


def test_status_value_reads_a_number_and_says_none_for_what_is_not_there(tmp_path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nVmRSS:\t  2048 kB\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t9\n")
    assert status_value(str(status), "VmRSS") == 2048
    assert status_value(str(status), "voluntary_ctxt_switches") == 7  # not the nonvoluntary line
    assert status_value(str(status), "VmSwap") is None
    assert status_value(str(tmp_path / "gone"), "VmRSS") is None


def test_this_process_has_memory_and_its_main_thread_sleeps() -> None:
    assert rss_bytes(os.getpid()) > 1 << 20
    before = thread_sleeps(os.getpid())["loop"]
    time.sleep(0.01)
    assert thread_sleeps(os.getpid())["loop"] > before
    assert rss_bytes(2 ** 22 + 12345) == 0 and thread_sleeps(2 ** 22 + 12345) == {}
