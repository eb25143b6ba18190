"""Unit tests of the asyncio client's own parts: the transport against a real ZeroMQ ROUTER in a thread
(many requests in flight on one socket, timeouts, cancellation, a refused key, close), the async retry
loop and the async pager. What it shares with the blocking client is tested in ``test_client_units.py``."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from rangetable import ExponentialRetry, FixedRetry, NoRetry, TableError, curve
from rangetable.aio import AsyncItemPaged, TableClient, TableServiceClient
from rangetable.client.aio.transport import AsyncTransport, call_with_retry
from tests.unit.test_client_units import Router

T = TypeVar("T")


def on_router(delay: float, main: Callable[[Router], Coroutine[Any, Any, T]]) -> T:
    """Run ``main(router)`` on a new event loop, with a Router answering after ``delay`` s."""
    router = Router(delay)
    try:
        return asyncio.run(main(router))
    finally:
        router.close()


def test_many_tasks_share_one_socket_and_one_hello() -> None:
    async def main(router: Router) -> None:
        t = AsyncTransport(router.endpoint, timeout=5)
        t0 = time.monotonic()
        got = await asyncio.gather(*(t.request({"op": "x", "n": i}) for i in range(200)))
        assert time.monotonic() - t0 < 2  # 200 replies delayed 50 ms each came back together
        assert got == [{"echo": i} for i in range(200)]
        assert [r["op"] for r in router.seen].count("hello") == 1
        await t.close()

    on_router(0.05, main)


def test_a_timeout_drops_the_late_reply_and_keeps_the_socket() -> None:
    async def main(router: Router) -> None:
        t = AsyncTransport(router.endpoint, timeout=0.2)
        with pytest.raises(TableError) as info:
            await t.request({"op": "x", "n": 1})
        assert info.value.error_code == "OperationTimedOut" and info.value.retriable
        sock = t._sock
        await asyncio.sleep(0.3)  # the late reply to n=1 arrives now, and is dropped
        assert await t.request({"op": "x", "n": 2}, timeout=2) == {"echo": 2}
        assert t._sock is sock and t._waiting == {}
        await t.close()

    on_router(0.4, main)


def test_a_cancelled_task_leaves_the_client_usable() -> None:
    async def main(router: Router) -> None:
        t = AsyncTransport(router.endpoint, timeout=5)
        await t.request({"op": "x", "n": 0})
        doomed = [asyncio.create_task(t.request({"op": "x", "n": i})) for i in range(1, 11)]
        kept = [asyncio.create_task(t.request({"op": "x", "n": i})) for i in range(11, 21)]
        await asyncio.sleep(0.05)  # all 20 are sent, none is answered yet
        for task in doomed:
            task.cancel()
        assert await asyncio.gather(*kept) == [{"echo": i} for i in range(11, 21)]
        assert all(task.cancelled() for task in doomed)
        await asyncio.sleep(0.1)  # the cancelled requests' replies have come and gone
        assert await t.request({"op": "x", "n": 99}) == {"echo": 99}
        assert t._waiting == {}
        await t.close()

    on_router(0.2, main)


def test_a_refused_key_is_authentication_failed_for_every_waiting_task() -> None:
    async def main(router: Router) -> list[Any]:
        curve.remember(router.endpoint, router_public(router), curve.KeyPair.generate())  # a key it does not know
        t = AsyncTransport(router.endpoint, timeout=0.5)
        try:
            return await asyncio.gather(*(t.request({"op": "x"}) for _ in range(5)), return_exceptions=True)
        finally:
            await t.close()

    errors = on_router(0.0, main)
    assert [getattr(e, "error_code", e) for e in errors] == ["AuthenticationFailed"] * 5


def router_public(router: Router) -> bytes:
    """The ROUTER's CURVE public key, as remembered for its endpoint."""
    keys = curve.keys_for(router.endpoint)
    assert keys is not None
    return keys[0]


