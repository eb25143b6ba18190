"""The change-feed checker: what readers of a table's feed got, against the history of the writes.

A drill's feed readers (:mod:`cli.workload.feed_readers`) each follow one chain of cursors — resumed after
restarts and kills — and keep every record (:class:`FeedRecord`) and every resolved time (:class:`Resolved`)
they got, in order (:class:`ReaderLog`). :func:`check_feed` checks each chain against the workload's history
(:mod:`cli.workload.verify.history`; values are unique per write, so a record's value names its write):

``lost``
    an acknowledged write (key, value) is not in the chain; so is a write whose answer never came but
    that a read returned (it was applied, hence committed, hence in the feed).
``duplicated``
    a position, or a write's (key, value), came twice.
``foreign``
    a record's value is one no operation that may have applied (``ok`` or ``unknown``) wrote on its key;
    a key has more delete records than delete operations that may have applied.
``order``
    the chain's positions ``(Timestamp, entity key)`` do not increase; or, per key, the records are not an
    order the writes can have taken effect in: a record's kind or its write's precondition (a cas's
    expected value, an insert's absence) does not follow the record before it, or no linearization point
    of each write inside its interval keeps the feed's order and the reads' values (each read of a value
    falls between its record and the next one).
``watermark``
    a record at or below a resolved time came after it, or a resolved time moved backwards.
``behind``
    the chain never got a resolved time past the last acknowledged write (its figures are incomplete).

A failure names the reader, the key, its records around the spot and a window on the history clock for
:func:`feed_lines`, which adds the faults injected in it, as the drills' other explanations do.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cli.workload.verify.explain import WINDOW_MARGIN_S, window_lines
from cli.workload.verify.history import Op, freeze
from rangetable import feed_cursor
from rangetable.edm import ticks_to_datetime

KINDS = ("lost", "duplicated", "foreign", "order", "watermark", "behind")
GONE = ("delete", "expire")  # record kinds that leave the entity absent
SHOWN = 3  # records shown on each side of a failure's spot


@dataclass(frozen=True, slots=True)
class FeedRecord:
    """One record as a reader got it: the entity's ``value`` (its property ``v``; None for a delete or an
    expiry), its Timestamp in ticks, its cursor (the position ``(Timestamp, entity key)``) and ``seen``, when
    the reader got it on the history's clock."""

    key: tuple[str, str]
    kind: str
    value: Any
    ts: int
    cursor: str
    seen: float

    def to_list(self) -> list[Any]:
        """A JSON-ready form (:meth:`from_list` reads it back)."""
        return [self.key[0], self.key[1], self.kind, self.value, self.ts, self.cursor, round(self.seen, 4)]

    @classmethod
    def from_list(cls, x: Sequence[Any]) -> FeedRecord:
        """The record of :meth:`to_list`."""
        return cls((x[0], x[1]), x[2], x[3], int(x[4]), x[5], float(x[6]))


class Resolved(NamedTuple):
    """A resolved time a reader got, after its first ``at`` records, at ``seen`` (history clock): at least
    ``ticks`` and at most ``high`` (equal when the reader knows it exactly)."""

    at: int
    ticks: int
    high: int
    seen: float


@dataclass
class ReaderLog:
    """Everything one reader's chain of cursors got, in order, and how often it was restarted or killed."""

    name: str
    records: list[FeedRecord] = field(default_factory=list)
    resolved: list[Resolved] = field(default_factory=list)
    restarts: int = 0
    kills: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def add_page(self, records: Iterable[FeedRecord], resolved: Sequence[int] | None, seen: float) -> None:
        """Take one page: its records, then its resolved time as ``(at least, at most)`` (None: not at the
        live edge)."""
        self.records.extend(records)
        if resolved is not None:
            self.resolved.append(Resolved(len(self.records), resolved[0], resolved[1], seen))

    @property
    def last_resolved(self) -> int | None:
        """The highest resolved time got so far."""
        return max((r.ticks for r in self.resolved), default=None)


