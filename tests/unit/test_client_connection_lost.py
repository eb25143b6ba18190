"""A request whose connection drops fails at once (retriable), in the blocking and the asyncio client.

Issue 24: a killed frontend was the most common cause of chaos-drill operations slower than 3 s, each
waiting out the client's whole timeout before its retry. The socket's monitor reports the disconnect;
here a real ZeroMQ ROUTER (CURVE, TCP on 127.0.0.1) closes while requests wait on it.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rangetable.client.aio.transport import AsyncTransport
from rangetable.client.transport import Transport
from rangetable.errors import TableError
from tests.unit.test_client_units import Router

TIMEOUT_S = 10.0  # far longer than the test may take: the failure must come from the disconnect


def _close_later(router: Router, after_s: float) -> threading.Timer:
    timer = threading.Timer(after_s, router.close)
    timer.start()
    return timer


def test_a_dropped_connection_fails_the_waiting_request_at_once() -> None:
    router = Router(delay=TIMEOUT_S)  # answers hello at once, never the request in time
    t = Transport(router.endpoint, timeout=TIMEOUT_S)
    try:
        assert t.request({"op": "hello", "version": 1})["version"] == 1
        timer = _close_later(router, 0.3)
        t0 = time.monotonic()
        with pytest.raises(TableError) as info:
            t.request({"op": "x", "n": 1})
        waited = time.monotonic() - t0
        timer.join()
        assert info.value.error_code == "OperationTimedOut" and info.value.retriable
        assert "was lost" in info.value.message
        assert waited < 3.0, waited
    finally:
        t.close()
        router.close()


def test_a_connection_that_stays_up_still_times_out() -> None:
    router = Router(delay=TIMEOUT_S)
    t = Transport(router.endpoint, timeout=0.3)
    try:
        with pytest.raises(TableError) as info:
            t.request({"op": "x", "n": 1})
        assert info.value.error_code == "OperationTimedOut" and "within 0.3 s" in info.value.message
    finally:
        t.close()
        router.close()


def test_a_dropped_connection_fails_every_waiting_task_at_once() -> None:
    router = Router(delay=TIMEOUT_S)

    async def main() -> tuple[list[object], float]:
        t = AsyncTransport(router.endpoint, timeout=TIMEOUT_S)
        assert (await t.request({"op": "hello", "version": 1}))["version"] == 1  # connected
        timer = _close_later(router, 0.3)
        t0 = time.monotonic()
        got = await asyncio.gather(*(t.request({"op": "x", "n": i}) for i in range(1, 4)), return_exceptions=True)
        waited = time.monotonic() - t0
        timer.join()
        await t.close()
        return got, waited

    try:
        got, waited = asyncio.run(main())
    finally:
        router.close()
    assert all(isinstance(g, TableError) and g.error_code == "OperationTimedOut" and g.retriable
               and "was lost" in g.message for g in got), got
    assert waited < 3.0, waited
