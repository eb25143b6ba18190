"""The asyncio client seen through the blocking client's API, so one test body runs on both clients.

:class:`Blocking` wraps a ``rangetable.aio`` client: a method returning a coroutine is run to its end
on an event loop in a thread of its own (:class:`LoopThread`), an async pager is iterated there, and
clients it returns are wrapped in turn. Several threads may call through one wrapper at once: their
requests are then in flight together on the one loop, as concurrent tasks.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from rangetable import aio
from rangetable.client.aio.paging import AsyncItemPaged, AsyncPage, AsyncPageIterator

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running in a daemon thread until :meth:`close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="aio-loop")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the loop and wait for its result (its exception is raised here)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class BlockingPages:
    """An AsyncPageIterator as an iterator of pages, with its ``continuation_token``."""

    def __init__(self, pages: AsyncPageIterator[Any], loop: LoopThread) -> None:
        self._pages = pages
        self._loop = loop

    @property
    def continuation_token(self) -> Any:
        return self._pages.continuation_token

    def __iter__(self) -> BlockingPages:
        return self

    def __next__(self) -> AsyncPage[Any]:
        return _next(self._pages, self._loop)


class BlockingPaged:
    """An AsyncItemPaged as an iterator of items, with ``by_page``."""

    def __init__(self, paged: AsyncItemPaged[Any], loop: LoopThread) -> None:
        self._paged = paged
        self._loop = loop

    def by_page(self, continuation_token: Any = None) -> BlockingPages:
        return BlockingPages(self._paged.by_page(continuation_token), self._loop)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return _next(self._paged, self._loop)


def _next(it: Any, loop: LoopThread) -> Any:
    async def step() -> Any:
        try:
            return True, await it.__anext__()
        except StopAsyncIteration:
            return False, None

    more, item = loop.run(step())
    if not more:
        raise StopIteration
    return item


class Blocking:
    """A ``rangetable.aio`` client with the blocking client's calling convention."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            out = value(*args, **kwargs)
            if inspect.isawaitable(out):
                out = self._loop.run(_awaited(out))
            return self._wrap(out)

        return call

    def _wrap(self, out: Any) -> Any:
        if isinstance(out, aio.TableClient | aio.TableServiceClient):
            return Blocking(out, self._loop)
        if isinstance(out, AsyncItemPaged):
            return BlockingPaged(out, self._loop)
        return out

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class Clients:
    """The constructors of one client flavour: ``TableServiceClient(...)``, ``TableClient(...)``."""

    def __init__(self, name: str, loop: LoopThread | None = None) -> None:
        self.name = name
        self._loop = loop

    def _made(self, client: Any) -> Any:
        return client if self._loop is None else Blocking(client, self._loop)

    @property
    def module(self) -> Any:
        """``rangetable`` or ``rangetable.aio``."""
        import rangetable

        return rangetable if self._loop is None else aio

    def TableServiceClient(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (the SDK's name)
        return self._made(self.module.TableServiceClient(*args, **kwargs))

    def TableClient(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (the SDK's name)
        return self._made(self.module.TableClient(*args, **kwargs))

    def service_from_cluster(self, data_dir: str) -> Any:
        return self._made(self.module.TableServiceClient.from_cluster(data_dir))
