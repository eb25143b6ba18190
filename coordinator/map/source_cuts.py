"""The cut of every table of a secondary cluster, on its coordinator (issue 35, ``docs/geo.md``). Pure data.

A table's applier (the holder of its source claim, :mod:`coordinator.map.claims`) publishes a cut ``T`` once
every range of the table holds every change of the source at or below ``T``; every read of the table is then
answered as of ``T``. A cut never moves back: a lower one (an applier that resumed from an older cursor) keeps
the higher. Each is kept in memory and persisted (``sourcecut/<table lower>`` → ``{"cut", "lag_s"}``) at most
every :data:`PERSIST_S`, so a new leader may start up to that far behind: still a cut every range has passed
(a range's position only grows), so reads stay consistent, only that much older until the next publish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rangetable.errors import TableError

CUT_PREFIX = b"sourcecut/"
PERSIST_S = 1.0  # a cut is written to the meta store at most this often per table


def cut_key(table: str) -> bytes:
    """Meta-store key of a table's cut (case-insensitive)."""
    return CUT_PREFIX + table.lower().encode()


@dataclass(slots=True)
class Cut:
    """A table's cut: Timestamp ``cut`` (ticks), the lag its applier reported with it, when it was published
    (monotonic seconds; a cut loaded at a takeover counts from then) and when last persisted."""

    cut: int
    lag_s: float
    at: float
    persisted: float = float("-inf")


class SourceCuts:
    """The cuts of a secondary cluster's tables (see the module docstring)."""

    def __init__(self) -> None:
        self.cuts: dict[str, Cut] = {}  # table lower -> its cut
        self.version = 0  # moves with every change: the loop publishes the cuts when it moved
        self.alarmed: set[str] = set()  # tables whose lag is over the alarm threshold (table lower)

    def load(self, items: list[tuple[bytes, Any]], now: float) -> None:
        """Install the cuts of the meta store at a takeover at ``now``."""
        self.cuts = {}
        for k, v in items:
            if k.startswith(CUT_PREFIX) and isinstance(v, dict) and type(v.get("cut")) is int:
                self.cuts[k[len(CUT_PREFIX):].decode()] = Cut(v["cut"], float(v.get("lag_s") or 0.0), now)
        self.version += 1

    def publish(self, table: str, cut: Any, lag_s: Any, now: float) -> dict[bytes, Any]:
        """Make ``cut`` the table's cut at ``now`` (a lower one keeps the higher) with the reported lag; returns
        the meta-store puts due (none when the last was written less than :data:`PERSIST_S` ago)."""
        if type(cut) is not int or cut < 0:
            raise TableError("InvalidInput", "cut must be a Timestamp in ticks")
        if isinstance(lag_s, bool) or not isinstance(lag_s, int | float) or lag_s < 0:
            raise TableError("InvalidInput", "lag_s must be a number of seconds")
        key = table.lower()
        cur = self.cuts.get(key)
        if cur is None:
            cur = self.cuts[key] = Cut(cut, float(lag_s), now)
        elif cut >= cur.cut:
            cur.cut, cur.lag_s, cur.at = cut, float(lag_s), now
        else:
            cur.at = now  # its applier is alive, behind the cut it resumed below
        self.version += 1
        if now - cur.persisted < PERSIST_S:
            return {}
        cur.persisted = now
        return {cut_key(key): {"cut": cur.cut, "lag_s": round(cur.lag_s, 3)}}

    def forget(self, table: str) -> list[bytes]:
        """The table is gone: its cut with it; returns the meta-store key to delete."""
        if self.cuts.pop(table.lower(), None) is not None:
            self.version += 1
        return [cut_key(table)]

    def wire(self) -> dict[str, int]:
        """table lower -> cut: what frontends read at."""
        return {t: c.cut for t, c in self.cuts.items()}

    def lag_of(self, table: str, now: float) -> float | None:
        """How far the table is behind its source at ``now``: the lag last reported, plus the time since when
        nobody published (the applier stopped: the table falls behind by the clock); None without a cut."""
        cur = self.cuts.get(table.lower())
        if cur is None:
            return None
        return cur.lag_s + max(0.0, now - cur.at)

    def judge(self, tables: list[str], threshold_s: float, now: float) -> list[dict[str, Any]]:
        """The alarm: the tables (of ``tables``, the user tables of the secondary) whose lag is over
        ``threshold_s`` at ``now`` — a table without a cut counts as behind once it has had one, and never
        before — kept in :attr:`alarmed`; returns the events of tables that crossed it either way since the last
        judgement (``geo_lag_alarm`` with the lag, ``geo_lag_ok``)."""
        events = []
        over = set()
        for t in tables:
            lag = self.lag_of(t, now)
            if lag is not None and lag > threshold_s:
                over.add(t.lower())
                if t.lower() not in self.alarmed:
                    events.append({"kind": "geo_lag_alarm", "table": t, "lag_s": round(lag, 1),
                                   "threshold_s": threshold_s})
        for t in sorted(self.alarmed - over):
            events.append({"kind": "geo_lag_ok", "table": t})
        self.alarmed = over
        return events

    def status(self, tables: list[str], now: float) -> list[dict[str, Any]]:
        """Per table (every user table of the secondary): its cut (None before the first) and lag."""
        out = []
        for t in tables:
            cur = self.cuts.get(t.lower())
            lag = self.lag_of(t, now)
            out.append({"table": t, "cut": None if cur is None else cur.cut,
                        "lag_s": None if lag is None else round(lag, 3), "alarm": t.lower() in self.alarmed})
        return out

    def last_sync(self, tables: list[str]) -> int | None:
        """The lowest cut over ``tables`` (the account's LastSyncTime, ticks); None when one has no cut yet or
        there is no table."""
        cuts = [self.cuts.get(t.lower()) for t in tables]
        if not cuts or any(c is None for c in cuts):
            return None
        return min(c.cut for c in cuts if c is not None)