def test_close_fails_waiting_requests_and_refuses_new_ones() -> None:
    async def main(router: Router) -> None:
        t = AsyncTransport(router.endpoint, timeout=5)
        await t.request({"op": "x", "n": 0})  # hello answered at once; this one after a second
        waiting = asyncio.create_task(t.request({"op": "x", "n": 1}))
        await asyncio.sleep(0.05)
        await t.close()
        with pytest.raises(ValueError, match="closed"):
            await waiting
        with pytest.raises(ValueError, match="closed"):
            await t.request({"op": "x"})
        assert t.closed

    on_router(1.0, main)


def test_unreachable_endpoint_times_out() -> None:
    curve.remember("tcp://127.0.0.1:9", curve.KeyPair.generate().public, curve.KeyPair.generate())

    async def main() -> None:
        async with TableServiceClient("tcp://127.0.0.1:9", timeout=0.2, retry_policy=NoRetry()) as svc:
            with pytest.raises(TableError) as info:
                [t async for t in svc.list_tables()]
            assert info.value.error_code == "OperationTimedOut"

    asyncio.run(main())


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        TableServiceClient("localhost:10012")
    with pytest.raises(ValueError):
        TableClient("tcp://127.0.0.1:1", "")


# --- retries ---------------------------------------------------------------------------------------


def _retry(errors: list[TableError], policy: Any) -> tuple[Any, list[float], int]:
    """Run the async retry loop over a call failing with ``errors`` then answering "done"."""
    calls, slept = [0], []

    async def call() -> str:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return "done"

    async def sleep(s: float) -> None:
        slept.append(s)

    async def main() -> Any:
        return await call_with_retry(call, policy, sleep=sleep)

    try:
        return asyncio.run(main()), slept, calls[0]
    except TableError as exc:
        return exc, slept, calls[0]


def test_async_retry_follows_the_policy() -> None:
    busy = TableError("ServerBusy", "busy")
    assert _retry([busy, busy], FixedRetry(delay=0.5, max_attempts=3)) == ("done", [0.5, 0.5], 3)
    out, slept, calls = _retry([busy] * 5, FixedRetry(delay=0.1, max_attempts=3))
    assert (out, slept, calls) == (busy, [0.1, 0.1], 3)
    assert _retry([busy], NoRetry()) == (busy, [], 1)
    policy = ExponentialRetry(initial=0.1, base=0.5, max_attempts=3, rng=random.Random(1))
    expected = list(ExponentialRetry(initial=0.1, base=0.5, max_attempts=3, rng=random.Random(1)).delays())
    assert _retry([busy, busy], policy) == ("done", expected, 3)


def test_async_retry_never_retries_a_4xx() -> None:
    conflict = TableError("EntityAlreadyExists", "taken")
    assert _retry([conflict], FixedRetry(delay=0.1, max_attempts=5)) == (conflict, [], 1)


# --- paging ----------------------------------------------------------------------------------------


def _pages(pages: dict[Any, tuple[Any, list[int]]]) -> tuple[AsyncItemPaged[int], list[Any]]:
    asked: list[Any] = []

    async def fetch(token: Any) -> tuple[Any, list[int]]:
        asked.append(token)
        return pages[token]

    return AsyncItemPaged(fetch), asked


def test_async_item_paged_iterates_all_pages_including_empty_ones() -> None:
    paged, asked = _pages({None: ("a", [1, 2]), "a": ("b", []), "b": (None, [3])})

    async def main() -> list[int]:
        return [i async for i in paged]

    assert asyncio.run(main()) == [1, 2, 3]
    assert asked == [None, "a", "b"]


def test_async_by_page_and_continuation_tokens() -> None:
    paged, asked = _pages({None: ("a", [1, 2]), "a": (None, [3])})

    async def main() -> None:
        pager = paged.by_page()
        assert asked == []  # nothing is fetched before iteration
        first = await pager.__anext__()
        assert [i async for i in first] == [1, 2] and first.continuation_token == "a"
        assert pager.continuation_token == "a"
        assert [list(p) async for p in paged.by_page("a")] == [[3]]
        assert [len(p) async for p in pager] == [1] and pager.continuation_token is None

    asyncio.run(main())
