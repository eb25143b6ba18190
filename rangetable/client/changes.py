"""A table's change feed in the native client: :meth:`TableClient.read_changes
<rangetable.client.blocking.TableClient.read_changes>` (and its asyncio twin).

Iterating a :class:`ChangePaged` yields :class:`ChangeRecord` s in position order; ``by_page(cursor)``
yields :class:`ChangePage` s, each with the ``cursor`` after it and, at the live edge, the table's
``resolved`` time (no change at or before it will ever appear). A cursor is an opaque string
(:mod:`rangetable.feed_cursor`) that resumes exactly after what was read, whatever the cluster did
meanwhile. Without ``follow`` the reading stops at the live edge; with it, it goes on, waiting
``poll_interval`` after each page that reached the live edge (longer while the table is idle).

:class:`ChangeFeed` holds what both clients share: the request of each page and the reading of its answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import msgpack

from rangetable import feed_cursor, feed_page
from rangetable.edm import Entity, datetime_to_ticks, etag_from_ticks, ticks_to_datetime
from rangetable.keys import decode_key
from rangetable.messages import ChangesPage, ChangesPageRequest, NativeRequest
from rangetable.values import TableEntity, typed_to_entity

IDLE_FACTOR = 4  # a follower at the live edge of an idle table asks at most this many poll intervals apart


@dataclass(frozen=True)
class ChangeRecord:
    """One entity's change: ``kind`` is insert, replace, merge, delete or expire; ``entity`` the entity after
    it (None for a delete or an expiry), ``before`` the entity before it when the table keeps before-images;
    ``timestamp`` and ``etag`` those of the change; ``cursor`` resumes right after it (``position``). The records of one
    entity group transaction share ``timestamp`` and PartitionKey. The entities are decoded when first asked for:
    a reader that only passes records on (:meth:`to_json`, a loss ledger) never builds them."""

    partition_key: str
    row_key: str
    kind: str
    position: feed_cursor.Position
    wire: list = field(repr=False, compare=False)  # [ts, key, kind, value, before] as the frontend sent it

    @cached_property
    def entity(self) -> TableEntity | None:
        """The entity after the change (None for a delete or an expiry)."""
        return _entity(self.partition_key, self.row_key, self.wire[3])

    @cached_property
    def before(self) -> TableEntity | None:
        """The entity before the change, when the table keeps before-images (else None)."""
        return _entity(self.partition_key, self.row_key, self.wire[4])

    @cached_property
    def timestamp(self) -> datetime:
        """The change's Timestamp."""
        return ticks_to_datetime(self.position[0])

    @property
    def etag(self) -> str:
        """The ETag the entity got by this change."""
        return etag_from_ticks(self.position[0])

    @property
    def cursor(self) -> str:
        """The opaque cursor right after this record."""
        return feed_cursor.encode(self.position)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready values, the same as a line of the REST extension
        (:func:`rangetable.feed_page.record_json`: entities as the REST API renders them)."""
        return feed_page.record_json(self.wire)


class ChangePage:
    """One page of the feed: its records, the ``cursor`` after them and the table's ``resolved`` time (None
    unless the page reached the live edge; ``resolved_ticks``: the same, exact, in Timestamp ticks)."""

    def __init__(self, records: list[ChangeRecord], cursor: str, resolved_ticks: int | None) -> None:
        self.records = records
        self.cursor = cursor
        self.continuation_token = cursor  # azure-core's name for where the next page starts
        self.resolved_ticks = resolved_ticks

    @property
    def resolved(self) -> datetime | None:
        """The resolved time (truncated to microseconds, as datetimes are)."""
        return None if self.resolved_ticks is None else ticks_to_datetime(self.resolved_ticks)

    def to_json(self) -> dict[str, Any]:
        """The end of the page as JSON-ready values, the same as the last line of the REST extension
        (:func:`rangetable.feed_page.end_json`)."""
        return feed_page.end_json(self.cursor, self.resolved_ticks)

    def __iter__(self) -> Iterator[ChangeRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"<ChangePage of {len(self.records)} records, resolved={self.resolved}, cursor={self.cursor!r}>"


class ChangeFeed:
    """Where a reading of a table's feed starts and how each page is asked for and read (no I/O)."""

    def __init__(self, table: str, *, start: str | datetime = "beginning", cursor: str | None = None,
                 follow: bool = False, results_per_page: int = feed_page.DEFAULT_TOP, poll_interval: float = 0.05,
                 lo: str = "", hi: str | None = None) -> None:
        when = datetime_to_ticks(start) if isinstance(start, datetime) else start if isinstance(start, str) else ""
        self.first = feed_page.first(when, cursor)  # a datetime: the changes at or after it
        self.table = table
        self.span = (lo, hi)  # the PartitionKeys read (a consumer group's span)
        self.follow = follow
        self.top = feed_page.check_top(results_per_page)
        self.poll_interval = poll_interval
        self.empty = 0  # empty pages in a row at the live edge
        self.high: int | None = None  # the previous page's highest frontier: the next page's hint

    def body(self, token: str | None) -> ChangesPageRequest:
        """The request of the page after cursor ``token`` (None: the first page)."""
        body = feed_page.request(self.table, self.top, self.first if token is None else feed_cursor.decode(token))
        if self.span != ("", None):
            body["lo"], body["hi"] = self.span
        if token is not None and self.high is not None:
            body["need"] = self.high
        return body

    def read(self, answer: ChangesPage) -> ChangePage:
        """The page of an answer."""
        records = [_record(r) for r in answer["records"]]
        cursor = feed_cursor.encode(feed_cursor.from_wire(answer["cursor"]))
        self.high = answer.get("high")
        return ChangePage(records, cursor, answer.get("resolved"))

    def last(self, page: ChangePage) -> bool:
        """True when no page follows ``page`` (not following, and the page reached the live edge)."""
        return not self.follow and page.resolved is not None

    def pause(self, page: ChangePage) -> float:
        """Seconds to wait before asking for the page after ``page``: none while more follow; after a page that
        reached the live edge ``poll_interval`` (a follower asks no more often than that, so it costs the
        cluster a page per interval however fast changes come), growing to :data:`IDLE_FACTOR` times that
        over a run of empty pages (an idle table's ranges then close their resolved Timestamp less often)."""
        if not (self.follow and page.resolved_ticks is not None):
            self.empty = 0
            return 0.0  # more follow: at once
        self.empty = self.empty + 1 if not page.records else 0
        return self.poll_interval * min(IDLE_FACTOR, 1 + self.empty // 8)


def _record(r: Any) -> ChangeRecord:
    ts, key, kind = r[0], r[1], r[2]
    pk, rk = decode_key(key)
    return ChangeRecord(pk, rk, kind, (ts, key), r)


def _entity(pk: str, rk: str, value: bytes | None) -> TableEntity | None:
    if value is None:
        return None
    ts, props = msgpack.unpackb(value, raw=False)
    return typed_to_entity(Entity(pk, rk, ts, props))


class ChangePaged:
    """The records of a table's feed, fetched page by page as they are iterated (blocking)."""

    def __init__(self, feed: ChangeFeed, call: Callable[[NativeRequest], Any]) -> None:
        self._feed = feed
        self._call = call
        self._records: Iterator[ChangeRecord] | None = None

    def by_page(self, continuation_token: str | None = None) -> Iterator[ChangePage]:
        """The pages from cursor ``continuation_token`` (None: from where the reading starts)."""
        token = continuation_token
        while True:
            page = self._feed.read(self._call(self._feed.body(token)))
            yield page
            if self._feed.last(page):
                return
            token = page.cursor
            wait = self._feed.pause(page)
            if wait:
                time.sleep(wait)

    def __iter__(self) -> Iterator[ChangeRecord]:
        for page in self.by_page():
            yield from page.records