@dataclass
class FeedFailure:
    """One thing wrong: its ``kind`` (:data:`KINDS`), reader, key, explanation and history-clock window."""

    kind: str
    reader: str
    key: Any
    text: str
    window: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"kind": self.kind, "reader": self.reader, "key": self.key, "text": self.text,
                "window": [round(self.window[0], 3), round(self.window[1], 3)]}


@dataclass
class FeedResult:
    """The verdict of :func:`check_feed`: counts per kind over every reader, and the failures."""

    readers: int
    records: int
    counts: dict[str, int]
    failures: list[FeedFailure]

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what the drills' reports carry under ``"feed"``)."""
        return {"readers": self.readers, "records": self.records, **self.counts, "passed": self.ok,
                "failures": [f.to_dict() for f in self.failures]}


class _History:
    """The history indexed for the checks."""

    def __init__(self, history: Iterable[Op]) -> None:
        self.writers: dict[tuple[Hashable, Any], list[Op]] = {}
        self.deletes: dict[Hashable, list[Op]] = {}
        self.reads: dict[Hashable, list[Op]] = {}
        self.keys: set[Hashable] = set()
        for op in history:
            key = freeze(op.key)
            self.keys.add(key)
            if op.kind == "read":
                if op.outcome == "ok" and op.value is not None:
                    self.reads.setdefault(key, []).append(op)
            elif op.value is None:
                if op.may_have_applied():
                    self.deletes.setdefault(key, []).append(op)
            else:
                self.writers.setdefault((key, freeze(op.value)), []).append(op)

    def applied(self, key: Hashable, value: Any) -> Op | None:
        """The write of ``value`` on ``key`` that may have applied (``ok`` or ``unknown``), if any."""
        return next((o for o in self.writers.get((key, freeze(value)), []) if o.may_have_applied()), None)

    def must_appear(self) -> Iterable[tuple[Hashable, Any, Op, Op | None]]:
        """(key, value, write, read proving it) of each write that must be in the feed: the acknowledged
        ones, and those with no answer that a read returned."""
        for (key, value), ops in self.writers.items():
            op = next((o for o in ops if o.outcome == "ok"), None)
            if op is not None:
                yield key, value, op, None
                continue
            op = next((o for o in ops if o.outcome == "unknown"), None)
            read = next((r for r in self.reads.get(key, []) if freeze(r.value) == value), None)
            if op is not None and read is not None:
                yield key, value, op, read


def _when(ts: int) -> str:
    return ticks_to_datetime(ts).strftime("%H:%M:%S.%f") + f"{ts % 10}"


def describe_record(i: int, r: FeedRecord, op: Op | None = None) -> str:
    """``[12] replace 't1-3' ts=12:00:01.2345678 seen t=3.21 s <- #40 write 't1-3' ok [...]``."""
    value = "" if r.kind in GONE and r.value is None else f" {r.value!r}"
    by = f"  <- {op.describe()}" if op is not None else ""
    return f"[{i}] {r.kind}{value} ts={_when(r.ts)} seen t={r.seen:.2f} s{by}"


