"""The key-space heatmap: a pure model of load over time, laid out by key range.

Like Bigtable's Key Visualizer: x is time, y is the key space — tables in name order, then each
table's key space in PartitionKey order — and a cell's colour is the load (requests/s) of the range
that held that slice of the key space at that time.

The key space is cut into **rows** at every range boundary seen in the window: a range that split
at ``m`` during the window makes two rows, ``[low, m)`` and ``[m, high)``; before the split both
rows show the old range's load, after it each shows its own half's. A merge is the same in reverse.
So a row is never coarser than any range of the window, and a hot key or an append-only pattern
keeps its place on the y axis through splits, merges and moves.

Nothing here does I/O or reads the clock: :class:`History` gets each poll's time, ranges and loads.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HEIGHT_MODES = ("size", "even")


@dataclass(frozen=True)
class Span:
    """One range of the map at one time: its table, bounds ``[low, high)`` (None = unbounded) and id."""

    table: str
    low: str
    high: str | None
    rid: str


def ops_per_second(load: Mapping[str, Any]) -> float:
    """A range's load as one number: reads/s + writes/s + requests refused as busy per second
    (a refused request is demand the range could not serve)."""
    return sum(float(load.get(k, 0.0) or 0.0) for k in ("reads_s", "writes_s", "busy_s"))


def table_key(name: str) -> str:
    """Tables are ordered (and told apart) by their lower-case name, as the map does."""
    return name.lower()


def layout_of(ranges: Iterable[Mapping[str, Any]]) -> tuple[Span, ...]:
    """The ranges of a map as spans in key-space order (table, then low bound)."""
    spans = [Span(str(r["table"]), str(r["low"]), r["high"], str(r["id"])) for r in ranges]
    return tuple(sorted(spans, key=lambda s: (table_key(s.table), s.low)))


@dataclass(frozen=True)
class Column:
    """One poll: its time, the map's layout then, and each span's load (NaN = no load report)."""

    t: float
    layout: tuple[Span, ...]
    ops: array  # array('f'), aligned with layout


class History:
    """The last ``max_columns`` polls, bounded: a column costs about 120 bytes plus 4 bytes per range,
    and a layout (the map's ranges) is shared by every column polled while the map did not change."""

    def __init__(self, max_columns: int = 3600) -> None:
        self.columns: deque[Column] = deque(maxlen=max_columns)
        self.sizes: dict[str, float] = {}  # range id -> entities in its latest report

    def add(self, t: float, ranges: Sequence[Mapping[str, Any]], loads: Mapping[str, Mapping[str, Any]]) -> Column:
        """Record one poll: the map's ranges and the latest load report of each (by range id)."""
        layout = layout_of(ranges)
        if self.columns and self.columns[-1].layout == layout:
            layout = self.columns[-1].layout  # share one tuple while the map is unchanged
        ops = array("f", (ops_per_second(loads[s.rid]) if s.rid in loads else math.nan for s in layout))
        for s in layout:
            if s.rid in loads:
                self.sizes[s.rid] = float(loads[s.rid].get("entities", 0) or 0)
        col = Column(t, layout, ops)
        self.columns.append(col)
        if len(self.sizes) > 2 * len(layout) + 64:  # forget sizes of ranges no column holds any more
            live = {s.rid for c in self.columns for s in c.layout}
            self.sizes = {rid: n for rid, n in self.sizes.items() if rid in live}
        return col

    def approx_bytes(self) -> int:
        """An estimate of the memory the history holds (columns plus distinct layouts)."""
        layouts = {id(c.layout): len(c.layout) for c in self.columns}
        return sum(120 + 4 * len(c.ops) for c in self.columns) + sum(200 * n + 64 for n in layouts.values())


@dataclass(frozen=True)
class Row:
    """One slice of the key space: ``[low, high)`` of a table; ``y`` and ``h`` are fractions of the height."""

    table: str
    low: str
    high: str | None
    y: float = 0.0
    h: float = 0.0


MAX_ROWS = 512  # rows of one heatmap; past it, boundaries are thinned out evenly (each table keeps its first row)


def rows_of(layouts: Iterable[tuple[Span, ...]], max_rows: int = MAX_ROWS) -> list[Row]:
    """The rows of a window: every table seen, cut at every range boundary seen, in key-space order.

    When there are more than ``max_rows`` cuts, every table keeps its first one and the others are
    chosen evenly, so a row may then span several ranges (its value is the hottest of them).
    """
    names: dict[str, str] = {}
    lows: dict[str, set[str]] = {}
    for layout in layouts:
        for s in layout:
            k = table_key(s.table)
            names[k] = s.table  # the latest spelling
            lows.setdefault(k, {""}).add(s.low)
    cuts = [(k, low) for k in sorted(lows) for low in sorted(lows[k])]
    if len(cuts) > max_rows:
        starts = [i for i, (_, low) in enumerate(cuts) if low == ""]
        others = [i for i, (_, low) in enumerate(cuts) if low != ""]
        room = max(0, max_rows - len(starts))
        chosen = {others[(j + 1) * len(others) // (room + 1)] for j in range(room)}
        cuts = [cuts[i] for i in sorted({*starts, *chosen})]
    rows = []
    for i, (k, low) in enumerate(cuts):
        nxt = cuts[i + 1] if i + 1 < len(cuts) else None
        rows.append(Row(names[k], low, nxt[1] if nxt is not None and nxt[0] == k else None))
    return rows


def covering(layout: tuple[Span, ...], rows: Sequence[Row]) -> list[list[int]]:
    """For each row, the indices of the spans of ``layout`` that overlap it, in key order (the first
    holds the row's low bound); empty when its table did not exist."""
    by_table: dict[str, list[int]] = {}
    for i, s in enumerate(layout):
        by_table.setdefault(table_key(s.table), []).append(i)
    lows = {k: [layout[i].low for i in idx] for k, idx in by_table.items()}
    out: list[list[int]] = []
    for row in rows:
        k = table_key(row.table)
        idx = by_table.get(k)
        if not idx:
            out.append([])
            continue
        j = max(0, bisect.bisect_right(lows[k], row.low) - 1)
        hit = [idx[j]]
        while j + 1 < len(idx) and (row.high is None or lows[k][j + 1] < row.high):
            j += 1
            hit.append(idx[j])
        out.append(hit)
    return out


def row_heights(rows: Sequence[Row], last_rids: Sequence[Sequence[str]], sizes: Mapping[str, float],
                mode: str = "size") -> list[Row]:
    """Place the rows on the y axis (fractions that add up to 1).

    ``even``: every row the same height. ``size``: half of the height is shared evenly, half in
    proportion to each row's share of the entities (a range's entities split evenly over the rows
    it overlaps), so an empty range stays visible and a big one gets room. ``last_rids`` is, for each
    row, the ranges that overlapped it in the latest column where its table existed.
    """
    if mode not in HEIGHT_MODES:
        raise ValueError(f"height mode must be one of {', '.join(HEIGHT_MODES)}, not {mode!r}")
    n = len(rows)
    if n == 0:
        return []
    weights = [1.0 / n] * n
    if mode == "size":
        per_rid: dict[str, int] = {}
        for rids in last_rids:
            for rid in rids:
                per_rid[rid] = per_rid.get(rid, 0) + 1
        share = [sum(sizes.get(rid, 0.0) / per_rid[rid] for rid in rids) for rids in last_rids]
        total = sum(share)
        if total > 0:
            weights = [0.5 / n + 0.5 * s / total for s in share]
    out, y = [], 0.0
    for row, w in zip(rows, weights, strict=True):
        out.append(Row(row.table, row.low, row.high, round(y, 6), round(w, 6)))
        y += w
    return out


def _hottest(ops: array, idxs: list[int]) -> float | None:
    """The largest reported load among the spans ``idxs`` (None when none reported)."""
    if len(idxs) == 1:
        v = ops[idxs[0]]
        return None if math.isnan(v) else v
    vals = [ops[i] for i in idxs if not math.isnan(ops[i])]
    return max(vals) if vals else None


def heatmap(columns: Sequence[Column], sizes: Mapping[str, float], t_from: float, t_to: float,
            width: int = 600, mode: str = "size", max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """The heatmap of the columns polled in ``[t_from, t_to]``, in at most ``width`` time buckets.

    Returns ``rows`` (table, low, high, y, h), ``times`` (each bucket's start), ``step`` (a bucket's
    length in seconds), ``values`` (per bucket, per row: the mean requests/s of the range holding
    the row — the hottest one when a row spans several — or None where no report exists),
    ``layouts`` + ``column_layout`` (per bucket, per row: the range holding the row's low bound,
    shared between buckets with the same map) and ``max`` (the largest value).
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    cols = [c for c in columns if t_from <= c.t <= t_to]
    layouts: dict[int, tuple[Span, ...]] = {}
    for c in cols:
        layouts.setdefault(id(c.layout), c.layout)
    rows = rows_of(layouts.values(), max_rows)
    cover = {key: covering(layout, rows) for key, layout in layouts.items()}
    # Buckets: one per column when they fit, else ``width`` equal slices of the window.
    if len(cols) <= width:
        step = _median_gap(cols)
        buckets: list[list[Column]] = [[c] for c in cols]
        times = [c.t for c in cols]
    else:
        step = (t_to - t_from) / width
        buckets = [[] for _ in range(width)]
        for c in cols:
            buckets[min(width - 1, int((c.t - t_from) / step))].append(c)
        times = [t_from + i * step for i in range(width)]
    values: list[list[float | None]] = []
    ids: list[tuple[str | None, ...]] = []
    for bucket in buckets:
        sums = [0.0] * len(rows)
        counts = [0] * len(rows)
        for c in bucket:
            ops = c.ops
            for r, idxs in enumerate(cover[id(c.layout)]):
                if idxs:
                    v = _hottest(ops, idxs)
                    if v is not None:
                        sums[r] += v
                        counts[r] += 1
        values.append([round(s / k, 2) if k else None for s, k in zip(sums, counts, strict=True)])
        last = bucket[-1] if bucket else None
        ids.append(tuple(last.layout[i[0]].rid if i else None for i in cover[id(last.layout)])
                   if last else (None,) * len(rows))
    # Row heights from the latest ranges overlapping each row.
    last_rids: list[list[str] | None] = [None] * len(rows)
    for c in reversed(cols):
        for r, idxs in enumerate(cover[id(c.layout)]):
            if last_rids[r] is None and idxs:
                last_rids[r] = [c.layout[i].rid for i in idxs]
        if all(x is not None for x in last_rids):
            break
    placed = row_heights(rows, [x or [] for x in last_rids], sizes, mode)
    distinct: dict[tuple[str | None, ...], int] = {}
    column_layout = [distinct.setdefault(x, len(distinct)) for x in ids]
    peak = max((v for col in values for v in col if v is not None), default=0.0)
    return {
        "from": t_from, "to": t_to, "step": step, "times": times,
        "rows": [{"table": r.table, "low": r.low, "high": r.high, "y": r.y, "h": r.h} for r in placed],
        "values": values, "layouts": [list(x) for x in distinct], "column_layout": column_layout, "max": peak,
    }


def _median_gap(cols: Sequence[Column]) -> float:
    gaps = sorted(b.t - a.t for a, b in zip(cols, cols[1:], strict=False))
    return gaps[len(gaps) // 2] if gaps else 1.0


def hot_rows(result: Mapping[str, Any], threshold: float) -> list[dict[str, Any]]:
    """The rows whose mean load over the result's buckets (those with a value) reaches ``threshold``."""
    out = []
    for r, row in enumerate(result["rows"]):
        vals = [col[r] for col in result["values"] if col[r] is not None]
        if vals and sum(vals) / len(vals) >= threshold:
            out.append({**row, "mean": sum(vals) / len(vals)})
    return out
