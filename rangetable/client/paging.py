"""Paged results and ``$filter`` parameter substitution for the native client.

:class:`ItemPaged` and :class:`PageIterator` follow ``azure.core.paging``: iterating an ItemPaged
yields items across all pages; ``by_page(continuation_token)`` yields pages (iterators of items),
and the page iterator's ``continuation_token`` is the token of the next page (``None`` after the
last one). Each :class:`Page` also carries the token that follows it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Generic, TypeVar
from uuid import UUID

from rangetable.edm import INT32_MAX, INT32_MIN

T = TypeVar("T")

# A fetch function: continuation token in, (next token, items of this page) out.
Fetch = Callable[[Any], tuple[Any, list[T]]]


class Page(Generic[T]):
    """One page: an iterator over its items, plus the token of the page after it."""

    def __init__(self, items: list[T], continuation_token: Any) -> None:
        self._items = items
        self._it = iter(items)
        self.continuation_token = continuation_token

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        return next(self._it)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"<Page of {len(self._items)} items, continuation_token={self.continuation_token!r}>"


class Pages:
    """Where a run of pages fetched by ``fetch`` is: ``continuation_token`` is the token of the next
    page to fetch.

    As in azure-core, fetching stops once a page comes back without a token. The paging state of
    both :class:`PageIterator` and the asyncio ``AsyncPageIterator`` (:mod:`rangetable.client.aio.paging`).
    """

    def __init__(self, fetch: Callable[[Any], Any], continuation_token: Any = None) -> None:
        self._fetch = fetch
        self.continuation_token = continuation_token
        self._did_a_call_already = False

    @property
    def done(self) -> bool:
        """True once the last page was fetched."""
        return self.continuation_token is None and self._did_a_call_already

    def _fetched(self, token: Any) -> None:
        """Record that a page was fetched; ``token`` is the next page's."""
        self._did_a_call_already = True
        self.continuation_token = token


class PageIterator(Pages, Generic[T]):
    """An iterator of pages (``fetch``: a :data:`Fetch`); ``continuation_token`` is the token of the
    next page to fetch."""

    def __iter__(self) -> Iterator[Page[T]]:
        return self

    def __next__(self) -> Page[T]:
        if self.done:
            raise StopIteration("End of paging")
        token, items = self._fetch(self.continuation_token)
        self._fetched(token)
        return Page(items, token)

    next = __next__


class ItemPaged(Generic[T]):
    """An iterator of items fetched page by page, like ``azure.core.paging.ItemPaged``."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._items: Iterator[T] | None = None

    def by_page(self, continuation_token: Any = None) -> PageIterator[T]:
        """An iterator of pages, starting at ``continuation_token`` (from a previous page iterator)."""
        return PageIterator(self._fetch, continuation_token)

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._items is None:
            self._items = itertools.chain.from_iterable(self.by_page())
        return next(self._items)

    next = __next__

    def __repr__(self) -> str:
        return f"<iterator object rangetable.client.paging.ItemPaged at {hex(id(self))}>"


# --- $filter parameters ------------------------------------------------------------------------

_PARAM = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")


def _utc_iso(value: datetime) -> str:
    """A datetime as the SDK's ``_to_utc_datetime`` prints it (aware values converted to UTC).

    A naive datetime is taken as UTC, as :func:`rangetable.values.to_typed` stores it (the SDK would
    take it as local time), and a round-tripped value keeps its 100 ns ``tables_service_value``.
    """
    exact = getattr(value, "tables_service_value", None)
    if isinstance(exact, str) and exact:
        return exact
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_literal(val: Any) -> str:
    """One parameter value as an OData literal, as ``azure-data-tables`` formats it.

    bool → ``true``/``false``; float → ``str``; int → plain within Int32, else with an ``L`` suffix;
    datetime → ``datetime'…Z'``; UUID → ``guid'…'``; bytes → ``X'hex'``; anything else as a string
    in single quotes with ``'`` doubled.
    """
    if isinstance(val, bool):
        return "true" if val else "false"
    if isinstance(val, float):
        return str(val)
    if isinstance(val, int):
        return str(val) if INT32_MIN <= val <= INT32_MAX else f"{val}L"
    if isinstance(val, datetime):
        return f"datetime'{_utc_iso(val)}'"
    if isinstance(val, UUID):
        return f"guid'{val}'"
    if isinstance(val, bytes | bytearray):
        return f"X'{bytes(val).hex()}'"
    if isinstance(val, str):
        text = str.__str__(val)  # the plain value, also for str-based enums
    elif isinstance(val, Enum):
        text = str(val.value)
    else:
        text = str(val)
    return "'" + text.replace("'", "''") + "'"


def parameter_filter_substitution(parameters: dict[str, Any] | None, query_filter: str) -> str:
    """Replace ``@name`` placeholders in ``query_filter`` with the formatted ``parameters``.

    Like the SDK, the filter is split on spaces and each word starting with ``@`` is substituted
    (here the name may be followed by closing parentheses, e.g. ``(Age gt @age)``). A placeholder
    without a parameter raises KeyError, as in the SDK. Without parameters the filter is unchanged.
    """
    if not parameters:
        return query_filter
    words = query_filter.split(" ")
    for i, word in enumerate(words):
        if not word.startswith("@"):
            continue
        m = _PARAM.match(word)
        if m is None:
            continue
        words[i] = format_literal(parameters[m.group(1)]) + word[m.end() :]
    return " ".join(words)


def select_list(select: str | Iterable[str] | None) -> list[str] | None:
    """A ``select`` given as ``"a,b"`` or a list, as a list of names (``None`` for all)."""
    if select is None:
        return None
    if isinstance(select, str):
        names = [s.strip() for s in select.split(",")]
    else:
        names = [str(s).strip() for s in select]
    names = [n for n in names if n]
    return names or None