class _Chain:
    """The checks of one reader's chain."""

    def __init__(self, log: ReaderLog, h: _History, ignore: frozenset[str]) -> None:
        self.log = log
        self.h = h
        self.ignore = ignore
        self.failures: list[FeedFailure] = []
        self.counts = dict.fromkeys(KINDS, 0)
        self.per_key: dict[Hashable, list[int]] = {}  # indices of the records kept (not duplicates, not ignored)
        self.value_at: dict[tuple[Hashable, Any], int] = {}

    def fail(self, kind: str, key: Any, text: str, lo: float, hi: float, count: int = 1) -> None:
        self.counts[kind] += count
        self.failures.append(FeedFailure(kind, self.log.name, key, text, (lo, hi)))

    def op_of(self, i: int) -> Op | None:
        r = self.log.records[i]
        return None if r.kind in GONE else self.h.applied(r.key, r.value)

    def began(self, i: int) -> float:
        """When the write of record ``i`` began at the earliest (-inf when no operation wrote it)."""
        r = self.log.records[i]
        if r.kind in GONE:
            return min((o.start for o in self.h.deletes.get(r.key, [])), default=-math.inf)
        op = self.op_of(i)
        return -math.inf if op is None else op.start

    def around(self, key: Hashable, spot: int, before: int = SHOWN, after: int = SHOWN) -> list[str]:
        """The key's kept records around its ``spot``-th one, described."""
        idx = self.per_key.get(key, [])
        lo, hi = max(0, spot - before), min(len(idx), spot + after + 1)
        lines = [f"    {describe_record(i, self.log.records[i], self.op_of(i))}" for i in idx[lo:hi]]
        if not idx:
            lines.append("    (no record of this key)")
        return lines

    def run(self, until: int | None) -> None:
        self._positions()
        self._foreign()
        self._lost()
        for key in self.per_key:
            self._order(key)
        self._watermarks()
        last = self.log.last_resolved
        if until is not None and (last is None or last < until):
            got = "no resolved time" if last is None else f"resolved time {_when(last)}"
            end = max((r.seen for r in self.log.records), default=0.0)
            self.fail("behind", None, f"reader {self.log.name} got {got}, not past the last acknowledged write at "
                      f"{_when(until)}: what it read is incomplete", end, end)

    def _positions(self) -> None:
        """Duplicates (a position or a write's value again) and positions that do not increase."""
        seen_pos: dict[feed_cursor.Position, int] = {}
        prev: tuple[int, feed_cursor.Position] | None = None
        recs = self.log.records
        for i, r in enumerate(recs):
            pos = feed_cursor.decode(r.cursor)
            first = seen_pos.get(pos)
            if first is None and r.kind not in GONE and r.key[0] not in self.ignore:
                first = self.value_at.get((r.key, freeze(r.value)))
            if first is not None:
                self.fail("duplicated", r.key, f"key {r.key!r}: the same change twice in one chain of cursors\n"
                          f"    {describe_record(first, recs[first])}\n    {describe_record(i, r)}",
                          recs[first].seen, r.seen)
                continue
            seen_pos[pos] = i
            if prev is not None and not feed_cursor.after(pos, prev[1]):
                p = recs[prev[0]]
                self.fail("order", r.key, f"key {r.key!r}: a record at a position not after the one before it\n"
                          f"    {describe_record(prev[0], p)}\n    {describe_record(i, r)}", p.seen, r.seen)
            prev = (i, pos)
            if r.key[0] in self.ignore:
                continue
            self.per_key.setdefault(r.key, []).append(i)
            if r.kind not in GONE:
                self.value_at[(r.key, freeze(r.value))] = i

    def _foreign(self) -> None:
        """Values no write that may have applied wrote, and delete records beyond the deletes."""
        recs = self.log.records
        for key, idx in self.per_key.items():
            gone = [n for n, i in enumerate(idx) if recs[i].kind in GONE]
            allowed = len(self.h.deletes.get(key, []))
            if len(gone) > allowed:
                spot = gone[allowed]
                r = recs[idx[spot]]
                why = "the key is not in the history" if key not in self.h.keys else \
                    f"only {allowed} delete operation(s) on it may have applied"
                self.fail("foreign", key, f"key {key!r}: {len(gone)} delete/expire records, but {why}\n"
                          + "\n".join(self.around(key, spot)), r.seen - WINDOW_MARGIN_S, r.seen,
                          len(gone) - allowed)
            for n, i in enumerate(idx):
                r = recs[i]
                if r.kind in GONE or self.h.applied(key, r.value) is not None:
                    continue
                others = self.h.writers.get((key, freeze(r.value)), [])
                why = ("written only by operations answered as failed: " + "; ".join(o.describe() for o in others)
                       if others else "no operation wrote it" if key in self.h.keys else
                       "no operation touched this key")
                prev = recs[idx[n - 1]].seen if n else r.seen - WINDOW_MARGIN_S
                self.fail("foreign", key, f"key {key!r}: a record of a value no operation wrote ({why})\n"
                          + "\n".join(self.around(key, n)), prev, r.seen)

    def _lost(self) -> None:
        """Writes that must be in the chain and are not."""
        recs = self.log.records
        end = max((r.seen for r in recs), default=0.0)
        for key, value, op, read in self.h.must_appear():
            if (key, value) in self.value_at or (isinstance(key, tuple) and key and key[0] in self.ignore):
                continue
            idx = self.per_key.get(key, [])
            # where it belongs: before the first record of a write invoked after it was answered
            spot = next((n for n, i in enumerate(idx) if self.began(i) > op.end_time), len(idx))
            hi = recs[idx[spot]].seen if spot < len(idx) else end
            what = "an acknowledged write" if read is None else \
                f"a write whose answer never came but that a read returned ({read.describe()})"
            self.fail("lost", key, f"key {key!r}: {what} is not in the feed\n    {op.describe()}\n"
                      f"  its key's records where it belongs:\n" + "\n".join(self.around(key, spot, SHOWN, SHOWN - 1)),
                      op.start, max(hi, op.start))

    def _order(self, key: Hashable) -> None:
        """Per key: each record follows the one before it, and the writes can have taken effect in the
        feed's order (one failure per key at most)."""
        recs = self.log.records
        idx = self.per_key[key]
        ops = [self.op_of(i) for i in idx]
        prev: FeedRecord | None = None
        for n, i in enumerate(idx):
            r, op = recs[i], ops[n]
            present = prev is not None and prev.kind not in GONE
            why = ""
            if r.kind == "insert" and present:
                why = "an insert of an entity the record before it left present"
            elif r.kind in ("replace", "merge") and not present:
                why = f"a {r.kind} of an entity absent after the record before it"
            elif op is not None and op.kind == "cas" and (not present or prev is None
                                                          or freeze(prev.value) != freeze(op.expected)):
                why = f"a cas that expected {op.expected!r}, after a record that left " + \
                      (repr(prev.value) if present and prev is not None else "it absent")
            elif op is not None and op.kind == "insert" and present:
                why = "an insert operation's write after a record that left the entity present"
            elif op is not None and op.kind == "update" and not present:
                why = "an update operation's write after a record that left the entity absent"
            if why:
                lo = recs[idx[n - 1]].seen if n else r.seen
                self.fail("order", key, f"key {key!r}: {why}\n" + "\n".join(self.around(key, n, SHOWN, 1)),
                          min(lo, op.start if op else lo), r.seen)
                return
            prev = r
        self._intervals(key, idx, ops)

    def _intervals(self, key: Hashable, idx: list[int], ops: list[Op | None]) -> None:
        """Whether each write can take effect inside its interval in the feed's order, each read of a
        record's value falling between that record and the next."""
        n = len(idx)
        recs = self.log.records
        lo = [-math.inf] * n
        hi = [math.inf] * n
        lo_why: list[str] = [""] * n
        hi_why: list[str] = [""] * n
        deletes = self.h.deletes.get(key, [])
        for k, op in enumerate(ops):
            if op is not None:
                lo[k], lo_why[k] = op.start, f"its write began at t={op.start:.3f}: {op.describe()}"
                hi[k], hi_why[k] = op.end_time, f"its write was answered at t={op.end_time:.3f}: {op.describe()}"
            elif recs[idx[k]].kind in GONE and deletes:
                d = min(deletes, key=lambda o: o.start)
                lo[k], lo_why[k] = d.start, f"no delete began before t={d.start:.3f}: {d.describe()}"
        spot = {freeze(recs[i].value): k for k, i in enumerate(idx) if recs[i].kind not in GONE}
        for rd in self.h.reads.get(key, []):
            if (k := spot.get(freeze(rd.value), -1)) < 0:
                continue
            if rd.end_time < hi[k]:
                hi[k], hi_why[k] = rd.end_time, f"a read of its value was answered at t={rd.end_time:.3f}: " \
                                                f"{rd.describe()}"
            if k + 1 < n and rd.start > lo[k + 1]:
                lo[k + 1], lo_why[k + 1] = rd.start, f"a read of the value before it began at t={rd.start:.3f}: " \
                                                     f"{rd.describe()}"
        t, by = -math.inf, -1
        for k in range(n):
            if lo[k] > t:
                t, by = lo[k], k
            if t > hi[k]:
                first, last = recs[idx[by]], recs[idx[k]]
                text = (f"key {key!r}: the feed's order is not one the writes can have taken effect in: record "
                        f"[{idx[k]}] must take effect by t={hi[k]:.3f} ({hi_why[k]}), but comes after record "
                        f"[{idx[by]}], which cannot take effect before t={t:.3f} ({lo_why[by]})\n"
                        + "\n".join(self.around(key, k, min(k - by + 1, 2 * SHOWN), 1)))
                self.fail("order", key, text, min(lo[k], hi[k]), max(first.seen, last.seen))
                return

    def _watermarks(self) -> None:
        """No record at or below a resolved time after it; resolved times never move backwards."""
        recs = self.log.records
        low = [math.inf] * (len(recs) + 1)  # low[i]: the lowest Timestamp of records[i:]
        for i in range(len(recs) - 1, -1, -1):
            low[i] = min(low[i + 1], recs[i].ts)
        prev: Resolved | None = None  # the highest resolved time so far (its lower bound)
        for res in self.log.resolved:
            if prev is not None and res.high < prev.ticks:
                self.fail("watermark", None, f"reader {self.log.name}: resolved time {_when(res.high)} "
                          f"(t={res.seen:.2f} s) after {_when(prev.ticks)} (t={prev.seen:.2f} s): it moved backwards",
                          prev.seen, res.seen)
            if prev is None or res.ticks > prev.ticks:
                prev = res
            if low[res.at] > res.ticks:
                continue
            i = next(j for j in range(res.at, len(recs)) if recs[j].ts <= res.ticks)
            r = recs[i]
            self.fail("watermark", r.key, f"key {r.key!r}: a record at or below resolved time {_when(res.ticks)} "
                      f"(got at t={res.seen:.2f} s, after record [{res.at - 1}]) came after it\n"
                      f"    {describe_record(i, r, self.op_of(i))}", res.seen, r.seen)


