"""The verifying workload's pacing (``--rate``): never more steps than the rate allows, threads spread out."""

from __future__ import annotations

import threading
import time

from cli.workload.generator import Workload


def _count_steps(rate: float | None, seconds: float, threads: int = 4) -> list[float]:
    wl = Workload("tcp://127.0.0.1:9", "T", threads=threads, rate=rate)
    times: list[float] = []
    lock = threading.Lock()

    def step(c: object, rnd: object, tid: int, n: int) -> None:
        with lock:
            times.append(time.monotonic())
        time.sleep(0.001)

    wl._step = step  # type: ignore[method-assign]
    wl.start()
    time.sleep(seconds)
    wl.stop()
    return times


def test_a_paced_workload_never_exceeds_its_rate() -> None:
    times = _count_steps(rate=40.0, seconds=1.0)
    assert 0 < len(times) <= 40 * 1.0 + 4  # at most one step per thread per gap, from a start spread over one gap
    assert len(times) >= 10  # it runs (a loaded machine may only slow it down)


def test_a_stopped_paced_workload_takes_no_further_step() -> None:
    wl = Workload("tcp://127.0.0.1:9", "T", threads=2, rate=1.0)  # a gap of 2 s per thread
    calls: list[int] = []
    wl._step = lambda c, rnd, tid, n: calls.append(tid)  # type: ignore[method-assign]
    wl.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    wl.stop()
    assert time.monotonic() - t0 < 1.0  # the wait ends at stop, not at the next due time
    assert len(calls) <= 2


def test_an_unpaced_workload_runs_as_fast_as_answers_come() -> None:
    assert len(_count_steps(rate=None, seconds=0.3, threads=2)) > 40
