"""Retry policies for the native client, following Azure Storage's retry guidance.

A policy is any object with ``delays() -> Iterator[float]``: a finite iterator of the seconds to
sleep before each retry. Its length is the number of retries, so a request is attempted at most
``1 + len(list(policy.delays()))`` times. Only errors whose :attr:`TableError.retriable` is true
(``ServerBusy``, ``OperationTimedOut``, ``InternalError``) are retried; a 4xx never is.

Writes are safe to retry: the client sends the same request id (``rid``) on every attempt, so the
server's exactly-once store applies a retried write at most once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from rangetable.errors import TableError

T = TypeVar("T")


class RetryPolicy(Protocol):
    """Anything with a ``delays()`` method yielding a finite sequence of sleep times."""

    def delays(self) -> Iterator[float]:
        """The seconds to wait before each retry, one per retry."""
        ...


class NoRetry:
    """Never retry: every error reaches the caller at once."""

    max_attempts = 1

    def delays(self) -> Iterator[float]:
        """An empty iterator."""
        return iter(())

    def __repr__(self) -> str:
        return "NoRetry()"


class FixedRetry:
    """Retry after the same ``delay`` each time, attempting at most ``max_attempts`` times in all."""

    def __init__(self, delay: float = 1.0, max_attempts: int = 5) -> None:
        if delay < 0:
            raise ValueError("delay must be >= 0")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.delay = float(delay)
        self.max_attempts = max_attempts

    def delays(self) -> Iterator[float]:
        """``max_attempts - 1`` copies of ``delay``."""
        for _ in range(self.max_attempts - 1):
            yield self.delay

    def __repr__(self) -> str:
        return f"FixedRetry(delay={self.delay}, max_attempts={self.max_attempts})"


class ExponentialRetry:
    """Randomised exponential back-off, Azure's formula.

    Before retry ``x`` (1, 2, ...) the client sleeps ``min(zmin + y, zmax)`` seconds with
    ``y = Rand(0.8z, 1.2z) * (2**x - 1)``, where ``zmin`` is ``initial``, ``z`` is ``base`` and
    ``zmax`` is ``max_delay``. ``rng`` (anything with ``uniform(a, b)``) makes the jitter
    reproducible in tests.
    """

    def __init__(
        self,
        initial: float = 0.1,
        base: float = 0.5,
        max_delay: float = 10.0,
        max_attempts: int = 5,
        *,
        rng: random.Random | None = None,
    ) -> None:
        if initial < 0 or base < 0 or max_delay < 0:
            raise ValueError("initial, base and max_delay must be >= 0")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.initial = float(initial)
        self.base = float(base)
        self.max_delay = float(max_delay)
        self.max_attempts = max_attempts
        self._rng = rng if rng is not None else random.Random()

    def delay(self, attempt: int) -> float:
        """The sleep before retry number ``attempt`` (1-based)."""
        z = self._rng.uniform(0.8 * self.base, 1.2 * self.base)
        return min(self.initial + z * (2**attempt - 1), self.max_delay)

    def delays(self) -> Iterator[float]:
        """One delay per retry, for retries ``1 .. max_attempts - 1``."""
        for attempt in range(1, self.max_attempts):
            yield self.delay(attempt)

    def __repr__(self) -> str:
        return (
            f"ExponentialRetry(initial={self.initial}, base={self.base}, "
            f"max_delay={self.max_delay}, max_attempts={self.max_attempts})"
        )


def default_policy() -> ExponentialRetry:
    """The policy a client uses when none is given."""
    return ExponentialRetry()


def next_pause(exc: TableError, delays: Iterator[float]) -> float | None:
    """The seconds to wait before retrying after ``exc``, or None when ``exc`` must reach the caller
    (it is not retriable, or ``delays`` of the policy ran out). The one retry decision of both the
    blocking client and the asyncio one (:mod:`rangetable.aio`)."""
    if not exc.retriable:
        return None
    return next(delays, None)


def call_with_retry(
    call: Callable[[], T],
    policy: RetryPolicy | None,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call()``, retrying retriable :class:`TableError` s as ``policy`` allows.

    The last error is re-raised once the policy's delays run out. Errors that are not retriable
    (every 4xx, 412, 409, ...) and exceptions that are not TableErrors propagate at once.
    """
    delays = (policy or NoRetry()).delays()
    while True:
        try:
            return call()
        except TableError as exc:
            pause = next_pause(exc, delays)
            if pause is None:
                raise
        sleep(pause)
