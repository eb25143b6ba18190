"""The data requests of a partition server (``get``, ``write``, ``batch``, ``scan``): one handler each,
and :data:`DATA_OPS`, the table from op name to handler that :meth:`RangeSet.data
<partition_server.ranges.RangeSet.data>` dispatches through (and where it does the load accounting).

A handler runs one request against the range that serves it and returns its result (already in
wire form where the reply can be spliced from stored bytes). A request that names its PartitionKey
and entities up front (:attr:`DataOp.target`) counts as load before it runs, so a refused write is
load too; a scan counts once it ran (its handler answers a :class:`ScanPage`), by the partition of
the first entity of its page.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

from partition_server.served import Served
from partition_server.store import fast_path, index_state
from partition_server.store.feed import KINDS
from partition_server.store.prefilter import Needles, needles
from partition_server.store.range_scan import is_point_span
from rangetable import feed_cursor, protocol
from rangetable.errors import TableError
from rangetable.filter import CACHED_FILTER_CHARS, Predicate, compile_cached, properties_used
from rangetable.keys import META_PREFIX, encode_key
from rangetable.messages import (
    ChangesRequest,
    RangeBatchRequest,
    RangeGetRequest,
    RangeWriteRequest,
    ScanRequest,
    SourceApplyRequest,
    SourceCopyRequest,
)
from rangetable.protocol import Packed, entity_to_wire

_KEYS_AND_TIMESTAMP = frozenset(("PartitionKey", "RowKey", "Timestamp"))


class ScanPage(NamedTuple):
    """A scan's answer: the page, the entities on it, the PartitionKey to sample for the load report
    and its weight (None for an empty page), and whether it counts as load at all (a scan of an
    empty span reads nothing)."""

    result: Packed
    entities: int
    sampled: tuple[str, int] | None
    counts: bool = True


class DataOp(NamedTuple):
    """One kind of data request."""

    reads: bool  # counted as a read (else as a write)
    target: Callable[[dict], tuple[str | None, int]] | None  # (PartitionKey, entities) named up front; None: a scan
    run: Callable[[Served, Any, float], Any]  # (range, request: rangetable.messages.Range*Request / ScanRequest,
    #                                           scan budget in s) -> result, or a ScanPage


class ScanFilter(NamedTuple):
    """How a scan reads a ``$filter``: its predicate (None without a filter), whether it reads the Timestamp and
    other properties, and the prefilter of its equalities (:mod:`partition_server.store.prefilter`)."""

    predicate: Predicate | None
    needs_ts: bool
    needs_props: bool
    wanted: Needles


def _scan_filter(text: str | None) -> ScanFilter:
    node, pred = compile_cached(text)
    used = properties_used(node)
    return ScanFilter(None if node is None else pred, "Timestamp" in used, not used <= _KEYS_AND_TIMESTAMP,
                      needles(node))


_scan_filter_memo = lru_cache(maxsize=1024)(_scan_filter)


def scan_filter(text: str | None) -> ScanFilter:
    """A scan's ``$filter`` (:class:`ScanFilter`), memoised unless long. Raises TableError for an invalid
    filter."""
    if text is not None and len(text) > CACHED_FILTER_CHARS:
        return _scan_filter(text)
    return _scan_filter_memo(text)


def cut_of(req: RangeGetRequest | ScanRequest) -> int | None:
    """The cut ``at`` a secondary cluster's read asks for (None: now); InvalidInput unless a Timestamp."""
    at = req.get("at")
    if at is not None and (type(at) is not int or at < 0):
        raise TableError("InvalidInput", "at must be a Timestamp")
    return at


def get(served: Served, req: RangeGetRequest, budget_s: float) -> Any:
    """A point read: the entity spliced from the stored bytes, decoded only for ``$select``; with ``at``,
    decoded as it stood at that cut."""
    pk, rk, select = req["pk"], req["rk"], req.get("select")
    store = served.store
    at = cut_of(req)
    if at is not None:
        e = store.get_at(pk, rk, at)
        if e is not None:
            return entity_to_wire(e if not select else e._replace(props={k: v for k, v in e.props.items()
                                                                         if k in select}))
    elif select:
        e = store.get(pk, rk)
        if e is not None:
            return entity_to_wire(e._replace(props={k: v for k, v in e.props.items() if k in select}))
    else:
        key = encode_key(pk, rk)
        v = store.get_raw(key)
        if v is not None:
            return Packed(fast_path.entity_bytes(key, v))
    raise TableError("ResourceNotFound")


