"""The cut of every table of a secondary cluster, on its coordinator (issue 35, ``docs/geo.md``). Pure data.

A table's applier (the holder of its source claim, :mod:`coordinator.map.claims`) publishes a cut ``T`` once
every range of the table holds every change of the source at or below ``T``; every read of the table is then
answered as of ``T``. A cut never moves back: a lower one (an applier that resumed from an older cursor) keeps
the higher. Each is kept in memory and persisted (``sourcecut/<table lower>`` → ``{"cut", "lag_s"}``) at most
every :data:`PERSIST_S`, so a new leader may start up to that far behind: still a cut every range has passed
(a range's position only grows), so reads stay consistent, only that much older until the next publish.

While a table has no cut its applier is copying it (``docs/geo.md``), and it notes how far after each page of
the source's scan (``{"start": the feed cursor noted before the scan, "next": the scan's continuation, "copied":
entities so far}``, under ``sourcecopy/<table lower>``, persisted at most every :data:`PERSIST_S` too): an
applier that takes the claim over goes on from there instead of copying the table again. The table's first cut
ends the copy and deletes its record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rangetable import feed_cursor
from rangetable.errors import TableError

CUT_PREFIX = b"sourcecut/"
COPY_PREFIX = b"sourcecopy/"
Writes = tuple[dict[bytes, Any], list[bytes]]  # meta-store puts and deletes
PERSIST_S = 1.0  # a cut is written to the meta store at most this often per table


def cut_key(table: str) -> bytes:
    """Meta-store key of a table's cut (case-insensitive)."""
    return CUT_PREFIX + table.lower().encode()


def copy_key(table: str) -> bytes:
    """Meta-store key of a table's first copy under way (case-insensitive)."""
    return COPY_PREFIX + table.lower().encode()


@dataclass(slots=True)
class Cut:
    """A table's cut: Timestamp ``cut`` (ticks), the lag its applier reported with it, when it was published
    (monotonic seconds; a cut loaded at a takeover counts from then)."""

    cut: int
    lag_s: float
    at: float


