"""Paged results of the asyncio client, following ``azure.core.async_paging``.

``async for`` over an :class:`AsyncItemPaged` yields items across all pages;
``by_page(continuation_token)`` yields :class:`AsyncPage` s (``async for`` their items, or plain
``for``/``len``: a page is already in memory), and the page iterator's ``continuation_token`` is
the token of the next page (None after the last one). The paging state is the blocking client's
(:class:`rangetable.client.paging.Pages`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from rangetable.client.changes import ChangeFeed, ChangePage, ChangeRecord
from rangetable.client.paging import Page, Pages
from rangetable.messages import NativeRequest

T = TypeVar("T")

# An async fetch function: continuation token in, (next token, items of this page) out.
AsyncFetch = Callable[[Any], Awaitable[tuple[Any, list[T]]]]


class AsyncPage(Page[T]):
    """One page: its items (by ``async for`` or ``for``), plus the token of the page after it."""

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return next(self)
        except StopIteration:
            raise StopAsyncIteration from None


class AsyncPageIterator(Pages, Generic[T]):
    """An async iterator of pages (``fetch``: an :data:`AsyncFetch`); ``continuation_token`` is the
    token of the next page to fetch."""

    def __aiter__(self) -> AsyncIterator[AsyncPage[T]]:
        return self

    async def __anext__(self) -> AsyncPage[T]:
        if self.done:
            raise StopAsyncIteration("End of paging")
        token, items = await self._fetch(self.continuation_token)
        self._fetched(token)
        return AsyncPage(items, token)


class AsyncItemPaged(Generic[T]):
    """An async iterator of items fetched page by page, like ``azure.core.async_paging.AsyncItemPaged``."""

    def __init__(self, fetch: AsyncFetch) -> None:
        self._fetch = fetch
        self._pages: AsyncPageIterator[T] | None = None
        self._page: AsyncPage[T] | None = None

    def by_page(self, continuation_token: Any = None) -> AsyncPageIterator[T]:
        """An async iterator of pages, starting at ``continuation_token`` (from a previous page iterator)."""
        return AsyncPageIterator(self._fetch, continuation_token)

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        if self._pages is None:
            self._pages = self.by_page()
        while True:
            if self._page is not None:
                for item in self._page:
                    return item
            self._page = await self._pages.__anext__()

    def __repr__(self) -> str:
        return f"<async iterator object rangetable.client.aio.paging.AsyncItemPaged at {hex(id(self))}>"


class AsyncChangePaged:
    """The records of a table's feed, fetched page by page as they are iterated: the asyncio twin of
    :class:`rangetable.client.changes.ChangePaged`."""

    def __init__(self, feed: ChangeFeed, call: Callable[[NativeRequest], Awaitable[Any]]) -> None:
        self._feed = feed
        self._call = call

    async def by_page(self, continuation_token: str | None = None) -> AsyncIterator[ChangePage]:
        """The pages from cursor ``continuation_token`` (None: from where the reading starts)."""
        token = continuation_token
        while True:
            page = self._feed.read(await self._call(self._feed.body(token)))
            yield page
            if self._feed.last(page):
                return
            token = page.cursor
            wait = self._feed.pause(page)
            if wait:
                await asyncio.sleep(wait)

    async def __aiter__(self) -> AsyncIterator[ChangeRecord]:
        async for page in self.by_page():
            for record in page.records:
                yield record