def write(served: Served, req: RangeWriteRequest, budget_s: float) -> Packed:
    """One entity operation; the entity written in wire form (nil for a delete)."""
    return Packed(served.store.write(req["write"], request_id=req.get("rid"), wire=True))


def batch(served: Served, req: RangeBatchRequest, budget_s: float) -> Any:
    """An entity group transaction: each op's entity in wire form, or with ``echo`` false only the
    Timestamp they share (the caller wants no entities back)."""
    ops = req["ops"]
    if req.get("echo", True):
        return fast_path.array(served.store.batch(ops, request_id=req.get("rid"), answer="wire"))
    return served.store.batch(ops, request_id=req.get("rid"), answer="timestamp")


def _spans(req: ScanRequest) -> list[tuple[bytes, bytes | None]]:
    """``[lo, hi)`` and the request's further ``spans``; InvalidInput unless they ascend without overlap."""
    spans = [(req.get("lo") or b"", req.get("hi"))]
    for span in req.get("spans") or ():
        if not (isinstance(span, list | tuple) and len(span) == 2 and isinstance(span[0], bytes)
                and (span[1] is None or isinstance(span[1], bytes))):
            raise TableError("InvalidInput", "scan spans must be [lo, hi] pairs of keys")
        prev_hi = spans[-1][1]
        if prev_hi is None or span[0] < prev_hi:
            raise TableError("InvalidInput", "scan spans must ascend without overlapping")
        spans.append((span[0], span[1]))
    return spans


class _Run(NamedTuple):
    """Spans of a scan request as the range serves them: one span ``[lo, hi)``, or with ``points`` a
    run of consecutive point spans (their keys, ascending; ``lo`` is the first) read by one multi-get."""

    lo: bytes
    hi: bytes | None
    points: list[bytes] | None = None


def _runs(spans: list[tuple[bytes, bytes | None]], served: Served) -> list[_Run]:
    """The spans clamped to the range, empty ones dropped, consecutive point spans gathered into runs."""
    runs: list[_Run] = []
    for lo, hi in spans:
        lo = max(lo, served.lo)
        if served.hi is not None and (hi is None or hi > served.hi):
            hi = served.hi
        if hi is not None and lo >= hi:
            continue
        if not is_point_span(lo, hi):
            runs.append(_Run(lo, hi))
        elif runs and runs[-1].points is not None:
            runs[-1].points.append(lo)
        else:
            runs.append(_Run(lo, hi, [lo]))
    return runs


