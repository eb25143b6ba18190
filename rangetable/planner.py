"""Turn a ``$filter`` AST into key-range scans.

Entity keys inside a range store are ``pk.encode() + b"\\x00" + rk.encode()``. Keys contain no control
characters, and UTF-8 preserves code-point order, so byte order on keys is exactly (pk, rk) order:
if one pk is a proper prefix of another, the shorter one continues with ``\\x00`` and the longer one
with a byte >= 0x20.

The planner works on *boxes*: a box is ``pk-interval x rk-interval`` over strings, each end
open, closed or unbounded. A filter becomes a union of boxes:

* ``PartitionKey``/``RowKey`` compared with a String literal by eq/gt/ge/lt/le gives one box;
* the same compared with a non-String literal matches nothing (type mismatch is false): no boxes;
* ``ne``, ``not``, and comparisons on any other property constrain nothing: the full box;
* ``and`` intersects box-by-box, ``or`` concatenates (so an ``or`` of point queries stays several
  narrow scans instead of one wide one).

Every box is then converted to a byte interval ``[lo, hi)`` that is a superset of its keys (exact
when the pk interval is a single value, or when there is no rk bound), the intervals are sorted
and merged where they touch. The complete filter is still evaluated on every scanned entity, so a
plan only has to be a superset of the matches, never miss one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from rangetable.edm import STRING
from rangetable.filter_syntax import And, Compare, Const, Node, Not, Or, key_point

MAX_BOXES = 4096  # beyond this many boxes (or scans) fall back to the covering one
MAX_SCANS = 4096
MAX_MEETS = 4096  # an ``and`` of two unions intersects at most this many pairs (else one side's hull)

# An interval over strings: (lo, lo_inclusive, hi, hi_inclusive); None ends are unbounded.
Interval = tuple[str | None, bool, str | None, bool]
Box = tuple[Interval, Interval]  # (pk interval, rk interval)

_ALL: Interval = (None, False, None, False)
_FULL: Box = (_ALL, _ALL)


@dataclass(frozen=True, slots=True)
class Scan:
    """Encoded keys ``lo <= key < hi``; ``hi`` None is unbounded."""

    lo: bytes
    hi: bytes | None

    def contains(self, key: bytes) -> bool:
        """True when the encoded key lies in this scan."""
        return self.lo <= key and (self.hi is None or key < self.hi)


@dataclass(frozen=True, slots=True)
class Plan:
    """How to read the keys a filter may match.

    ``kind`` is one of ``point`` (every scan is a single (pk, rk) key), ``row_range`` (all scans in
    one partition), ``partition_range`` (bounded by PartitionKey, spanning partitions), ``full`` (one
    unbounded scan) or ``empty`` (the filter cannot match: no scans). ``scans`` are sorted by ``lo``,
    disjoint, and not touching.
    """

    kind: str
    scans: tuple[Scan, ...]

    @property
    def covers_single_partition(self) -> str | None:
        """The PartitionKey when every scan lies inside that one partition, else None."""
        pk: bytes | None = None
        for s in self.scans:
            cut = s.lo.find(b"\x00")
            if cut < 0 or s.hi is None:
                return None
            p = s.lo[:cut]
            if s.hi > p + b"\x01" or (pk is not None and p != pk):
                return None
            pk = p
        return None if pk is None else pk.decode("utf-8", "surrogatepass")

    def contains(self, key: bytes) -> bool:
        """True when the encoded key lies in one of the scans."""
        return any(s.contains(key) for s in self.scans)


# --- intervals and boxes -----------------------------------------------------------------------


def _interval(op: str, value: str) -> Interval | None:
    """The interval of strings ``x`` with ``x op value``; None for ``ne`` (no constraint)."""
    if op == "eq":
        return (value, True, value, True)
    if op == "gt":
        return (value, False, None, False)
    if op == "ge":
        return (value, True, None, False)
    if op == "lt":
        return (None, False, value, False)
    if op == "le":
        return (None, False, value, True)
    return None


def _intersect_iv(a: Interval, b: Interval) -> Interval | None:
    """The intersection of two intervals, or None when it is empty."""
    alo, ali, ahi, ahi_i = a
    blo, bli, bhi, bhi_i = b
    if alo is None or (blo is not None and blo > alo):
        lo, li = blo, bli
    elif blo is None or alo > blo:
        lo, li = alo, ali
    else:
        lo, li = alo, ali and bli
    if ahi is None or (bhi is not None and bhi < ahi):
        hi, hi_i = bhi, bhi_i
    elif bhi is None or ahi < bhi:
        hi, hi_i = ahi, ahi_i
    else:
        hi, hi_i = ahi, ahi_i and bhi_i
    if lo is not None and hi is not None and (lo > hi or (lo == hi and not (li and hi_i))):
        return None
    return (lo, li, hi, hi_i)


def _hull_iv(ivs: list[Interval]) -> Interval:
    """The smallest interval containing all of ``ivs`` (non-empty list)."""
    lo, li, hi, hi_i = ivs[0]
    for alo, ali, ahi, ahi_i in ivs[1:]:
        if lo is not None and (alo is None or alo < lo or (alo == lo and ali)):
            lo, li = alo, ali
        if hi is not None and (ahi is None or ahi > hi or (ahi == hi and ahi_i)):
            hi, hi_i = ahi, ahi_i
    return (lo, li, hi, hi_i)


def _hull(boxes: list[Box]) -> list[Box]:
    return [(_hull_iv([b[0] for b in boxes]), _hull_iv([b[1] for b in boxes]))]


B = TypeVar("B", bound=Hashable)


def union_of_boxes(node: Node, compare: Callable[[Compare], list[B]], full: B,
                   meet: Callable[[B, B], B | None], hull: Callable[[list[B]], list[B]]) -> list[B]:
    """A filter as a union of boxes, a superset of its matches: ``compare`` gives a comparison's boxes (``[full]``
    when it constrains nothing), ``and`` intersects box by box (``meet``: None when empty), ``or`` concatenates;
    past :data:`MAX_BOXES` boxes (or :data:`MAX_MEETS` pairs to meet) a union becomes its ``hull``. The key
    planner's boxes are (PartitionKey, RowKey) intervals, an index plan's one interval per indexed property."""
    if isinstance(node, Compare):
        return compare(node)
    if isinstance(node, Const):
        return [full] if node.value else []
    if isinstance(node, Not):
        return [] if node.expr == Const(True) else [full]
    left = union_of_boxes(node.left, compare, full, meet, hull)
    if isinstance(node, Or):
        if left == [full]:
            return left
        right = union_of_boxes(node.right, compare, full, meet, hull)
        if right == [full]:
            return right
        out = list(dict.fromkeys(left + right))  # (a balanced tree: each box is copied log n times)
        return hull(out) if len(out) > MAX_BOXES else out
    assert isinstance(node, And)
    if not left:
        return []
    right = union_of_boxes(node.right, compare, full, meet, hull)
    if left == [full]:
        return right
    if right == [full]:
        return left
    if len(left) * len(right) > MAX_MEETS:
        if len(left) >= len(right):
            left = hull(left)
        else:
            right = hull(right)
    meets: dict[B, None] = {}  # an insertion-ordered set
    for lb in left:
        for rb in right:
            m = meet(lb, rb)
            if m is not None:
                meets[m] = None
    boxes = list(meets)
    return hull(boxes) if len(boxes) > MAX_BOXES else boxes


def _key_boxes(node: Compare) -> list[Box]:
    """A comparison's boxes: one when it compares a key with a String, none when it can never hold."""
    if node.prop != "PartitionKey" and node.prop != "RowKey":
        return [_FULL]
    if node.code != STRING:
        return []  # a key compared with a non-String literal is always false
    if node.op == "lt" and node.value == "":
        return []  # nothing sorts below the empty string
    iv = _interval(node.op, node.value)
    if iv is None:
        return [_FULL]
    return [(iv, _ALL)] if node.prop == "PartitionKey" else [(_ALL, iv)]


