"""Choose a secondary index for a ``$filter`` and turn the filter into scans of its entries.

An index's entries are keyed ``utf8(enc(v1) + … + enc(vn)) + b"\\x00" + utf8(base_pk + "\\x01" + base_rk)``
(:mod:`rangetable.index_keys`): byte order on entry keys is the order of the indexed values as the filter
evaluator compares them, and every encoding is self-delimiting. The planner works, like
:mod:`rangetable.planner`, on *boxes*: a box holds one interval per indexed property, each a half-open byte
interval ``[lo, hi)`` over that property's encoding (``hi`` None: unbounded). A filter becomes a union of boxes:

* an indexed property compared with a literal by eq/gt/ge/lt/le gives one box, bounded to the literal's type
  group (a comparison across groups is false for the evaluator); a literal that can never compare true (NaN, an
  unknown type) gives no box; bounds on rounded or truncated encodings are inclusive;
* ``ne``, ``not``, and comparisons on any other property constrain nothing: the full box;
* ``and`` intersects box-by-box, ``or`` concatenates.

A box is a scan of entry keys: the encodings of its leading *points* (intervals of one encoded value, from
``eq``) concatenate into a prefix ``E``, and the first non-point interval ``[lo, hi)`` gives the scan
``[E + lo, E + hi)`` (``E + b"\\xff"`` for an unbounded ``hi``: ``\\xff`` is never in UTF-8). An index is usable
when every box bounds its first property: then every match has that property, so has an entry (indexes are
sparse). Every hit is still re-checked against the base row, so the scans only have to be a superset.
"""

from __future__ import annotations

from dataclasses import dataclass

from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, GUID, INT32, INT64, STRING
from rangetable.filter_syntax import Compare, Node, format_literal, properties_used
from rangetable.index_def import IndexDef
from rangetable.index_keys import TAGS, encode_value, is_exact
from rangetable.planner import MAX_SCANS, Scan, merge_scans, union_of_boxes

_TOP = b"\xff"
_CODES = frozenset((STRING, INT32, INT64, DOUBLE, BOOLEAN, DATETIME, GUID, BINARY))


@dataclass(frozen=True, slots=True)
class Interval:
    """Encodings ``lo <= e < hi`` of one property (``hi`` None: unbounded); ``point``: one encoded value.
    ``lo_txt``/``hi_txt`` show the bounds (``[5``, ``(5``, ``9]``, ``9)``; empty: none) for :meth:`describe`."""

    lo: bytes
    hi: bytes | None
    point: bool = False
    lo_txt: str = ""
    hi_txt: str = ""

    def describe(self, prop: str) -> str:
        """``prop = 5``, ``prop in [2, 5)``, ``prop > 2``, …"""
        if self.point:
            return f"{prop} = {self.lo_txt[1:]}"
        if self.lo_txt and self.hi_txt:
            return f"{prop} in {self.lo_txt}, {self.hi_txt}"
        if self.lo_txt:
            return f"{prop} {'>' if self.lo_txt[0] == '(' else '>='} {self.lo_txt[1:]}"
        if self.hi_txt:
            return f"{prop} {'<' if self.hi_txt[-1] == ')' else '<='} {self.hi_txt[:-1]}"
        return f"{prop} bounded"


_ALL = Interval(b"", None)
Box = tuple[Interval, ...]


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """Read index ``index`` by ``scans`` (entry keys, sorted, disjoint); ``boxes`` give :meth:`describe`."""

    index: IndexDef
    scans: tuple[Scan, ...]
    equalities: int = 0  # leading equalities every box has
    boxes: tuple[Box, ...] = ()

    def contains(self, key: bytes) -> bool:
        """True when the entry key lies in one of the scans."""
        return any(s.contains(key) for s in self.scans)

    def describe(self) -> str:
        """One line for ``rangetable explain``: ``index byQty of orders: 2 scans, qty in [2, 5]``."""
        n = len(self.scans)
        head = f"index {self.index.name} of {self.index.table}: {n} scan{'' if n == 1 else 's'}"
        if not self.boxes:
            return head + ", nothing can match"
        shown = [" and ".join(iv.describe(p) for p, iv in zip(self.index.on, box, strict=True) if iv != _ALL)
                 for box in self.boxes[:3]]
        more = f" or … ({len(self.boxes) - 3} more)" if len(self.boxes) > 3 else ""
        return f"{head}, {' or '.join(shown)}{more}"


# --- intervals and boxes -----------------------------------------------------------------------


