"""Consumer groups of a table's change feed: several readers share the table's PartitionKeys, each span
read by one member at a time, its checkpoint kept in the cluster.

The pattern is Azure Event Hubs' event processor (its load balancing over a checkpoint store): ownership
claims and checkpoints are rows of an ordinary table of the cluster (:data:`GROUPS_TABLE`), changed only
under ETag conditions, so two members never both hold a claim to one span — the range's primary orders the
conditional writes; there is no consensus of our own.

* A group's **spans** cover the table's PartitionKeys. They start as the table's ranges and are split when a
  range splits (both pieces keep the cursor: a position is valid for any part of the key space); a merge
  needs nothing (spans need not match ranges). Each span row holds its cursor, its owner and the owner's
  lease; each member row, the member's lease.
* Every ``heartbeat_s`` a member renews its lease and its claims, claims spans without a live owner up to
  its fair share (spans over live members, rounded up), and asks a member holding more than its share for
  one (``want``); the owner hands a wanted span over at its next heartbeat, after its last checkpoint. So a
  span changes hands between pages and per-key order holds across the handover. A member that dies loses its
  claims when its lease runs out; the next owner resumes from the last checkpoint, so what was read after it
  is delivered again (at least once, as with Kafka's committed offsets).
* A member reads a page of each span it owns in turn and checkpoints the span's cursor when the next page is
  asked for (the caller has handled the one before).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rangetable.client.blocking import TableClient, TableServiceClient
from rangetable.client.changes import ChangeFeed, ChangePage
from rangetable.client.models import (
    MatchConditions,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    TableTransactionError,
)
from rangetable.errors import TableError

GROUPS_TABLE = "rangetablegroups"  # the checkpoint store: one partition per (table, group)
LEASE_S = 10.0
HEARTBEAT_S = 1.0
FORGET_S = 300.0  # a member row whose lease ran out this long ago is deleted
_SPAN, _MEMBER = "s|", "m|"


@dataclass
class Span:
    """One span of a group as its row says: PartitionKeys ``[lo, hi)``, the cursor (``""``: the group's start),
    owner, the owner's lease (epoch seconds), who wants it, and the row's ETag."""

    lo: str
    hi: str | None
    cursor: str
    owner: str
    expires: float
    want: str
    etag: str

    @property
    def row(self) -> str:
        """The span's RowKey."""
        return _SPAN + self.lo


@dataclass
class GroupPage:
    """A page of one span: its records (a :class:`~rangetable.client.changes.ChangePage`) and the span."""

    span: tuple[str, str | None]
    page: ChangePage

    @property
    def records(self) -> list:
        """The page's records."""
        return self.page.records


def fair_share(spans: int, members: int) -> tuple[int, int]:
    """(fewest, most) spans a member of ``members`` should own of ``spans``."""
    members = max(1, members)
    return spans // members, math.ceil(spans / members)


def split_points(lo: str, hi: str | None, range_lows: list[str]) -> list[str]:
    """The range boundaries strictly inside the span ``[lo, hi)``, ascending."""
    return sorted(b for b in set(range_lows) if b > lo and (hi is None or b < hi))


@dataclass
class ConsumerGroup:
    """One member of the consumer group ``group`` of ``table``'s feed (see the module docstring)."""

    service: TableServiceClient
    table: str
    group: str
    member: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    start: str | datetime = "beginning"
    lease_s: float = LEASE_S
    heartbeat_s: float = HEARTBEAT_S
    results_per_page: int = 1000
    poll_interval: float = 0.05
    owned: dict[str, Span] = field(default_factory=dict)  # RowKey -> span, as last written by this member
    _beat: float = 0.0
    _closed: bool = False

    def __post_init__(self) -> None:
        self.service.create_table_if_not_exists(GROUPS_TABLE)
        self.store: TableClient = self.service.get_table_client(GROUPS_TABLE)
        self.feed: TableClient = self.service.get_table_client(self.table)
        self.pk = f"{self.table.lower()}|{self.group}"
        if isinstance(self.start, str) and self.start not in ("beginning", "now"):
            raise TableError("InvalidInput", "start must be 'beginning', 'now' or a datetime")

    # --- the checkpoint store ---------------------------------------------------------------------

    def _rows(self) -> tuple[dict[str, Span], dict[str, float]]:
        spans: dict[str, Span] = {}
        members: dict[str, float] = {}
        for e in self.store.query_entities("PartitionKey eq @pk", parameters={"pk": self.pk}):
            rk = e["RowKey"]
            if rk.startswith(_SPAN):
                spans[rk] = Span(e["lo"], e.get("hi"), e.get("cursor", ""), e.get("owner", ""),
                                 float(e.get("expires", 0.0)), e.get("want", ""), e.metadata["etag"])
            elif rk.startswith(_MEMBER):
                members[rk[len(_MEMBER):]] = float(e.get("expires", 0.0))
        return spans, members

    def _entity(self, s: Span) -> dict[str, Any]:
        e: dict[str, Any] = {"PartitionKey": self.pk, "RowKey": s.row, "lo": s.lo, "cursor": s.cursor,
                             "owner": s.owner, "expires": float(s.expires), "want": s.want}
        if s.hi is not None:
            e["hi"] = s.hi
        return e

    def _write(self, s: Span) -> bool:
        """Replace span ``s``'s row if it still has ``s.etag``; False (and nothing written) otherwise."""
        try:
            res = self.store.update_entity(self._entity(s), mode="replace", etag=s.etag,
                                           match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceNotFoundError):
            return False
        s.etag = res["etag"]
        return True

    def _ranges(self) -> list[str]:
        """The low PartitionKeys of the table's ranges, from a frontend's map."""
        snap = self.service._call({"op": "map"})
        return [r["low"] for r in snap["ranges"] if r["table"].lower() == self.table.lower()]

    def _create_spans(self, now: float) -> None:
        lows = sorted(set(self._ranges())) or [""]
        if lows[0] != "":
            lows.insert(0, "")
        bounds = list(zip(lows, [*lows[1:], None], strict=True))
        ops = [("create", self._entity(Span(lo, hi, "", "", 0.0, "", ""))) for lo, hi in bounds]
        try:
            for i in range(0, len(ops), 100):
                self.store.submit_transaction(ops[i:i + 100])
        except (TableTransactionError, ResourceExistsError):
            pass  # another member made them first

    # --- balancing --------------------------------------------------------------------------------

    def heartbeat(self) -> None:
        """Renew this member and its claims, split spans its table's ranges split, hand over wanted spans and
        claim or ask for its share (see the module docstring)."""
        now = time.time()
        self.store.upsert_entity({"PartitionKey": self.pk, "RowKey": _MEMBER + self.member,
                                  "expires": now + self.lease_s})
        spans, members = self._rows()
        if not spans:
            self._create_spans(now)
            spans, members = self._rows()
        alive = {m for m, exp in members.items() if exp > now} | {self.member}
        for m, exp in members.items():  # members long gone leave no row behind
            if exp < now - FORGET_S:
                try:
                    self.store.delete_entity(self.pk, _MEMBER + m)
                except TableError:
                    pass
        mine = {rk: s for rk, s in spans.items() if s.owner == self.member and s.expires > now}
        self.owned = {rk: s for rk, s in self.owned.items() if rk in mine}
        for rk, s in mine.items():  # the store's view is the truth (a checkpoint moved its ETag)
            self.owned[rk] = s
        lows = self._ranges()
        for s in list(self.owned.values()):
            self._split(s, split_points(s.lo, s.hi, lows))
        spans, _ = self._rows()
        self.owned = {rk: s for rk, s in spans.items() if s.owner == self.member and s.expires > now}
        fewest, most = fair_share(len(spans), len(alive))
        for rk, s in list(self.owned.items()):  # hand over what others want, beyond the fewest
            if len(self.owned) > fewest and s.want and s.want != self.member and s.want in alive:
                s.owner, s.want, s.expires = "", "", 0.0
                self._write(s)
                del self.owned[rk]
        for rk, s in list(self.owned.items()):
            s.expires = now + self.lease_s
            if not self._write(s):
                del self.owned[rk]
        for rk, s in spans.items():  # claim spans without a live owner
            if len(self.owned) >= most:
                break
            if rk not in self.owned and (not s.owner or s.expires <= now):
                s.owner, s.want, s.expires = self.member, "", now + self.lease_s
                if self._write(s):
                    self.owned[rk] = s
        if len(self.owned) < fewest:  # ask the busiest owner for one
            counts: dict[str, int] = {}
            for s in spans.values():
                if s.owner and s.expires > now:
                    counts[s.owner] = counts.get(s.owner, 0) + 1
            busiest = max(counts, key=lambda m: counts[m], default=None)
            if busiest is not None and busiest != self.member and counts[busiest] > fewest:
                s = next(s for s in spans.values() if s.owner == busiest and s.expires > now)
                if not s.want:
                    s.want = self.member
                    self._write(s)
        self._beat = time.monotonic()

    def _split(self, s: Span, points: list[str]) -> None:
        """Split owned span ``s`` at ``points`` in one transaction: the pieces keep its cursor and owner."""
        if not points:
            return
        first = Span(s.lo, points[0], s.cursor, s.owner, s.expires, "", s.etag)
        ops: list[Any] = [("update", self._entity(first), {"mode": "replace", "etag": s.etag,
                                                            "match_condition": MatchConditions.IfNotModified})]
        for lo, hi in zip(points, [*points[1:], s.hi], strict=True):
            ops.append(("create", self._entity(Span(lo, hi, s.cursor, s.owner, s.expires, "", ""))))
        try:
            self.store.submit_transaction(ops)
        except (TableTransactionError, ResourceModifiedError, ResourceExistsError):
            pass  # someone else changed it: the rows are read again right after

    # --- reading ----------------------------------------------------------------------------------

    def _page(self, s: Span) -> ChangePage:
        feed = ChangeFeed(self.table, start=self.start, cursor=s.cursor or None, results_per_page=self.results_per_page,
                          lo=s.lo, hi=s.hi)
        return feed.read(self.feed._call(feed.body(None)))

    def _checkpoint(self, s: Span, cursor: str) -> bool:
        """Save ``cursor`` as span ``s``'s checkpoint; False when the span is no longer this member's."""
        s.cursor = cursor
        if self._write(s):
            return True
        spans, _ = self._rows()  # its ETag moved: someone asked for it, or it is another's now
        cur = spans.get(s.row)
        if cur is None or cur.owner != self.member:
            self.owned.pop(s.row, None)
            return False
        cur.cursor = cursor
        if self._write(cur):
            self.owned[s.row] = cur
            return True
        self.owned.pop(s.row, None)
        return False

    def pages(self) -> Iterator[GroupPage]:
        """The pages of the spans this member owns, in turn, until :meth:`close`; each span's cursor is
        checkpointed when the page after it is asked for. A round in which no span had a change waits
        ``poll_interval``."""
        while not self._closed:
            if time.monotonic() - self._beat >= self.heartbeat_s:
                self.heartbeat()
            got = False
            for s in list(self.owned.values()):
                page = self._page(s)
                yield GroupPage((s.lo, s.hi), page)
                if s.row in self.owned:
                    self._checkpoint(s, page.cursor)
                got = got or bool(page.records)
                if self._closed:
                    return
            if not got:
                time.sleep(self.poll_interval if self.owned else min(self.poll_interval * 4, self.heartbeat_s))

    def close(self) -> None:
        """Leave the group: give every owned span up (its last checkpoint stays) and drop this member's row."""
        self._closed = True
        for s in list(self.owned.values()):
            s.owner, s.want, s.expires = "", "", 0.0
            self._write(s)
        self.owned = {}
        try:
            self.store.delete_entity(self.pk, _MEMBER + self.member)
        except TableError:
            pass