class SourceCuts:
    """The cuts of a secondary cluster's tables (see the module docstring)."""

    def __init__(self) -> None:
        self.cuts: dict[str, Cut] = {}  # table lower -> its cut
        self.version = 0  # moves with every change: the loop publishes the cuts when it moved
        self.alarmed: set[str] = set()  # tables whose lag is over the alarm threshold (table lower)
        self.copies: dict[str, dict[str, Any]] = {}  # table lower -> its first copy's progress (no cut yet)
        self._saved: dict[bytes, float] = {}  # meta-store key -> when it was last written (cuts and copies)

    def load(self, items: list[tuple[bytes, Any]], now: float) -> None:
        """Install the cuts and copies under way of the meta store at a takeover at ``now``."""
        self.cuts, self.copies, self._saved = {}, {}, {}
        for k, v in items:
            if k.startswith(CUT_PREFIX) and isinstance(v, dict) and type(v.get("cut")) is int:
                self.cuts[k[len(CUT_PREFIX):].decode()] = Cut(v["cut"], float(v.get("lag_s") or 0.0), now)
            elif k.startswith(COPY_PREFIX) and isinstance(v, dict):
                self.copies[k[len(COPY_PREFIX):].decode()] = v
        self.version += 1

    def note_copy(self, table: str, progress: Any, now: float) -> dict[bytes, Any]:
        """Keep how far a table's first copy got (see the module docstring); returns the meta-store puts due."""
        if not (isinstance(progress, dict) and isinstance(progress.get("start"), str)
                and type(progress.get("copied")) is int and isinstance(progress.get("next"), list | None)):
            raise TableError("InvalidInput", "a copy's progress is {start: cursor, next: token, copied: n}")
        key = table.lower()
        if key in self.cuts:
            return {}  # copied already: a late report of an applier that lost the claim
        self.copies[key] = {"start": progress["start"], "next": progress["next"], "copied": progress["copied"],
                            **{k: progress[k] for k in ("rejoin", "sealed") if type(progress.get(k)) is int}}
        return self._due(copy_key(key), self.copies[key], now)

    def publish(self, table: str, cut: Any, lag_s: Any, now: float) -> Writes:
        """Make ``cut`` the table's cut at ``now`` (a lower one keeps the higher) with the reported lag; returns
        the meta-store writes due (none when the last was written less than :data:`PERSIST_S` ago; the first
        cut also deletes the copy's record)."""
        if type(cut) is not int or cut < 0:
            raise TableError("InvalidInput", "cut must be a Timestamp in ticks")
        if isinstance(lag_s, bool) or not isinstance(lag_s, int | float) or lag_s < 0:
            raise TableError("InvalidInput", "lag_s must be a number of seconds")
        key = table.lower()
        cur = self.cuts.get(key)
        done: list[bytes] = []
        if cur is None:
            cur = self.cuts[key] = Cut(cut, float(lag_s), now)
            if self.copies.pop(key, None) is not None:
                self._saved.pop(copy_key(key), None)
                done.append(copy_key(key))
        elif cut >= cur.cut:
            cur.cut, cur.lag_s, cur.at = cut, float(lag_s), now
        else:
            cur.at = now  # its applier is alive, behind the cut it resumed below
        self.version += 1
        return self._due(cut_key(key), {"cut": cur.cut, "lag_s": round(cur.lag_s, 3)}, now), done

    def install(self, cuts: Any, now: float, rejoin: Any = None) -> Writes:
        """Become a secondary at ``cuts`` (``{table: cut}``: a planned failover's old primary, which holds the new
        one's state at those cuts) or, with ``rejoin`` (``{table: cut}``: a forced failover's old primary, which
        holds it but for its own changes after them), with a copy of what differs under way from each cut (see
        :meth:`frontend.geo.applier.TableApplier.rejoin`); they replace every cut and copy kept; returns the
        meta-store writes. A table in neither is copied whole."""
        for given in (cuts, rejoin or {}):
            if not (isinstance(given, dict) and all(isinstance(t, str) and type(c) is int and c >= 0
                                                    for t, c in given.items())):
                raise TableError("InvalidInput", "cuts must be {table: Timestamp in ticks}")
        deletes = self.clear()
        self.cuts = {t.lower(): Cut(c, 0.0, now) for t, c in cuts.items()}
        self.copies = {t.lower(): {"start": feed_cursor.encode((c, None)), "next": None, "copied": 0, "rejoin": c}
                       for t, c in (rejoin or {}).items()}
        puts: dict[bytes, Any] = {}
        for t, c in self.cuts.items():
            self._saved[cut_key(t)] = now
            puts[cut_key(t)] = {"cut": c.cut, "lag_s": 0.0}
        for t, progress in self.copies.items():
            self._saved[copy_key(t)] = now
            puts[copy_key(t)] = progress
        return puts, [k for k in deletes if k not in puts]

    def clear(self) -> list[bytes]:
        """No table has a cut any more (a secondary became a primary); returns the meta-store keys to delete."""
        gone = [cut_key(t) for t in self.cuts] + [copy_key(t) for t in self.copies]
        self.cuts, self.copies, self._saved, self.alarmed = {}, {}, {}, set()
        self.version += 1
        return gone

    def forget(self, table: str) -> list[bytes]:
        """The table is gone: its cut and copy with it; returns the meta-store keys to delete."""
        if self.cuts.pop(table.lower(), None) is not None:
            self.version += 1
        self.copies.pop(table.lower(), None)
        gone = [cut_key(table), copy_key(table)]
        for k in gone:
            self._saved.pop(k, None)
        return gone

    def _due(self, key: bytes, value: dict[str, Any], now: float) -> dict[bytes, Any]:
        """``{key: value}`` to write when ``key`` was last written :data:`PERSIST_S` or more ago, else nothing."""
        if now - self._saved.get(key, float("-inf")) < PERSIST_S:
            return {}
        self._saved[key] = now
        return {key: value}

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