def scan(served: Served, req: ScanRequest, budget_s: float) -> ScanPage:
    """One page of a scan of ``[lo, hi)`` and then of each further span in ``spans``, clamped to the
    range, filtered and projected, within the time budget: ``{"entities": [...], "next": key or nil}``
    (``next``: where to go on from; nil once every span is exhausted). Consecutive point spans (an
    ``or`` of point keys) are read with one multi-get, each entity found filtered as a scan would.
    With ``feed`` (a :class:`rangetable.messages.ChangesRequest` without op, range and epoch) the page also
    carries that request's answer of the range's change feed as ``feed`` (a query through an index reads its
    base rows and checks the index fresh in one request: frontend/indexes/query.py)."""
    feed = req.get("feed")
    if feed is not None and not isinstance(feed, dict):
        raise TableError("InvalidInput", "feed must be a changes request")
    checked = None if feed is None else changes(served, feed, budget_s).result  # type: ignore[arg-type]
    pred, needs_ts, needs_props, wanted = scan_filter(req.get("filter"))
    at = cut_of(req)
    budget = min(float(req.get("budget_ms", 1e9)) / 1000.0, budget_s)
    deadline = time.perf_counter() + budget
    limit = int(req.get("limit", 1000))
    items: list = []
    nxt: bytes | None = None
    runs = _runs(_spans(req), served)
    store, select = served.store, req.get("select")
    for i, (lo, hi, points) in enumerate(runs):
        left = deadline - time.perf_counter()
        if i and (len(items) >= limit or left <= 0):
            nxt = lo  # the page is full, or its time is up: go on from this span
            break
        got, nxt = store.scan(lo, hi, pred, select, limit=limit - len(items), budget_s=max(left, 0.0), wire=True,
                              needs_ts=needs_ts, needs_props=needs_props, points=points, wanted=wanted, at=at)
        items += got
        if nxt is not None:
            break
    if not runs:
        return ScanPage(fast_path.page([], None, checked), 0, None, counts=False)
    sampled = (fast_path.entity_pk(items[0]), 1 + len(items) // 100) if items else None
    return ScanPage(fast_path.page(items, nxt, checked), len(items), sampled)


def changes(served: Served, req: ChangesRequest, budget_s: float) -> ScanPage:
    """A page of the range's change feed (:meth:`RangeStore.read_changes
    <partition_server.store.range_store.RangeStore.read_changes>`), clamped to the range. The answer is held
    until every batch it may show is committed, like any read on a replicated range."""
    lo = max(req.get("lo") or b"", served.lo)
    hi = req.get("hi")
    if served.hi is not None and (hi is None or hi > served.hi):
        hi = served.hi
    upto, need, cut = req.get("upto"), req.get("need"), req.get("cut")
    if not all(v is None or type(v) is int for v in (upto, need, cut)):
        raise TableError("InvalidInput", "upto, need and cut must be Timestamps")
    limit = int(req.get("limit", 1000))
    page = served.store.read_changes(None if req.get("after") is None else feed_cursor.from_wire(req["after"]), lo, hi, limit,
                                     bool(req.get("close")), need, upto, cut)
    answer = {"records": page.records, "frontier": page.frontier, "more": page.more, "floor": page.floor,
              "last": served.store.last_ts}
    return ScanPage(Packed(protocol.pack(answer)), len(page.records), None, counts=bool(page.records))


def index_apply(served: Served, req: dict, budget_s: float) -> Any:
    """Write entries of an index (``ops``: ``[key, kept properties or nil]``, each key once, all in the range)
    with the applier's ``claim`` and the feed position ``pos`` of their last base record:
    ``{"applied": bool}`` (False: the range applied that position already; see
    :mod:`partition_server.store.index_state`)."""
    claim, pos = index_state.check(req.get("claim"), req.get("pos"))
    ops = req.get("ops")
    if not isinstance(ops, list):
        raise TableError("InvalidInput", "ops must be a list of [key, properties or nil]")
    entries: list[tuple[bytes, dict | None]] = []
    for op in ops:
        if not (isinstance(op, list | tuple) and len(op) == 2 and isinstance(op[0], bytes)
                and (op[1] is None or isinstance(op[1], dict))):
            raise TableError("InvalidInput", "an index op is [key, properties or nil]")
        key = op[0]
        if key < served.lo or (served.hi is not None and key >= served.hi):
            raise TableError("NotPrimary", "an index entry lies outside this range: ask the map again")
        entries.append((key, op[1]))
    return {"applied": served.store.apply_index(entries, claim, pos)}


def source_apply(served: Served, req: SourceApplyRequest, budget_s: float) -> Any:
    """Write a secondary cluster's share of its source's feed records into the range (see
    :class:`~rangetable.messages.SourceApplyRequest`): ``{"applied": n}``. InvalidInput for a malformed record,
    records out of position order or past ``pos``; NotPrimary for a key outside the range."""
    claim, pos = index_state.check(req.get("claim"), req.get("pos"))
    records = req.get("records")
    if pos is None or not isinstance(records, list):
        raise TableError("InvalidInput", "source_apply needs records and a position")
    prev: tuple[int, bytes] | None = None
    for r in records:
        if not (isinstance(r, list) and len(r) == 5 and type(r[0]) is int and isinstance(r[1], bytes)
                and r[2] in KINDS and (r[3] is None or isinstance(r[3], bytes))):
            raise TableError("InvalidInput", "a source record is [Timestamp, key, kind, value or nil, before or nil]")
        if (r[3] is None) != (r[2] in ("delete", "expire")):
            raise TableError("InvalidInput", "a deletion carries no value, any other change one")
        key = r[1]
        if key < served.lo or (served.hi is not None and key >= served.hi) or key >= META_PREFIX:
            raise TableError("NotPrimary", "a source record lies outside this range: ask the map again")
        here = (r[0], key)
        if prev is not None and here <= prev:
            raise TableError("InvalidInput", "source records must come in position order")
        prev = here
    if prev is not None and prev > pos:
        raise TableError("InvalidInput", "the position must be at or after the last record's")
    trim = req.get("trim")
    if trim is not None and (type(trim) is not int or trim < 0):
        raise TableError("InvalidInput", "trim must be a Timestamp")
    applied = served.store.apply_source(records, claim, pos)
    if trim:  # no reader asks for a cut below it any more: its undo records go (a bounded number per write)
        served.store.trim_undo(trim, TRIM_BATCH)
    return {"applied": applied}


def source_copy(served: Served, req: SourceCopyRequest, budget_s: float) -> Any:
    """Put a secondary table's first copy of its source's entities into the range (see
    :class:`~rangetable.messages.SourceCopyRequest`): ``{"applied": n}``. InvalidInput for a malformed entity;
    NotPrimary for a key outside the range."""
    claim, _ = index_state.check(req.get("claim"), None)
    values, floor = req.get("values"), req.get("floor", 0)
    if not isinstance(values, list) or type(floor) is not int or floor < 0:
        raise TableError("InvalidInput", "source_copy needs values and a floor")
    out: list[tuple[bytes, bytes | None]] = []
    for v in values:
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], bytes)
                and (v[1] is None or isinstance(v[1], bytes) and v[1])):
            raise TableError("InvalidInput", "a copied entity is [key, stored value or nil to delete]")
        if v[0] < served.lo or (served.hi is not None and v[0] >= served.hi) or v[0] >= META_PREFIX:
            raise TableError("NotPrimary", "a copied entity lies outside this range: ask the map again")
        out.append((v[0], v[1]))
    return {"applied": served.store.copy_source(out, claim, floor)}