def check_feed(history: Iterable[Op], readers: Sequence[ReaderLog], *, until: int | None = None,
               ignore: Iterable[str] = ()) -> FeedResult:
    """Check each reader's chain against ``history`` (see the module docstring). ``until``: the Timestamp
    (ticks) of the last acknowledged write, which every chain's resolved time must pass; ``ignore``:
    PartitionKeys that are not the workload's (rows written outside the history, unchecked)."""
    h = _History(history)
    skip = frozenset(ignore)
    counts = dict.fromkeys(KINDS, 0)
    failures: list[FeedFailure] = []
    for log in readers:
        chain = _Chain(log, h, skip)
        chain.run(until)
        failures += chain.failures
        for k, v in chain.counts.items():
            counts[k] += v
    return FeedResult(len(readers), sum(len(r.records) for r in readers), counts, failures)


def feed_summary(v: dict[str, Any]) -> str:
    """The drills' one-line feed check: readers, restarts and kills, records, and the count of each failure."""
    return (f"feed: {v['readers']} readers ({v.get('restarts', 0)} restarts, {v.get('kills', 0)} kills), "
            f"{v['records']} records checked: lost {v['lost']}, duplicated {v['duplicated']}, foreign values "
            f"{v['foreign']}, order violations {v['order']}, watermark violations {v['watermark']}"
            + (f", {v['behind']} readers behind" if v.get("behind") else ""))


def feed_lines(v: dict[str, Any], faults: Iterable[dict[str, Any]] = (), indent: str = "  ",
               limit: int = 5) -> list[str]:
    """The explanation of a failed feed check (empty when it passed): per failure, its kind, reader and key,
    the records, and the faults injected in its window (the drill's and the readers' own restarts and kills)."""
    faults = sorted([*faults, *v.get("events", [])], key=lambda f: f["t"])
    lines: list[str] = []
    fails = v.get("failures", [])
    for f in fails[:limit]:
        head, *rest = f["text"].splitlines()
        lines.append(f"feed FAIL: {f['kind'].upper()} (reader {f['reader']}) {head}")
        lines += [indent + x for x in rest]
        lines += window_lines(faults, f["window"], indent)
    if len(fails) > limit:
        lines.append(f"{indent}… and {len(fails) - limit} more feed failures")
    if fails and v.get("journals"):
        lines.append(f"feed readers' journals kept in {', '.join(v['journals'])}")
    return lines