def _meet_box(a: Box, b: Box) -> Box | None:
    pk = _intersect_iv(a[0], b[0])
    rk = _intersect_iv(a[1], b[1]) if pk is not None else None
    return None if pk is None or rk is None else (pk, rk)


def _boxes(node: Node) -> list[Box]:
    """The filter as a union of (PartitionKey, RowKey) boxes (a superset of its matches)."""
    return union_of_boxes(node, _key_boxes, _FULL, _meet_box, _hull)


# --- boxes to byte ranges ----------------------------------------------------------------------


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _lo_bytes(pk: Interval, rk: Interval) -> bytes:
    """Inclusive lower key bound of a box.

    * no pk lower bound: ``b""``;
    * pk > P: ``P\\x01`` -- a larger pk either extends P (next byte >= 0x20) or is larger earlier,
      while every key of partition P starts with ``P\\x00``;
    * pk >= P: ``P\\x00`` followed by the rk bound, which only narrows partition P itself (keys of
      later partitions start at ``P\\x01`` or above): rk >= R gives ``P\\x00R``, rk > R gives
      ``P\\x00R\\x00`` (the successor of R, as keys contain no ``\\x00``).
    """
    lo, inclusive = pk[0], pk[1]
    if lo is None:
        return b""
    if not inclusive:
        return _enc(lo) + b"\x01"
    r, r_inclusive = rk[0], rk[1]
    if r is None:
        return _enc(lo) + b"\x00"
    return _enc(lo) + b"\x00" + _enc(r) + (b"" if r_inclusive else b"\x00")