def source_seal(served: Served, req: Any, budget_s: float) -> Any:
    """Seal a secondary range at its table's cut ``cut`` before a forced failover makes the cluster a primary
    (:meth:`RangeStore.seal_at <partition_server.store.range_store.RangeStore.seal_at>`): ``{"restored": n}``."""
    at, claim = req.get("cut"), req.get("claim")
    if type(at) is not int or at < 0:
        raise TableError("InvalidInput", "source_seal needs the cut, a Timestamp")
    if claim is not None:
        claim, _ = index_state.check(claim, None)
    return {"restored": served.store.seal_at(at, served.lo, served.hi, claim)}


TRIM_BATCH = 20_000  # undo records trimmed with one source_apply at most (a page carries 1,000 records or fewer)


def _source_target(req: dict) -> tuple[str | None, int]:
    """The PartitionKey of a source batch's first record (its load sample) and its records."""
    recs = req.get("records") or ()
    first = recs[0][1] if recs and isinstance(recs[0], list) and len(recs[0]) > 1 and isinstance(recs[0][1], bytes) else None
    return (None if first is None else first.partition(b"\x00")[0].decode("utf-8", "replace")), len(recs)


def _copy_target(req: dict) -> tuple[str | None, int]:
    """The PartitionKey of a copy's first entity (its load sample) and its entities."""
    values = req.get("values") or ()
    first = values[0][0] if values and isinstance(values[0], list) and values[0] and isinstance(values[0][0], bytes) else None
    return (None if first is None else first.partition(b"\x00")[0].decode("utf-8", "replace")), len(values)


def _index_target(req: dict) -> tuple[str | None, int]:
    """The PartitionKey of an index write's first entry (its load sample) and its entries."""
    ops = req.get("ops") or ()
    first = ops[0][0] if ops and isinstance(ops[0], list | tuple) and ops[0] and isinstance(ops[0][0], bytes) else None
    return (None if first is None else first.partition(b"\x00")[0].decode("utf-8", "replace")), len(ops)


def _batch_target(req: dict) -> tuple[str | None, int]:
    ops = req["ops"]
    return (ops[0].get("pk") if ops else None), len(ops)


# The geo roles under which a partition server takes each write, by its lease's "writes"
# (coordinator/map/geo_role.py): a primary's ("all") are every other write.
GEO_WRITES: dict[str, frozenset[str]] = {
    "source_apply": frozenset({"source"}), "source_copy": frozenset({"source"}),  # a secondary's appliers'
    "source_seal": frozenset({"none", "source"}),  # a fenced secondary promoted by force; a rejoining one's applier
}
ALL_WRITES = frozenset({"all"})

DATA_OPS: dict[str, DataOp] = {
    "get": DataOp(True, lambda req: (req["pk"], 1), get),
    "write": DataOp(False, lambda req: (req["write"].get("pk"), 1), write),
    "batch": DataOp(False, _batch_target, batch),
    "scan": DataOp(True, None, scan),
    "changes": DataOp(True, None, changes),
    "index_apply": DataOp(False, _index_target, index_apply),
    "source_apply": DataOp(False, _source_target, source_apply),
    "source_copy": DataOp(False, _copy_target, source_copy),
    "source_seal": DataOp(False, lambda req: (None, 1), source_seal),
}