def _compare(node: Compare) -> Interval | None:
    """The encodings of values ``v`` with ``v op literal`` (None: no value; ``_ALL``: for ``ne``)."""
    op, code, value = node.op, node.code, node.value
    if op == "ne":
        return _ALL
    if code not in _CODES or (code == DOUBLE and value != value):
        return None  # never true (NaN compares false, an unknown type matches no stored value)
    pair = (code, value)
    e = encode_value(pair).encode("utf-8")
    group = TAGS[code].encode("utf-8")
    strict = is_exact(pair)
    txt = format_literal(code, value)
    if op == "eq":
        return Interval(e, e + _TOP, True, "[" + txt, txt + "]")
    if op == "gt" or op == "ge":
        lo = e + _TOP if op == "gt" and strict else e
        return Interval(lo, group + _TOP, False, ("(" if op == "gt" else "[") + txt)
    if op == "lt" or op == "le":
        hi = e if op == "lt" and strict else e + _TOP
        return Interval(group, hi, False, "", txt + (")" if op == "lt" else "]"))
    raise ValueError(f"unknown operator {op!r}")


def _meet(a: Interval, b: Interval) -> Interval | None:
    """The intersection of two intervals, or None when it is empty.

    A point's interval ``[e, e + \\xff)`` holds no other bound strictly inside (encodings are prefix-free),
    so a point meets another interval in itself or in nothing."""
    if a == _ALL:
        return b
    if b == _ALL:
        return a
    lo, lo_txt = (a.lo, a.lo_txt) if a.lo >= b.lo else (b.lo, b.lo_txt)
    if a.hi is None or (b.hi is not None and b.hi < a.hi):
        hi, hi_txt = b.hi, b.hi_txt
    else:
        hi, hi_txt = a.hi, a.hi_txt
    if hi is not None and lo >= hi:
        return None
    if a.point or b.point:
        return a if a.point else b
    return Interval(lo, hi, False, lo_txt, hi_txt)


def _hull_iv(ivs: list[Interval]) -> Interval:
    """The smallest interval containing all of ``ivs`` (non-empty list)."""
    first = ivs[0]
    if all(iv == first for iv in ivs):
        return first
    low = min(ivs, key=lambda iv: iv.lo)
    high = None if any(iv.hi is None for iv in ivs) else max(ivs, key=lambda iv: iv.hi or b"")
    if low.lo == b"" and high is None:
        return _ALL
    return Interval(low.lo, None if high is None else high.hi, False, low.lo_txt, "" if high is None else high.hi_txt)


def _hull(boxes: list[Box]) -> list[Box]:
    return [tuple(_hull_iv([b[i] for b in boxes]) for i in range(len(boxes[0])))]


def _meet_box(a: Box, b: Box) -> Box | None:
    box = []
    for x, y in zip(a, b, strict=True):
        m = _meet(x, y)
        if m is None:
            return None
        box.append(m)
    return tuple(box)


def _boxes(node: Node, on: tuple[str, ...], full: Box) -> list[Box]:
    """The filter as a union of boxes over the properties ``on`` (a superset of its matches)."""

    def compare(c: Compare) -> list[Box]:
        if c.prop not in on:
            return [full]
        iv = _compare(c)
        if iv is None:
            return []
        i = on.index(c.prop)
        return [full[:i] + (iv,) + full[i + 1:]]

    return union_of_boxes(node, compare, full, _meet_box, _hull)


# --- boxes to scans ----------------------------------------------------------------------------


def _scan(box: Box) -> Scan:
    """The entry keys of a box: its leading points as a prefix, then the first other interval."""
    prefix = b""
    for iv in box:
        if not iv.point:
            hi = prefix + iv.hi if iv.hi is not None else (prefix + _TOP if prefix else None)
            return Scan(prefix + iv.lo, hi)
        prefix += iv.lo
    return Scan(prefix, prefix + _TOP)


def _leading_points(box: Box) -> int:
    n = 0
    while n < len(box) and box[n].point:
        n += 1
    return n


def plan_index(node: Node | None, idx: IndexDef) -> IndexPlan | None:
    """The scans of ``idx``'s entries that cover every entity ``node`` may match, or None when the filter
    does not bound the index's first property in every branch (``idx`` need not be ready)."""
    if node is None:
        return None
    full: Box = (_ALL,) * len(idx.on)
    boxes = _boxes(node, idx.on, full)
    if any(box[0] == _ALL for box in boxes) or (not boxes and idx.on[0] not in properties_used(node)):
        return None  # (a filter that matches nothing whatever the index: the base planner's job)
    scans = merge_scans([s for s in map(_scan, boxes) if s.hi is None or s.lo < s.hi])
    if len(scans) > MAX_SCANS:
        scans = [Scan(scans[0].lo, scans[-1].hi)]
    eqs = min((_leading_points(b) for b in boxes), default=len(idx.on))
    return IndexPlan(idx, tuple(scans), eqs, tuple(boxes))


def choose(node: Node | None, defs: list[IndexDef]) -> IndexPlan | None:
    """The best ready index for a filter: the most leading equalities, then the fewest scans (then the first
    declared); None when no ready index bounds the filter (scan the base table)."""
    best: IndexPlan | None = None
    for d in defs:
        if not d.ready:
            continue
        p = plan_index(node, d)
        if p is not None and (best is None or (-p.equalities, len(p.scans)) < (-best.equalities, len(best.scans))):
            best = p
    return best
