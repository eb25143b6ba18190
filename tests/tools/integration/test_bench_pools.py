"""The benchmarks' forked worker pools (``cli.bench.pools.fork_pool``) end on ``terminate()`` whatever SIGTERM
handler the parent had: each worker restores the default action."""

from __future__ import annotations

import signal
import sys

from cli.bench.pools import fork_pool


def _noop() -> None:
    pass


def _disposition(_x: int) -> bool:
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_worker_dies_by_sigterm_even_when_its_parent_unwinds_on_it() -> None:
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))  # start_temp_cluster's
    try:
        with fork_pool(2, _noop, ()) as pool:
            assert pool.map(_disposition, range(4)) == [True] * 4
    finally:
        signal.signal(signal.SIGTERM, previous)
