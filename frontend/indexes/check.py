"""Checking an index against its base table: what the entries should be, what they are, and where they differ.

Pure; its applier runs it (:meth:`frontend.indexes.applier.Applier.check`), at the live edge of the base table's
feed with cursor Timestamp ``C``: every base change at or below ``C`` is applied and nothing else writes the
index meanwhile. A base row read with a Timestamp above ``C`` changed after ``C``: its entries are *in flight*,
not a difference, and are left out on both sides. Entries and expected entries are bucketed by the **base
range** (of the map) their base key lies in, and each range is summed (a count and a hash over its sorted
``(entry key, kept value)``); only ranges whose sums differ are compared key by key, into three kinds:

* ``missing`` — an entry the base row makes that the index lacks;
* ``extra`` — an entry of the index no base row makes (its row may have been deleted after ``C``: a *second
  look* at a later cursor (:func:`persisting`) keeps only the differences that are still there);
* ``wrong`` — an entry whose kept value differs from the base row's.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rangetable.index_def import IndexDef
from rangetable.index_keys import base_key, entry_ops

KINDS = ("missing", "extra", "wrong")
LISTED = 100  # keys of each kind a report lists
EntryKey = tuple[str, str]  # (entry PartitionKey, entry RowKey)
BaseKey = tuple[str, str]


def packed(value: dict[str, Any]) -> bytes:
    """A kept value in a canonical form (properties sorted; msgpack keeps a float's bits)."""
    return msgpack.packb(sorted((k, list(v)) for k, v in value.items()), use_bin_type=True)


@dataclass
class Look:
    """One look at an index: the entries expected from the base rows and those found, by entry key (values
    packed), without the base keys in flight."""

    expected: dict[EntryKey, bytes] = field(default_factory=dict)
    values: dict[EntryKey, dict[str, Any]] = field(default_factory=dict)  # the expected kept values, unpacked
    actual: dict[EntryKey, bytes] = field(default_factory=dict)
    in_flight: set[BaseKey] = field(default_factory=set)
    base_rows: int = 0  # base rows read at or below the cursor


def look(idx: IndexDef, rows: Iterable[list], entries: Iterable[list], cursor_ts: int) -> Look:
    """A look from base rows and index entries (both ``[pk, rk, ts, props]``; the progress row, PartitionKey
    ``""``, is skipped) read once the index applied every base change at or below ``cursor_ts``."""
    out = Look()
    for pk, rk, ts, props in rows:
        if ts > cursor_ts:
            out.in_flight.add((pk, rk))
            continue
        out.base_rows += 1
        for epk, erk, kept in entry_ops(idx, pk, rk, None, props):
            out.expected[(epk, erk)] = packed(kept or {})
            out.values[(epk, erk)] = kept or {}
    for epk, erk, _, props in entries:
        if epk != "" and base_key(erk) not in out.in_flight:
            out.actual[(epk, erk)] = packed(props)
    return out


def range_of(lows: list[str], key: EntryKey) -> int:
    """The index of the base range (by the ranges' sorted low PartitionKeys) holding an entry's base key."""
    return max(bisect.bisect_right(lows, base_key(key[1])[0]) - 1, 0)


def sums(items: dict[EntryKey, bytes], lows: list[str]) -> list[tuple[int, str]]:
    """``(count, hash)`` of each base range's entries."""
    hashes = [hashlib.blake2b(digest_size=16) for _ in lows]
    counts = [0] * len(lows)
    for key in sorted(items):
        i = range_of(lows, key)
        counts[i] += 1
        hashes[i].update(msgpack.packb([key[0], key[1], items[key]], use_bin_type=True))
    return [(c, h.hexdigest()) for c, h in zip(counts, hashes, strict=True)]


@dataclass(frozen=True, slots=True)
class Diff:
    """One difference: its kind, the entry's key, and the kept value the entry should have (None: none)."""

    kind: str
    key: EntryKey
    value: dict[str, Any] | None = None

    @property
    def base(self) -> BaseKey:
        """The base key of the entry."""
        return base_key(self.key[1])


def differences(lk: Look, lows: list[str]) -> tuple[list[int], list[Diff]]:
    """The base ranges whose sums differ, and the differences in them (in key order)."""
    differing = [i for i, (e, a) in enumerate(zip(sums(lk.expected, lows), sums(lk.actual, lows), strict=True))
                 if e != a]
    wanted = set(differing)
    out: list[Diff] = []
    for key in sorted(lk.expected.keys() | lk.actual.keys()):
        if range_of(lows, key) not in wanted:
            continue
        exp, act = lk.expected.get(key), lk.actual.get(key)
        if act is None:
            out.append(Diff("missing", key, lk.values[key]))
        elif exp is None:
            out.append(Diff("extra", key))
        elif exp != act:
            out.append(Diff("wrong", key, lk.values[key]))
    return differing, out


def persisting(first: list[Diff], second: list[Diff]) -> list[Diff]:
    """The differences of a second look whose entry differed in the first look too."""
    before = {d.key for d in first}
    return [d for d in second if d.key in before]


def fixes(diffs: list[Diff]) -> dict[EntryKey, dict[str, Any] | None]:
    """The entry writes that repair ``diffs``: the right value put, an extra entry deleted."""
    return {d.key: d.value for d in diffs}


def report(diffs: list[Diff]) -> dict[str, Any]:
    """The report's ``differences`` and the first :data:`LISTED` base keys ``[pk, rk]`` of each kind."""
    out: dict[str, Any] = {"differences": len(diffs)}
    for kind in KINDS:
        out[kind] = [list(d.base) for d in diffs if d.kind == kind][:LISTED]
    return out

