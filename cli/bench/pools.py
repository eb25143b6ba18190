"""Pools of forked worker processes for the benchmarks' loaders and clients."""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import signal
from collections.abc import Callable
from typing import Any


def fork_pool(processes: int, initializer: Callable[..., None], initargs: tuple[Any, ...]) -> multiprocessing.pool.Pool:
    """A pool of ``processes`` forked workers, each set up by ``initializer(*initargs)``, that ``terminate()``
    surely ends: each worker first restores SIGTERM's default action.

    A worker forked from a process with a Python SIGTERM handler (``start_temp_cluster``'s unwinding, in a test
    worker) inherits it; once the worker runs threads of its own (a client's), the signal may land on one of them
    while the main thread waits on the pool's queue lock, so the handler never runs, the worker never ends, and
    ``terminate()`` waits for it for ever (a CI run hung so in `bench replicas`' parallel load)."""
    return multiprocessing.get_context("fork").Pool(processes, _start_worker, (initializer, initargs))


def _start_worker(initializer: Callable[..., None], initargs: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    initializer(*initargs)