def _hi_bytes(pk: Interval, rk: Interval) -> bytes | None:
    """Exclusive upper key bound of a box.

    * no pk upper bound: None;
    * pk < P: ``P\\x00`` -- the first key of partition P; smaller pks sort below ``P`` itself. (``P``
      would be as tight; ``P\\x00`` makes every pk boundary either ``P\\x00`` (start of partition P)
      or ``P\\x01`` (end of it), so ``pk lt P or pk ge P`` merges into one full scan.)
    * pk <= P: ``P\\x01`` narrowed by the rk bound within partition P: rk < R gives ``P\\x00R``,
      rk <= R gives ``P\\x00R\\x00``.
    """
    hi, inclusive = pk[2], pk[3]
    if hi is None:
        return None
    if not inclusive:
        return _enc(hi) + b"\x00"
    r, r_inclusive = rk[2], rk[3]
    if r is None:
        return _enc(hi) + b"\x01"
    return _enc(hi) + b"\x00" + _enc(r) + (b"\x00" if r_inclusive else b"")


def merge_scans(scans: list[Scan]) -> list[Scan]:
    """Sort scans by ``lo`` and merge those that overlap or touch."""
    scans.sort(key=lambda s: s.lo)
    out: list[Scan] = []
    for s in scans:
        if out and (out[-1].hi is None or s.lo <= out[-1].hi):
            last = out[-1]
            if last.hi is not None and (s.hi is None or s.hi > last.hi):
                out[-1] = Scan(last.lo, s.hi)
        else:
            out.append(s)
    return out


def _is_point(s: Scan) -> bool:
    return s.hi is not None and s.lo.count(b"\x00") == 1 and s.hi == s.lo + b"\x00"


FULL_PLAN = Plan("full", (Scan(b"", None),))
EMPTY_PLAN = Plan("empty", ())


def keys_only(node: Node | None) -> bool:
    """True when ``node`` says nothing but which keys match: ``PartitionKey eq 'p' and RowKey eq 'r'`` (either
    order), or an ``or`` of such terms. A point plan of it reads exactly the entities that match, so the ranges
    it reads need no filter (Orleans sends hundreds of such terms; a range parsing them costs milliseconds)."""
    todo: list[Node | None] = [node]
    while todo:  # a stack, not recursion: a long chain of ``or`` nests as deep as it is long
        n = todo.pop()
        if isinstance(n, Or):
            todo += (n.left, n.right)
            continue
        if n is None or key_point(n) is None:
            return False
    return True


def plan(node: Node | None) -> Plan:
    """The scans that cover every entity the filter may match (see the module docstring)."""
    if node is None:
        return FULL_PLAN
    scans = []
    for pk, rk in _boxes(node):
        lo, hi = _lo_bytes(pk, rk), _hi_bytes(pk, rk)
        if hi is None or lo < hi:
            scans.append(Scan(lo, hi))
    merged = merge_scans(scans)
    if len(merged) > MAX_SCANS:
        merged = [Scan(merged[0].lo, merged[-1].hi)]
    if not merged:
        return EMPTY_PLAN
    if len(merged) == 1 and merged[0].lo == b"" and merged[0].hi is None:
        return FULL_PLAN
    result = tuple(merged)
    if all(_is_point(s) for s in result):
        return Plan("point", result)
    kind = "row_range" if Plan("", result).covers_single_partition is not None else "partition_range"
    return Plan(kind, result)
