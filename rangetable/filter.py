"""Azure Table ``$filter``: the public API, and the compiler that turns a parsed filter into a predicate.

Parsing lives in :mod:`rangetable.filter_syntax` (tokenizer, parser, AST, printer); its names are
re-exported here, so ``from rangetable.filter import parse_filter, compile_filter`` is the one import
a caller needs. :func:`compile_filter` turns the AST into nested closures taking
``(pk, rk, ts, props)`` with Azure's semantics: a missing property or a type mismatch makes the
comparison false (even ``ne``), Int32/Int64/Double compare numerically with each other, and ``not``
negates the whole sub-expression.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from rangetable.edm import DATETIME, DOUBLE, INT32, INT64, STRING
from rangetable.filter_syntax import (
    MAX_COMPARISONS,
    MAX_CONSTANTS,
    MAX_DEPTH,
    And,
    Compare,
    Const,
    Node,
    Not,
    Or,
    chain_terms,
    count_comparisons,
    describe,
    format_literal,
    key_point,
    parse_filter,
    properties_used,
    tokenize,
)

__all__ = [
    "CACHED_FILTER_CHARS",
    "MAX_COMPARISONS",
    "MAX_CONSTANTS",
    "MAX_DEPTH",
    "And",
    "Compare",
    "Const",
    "Node",
    "Not",
    "Or",
    "Predicate",
    "compile_cached",
    "compile_filter",
    "count_comparisons",
    "describe",
    "format_literal",
    "parse_cached",
    "parse_filter",
    "properties_used",
    "tokenize",
]

Predicate = Callable[[str, str, int, dict], bool]
"""A compiled filter: ``f(pk, rk, ts, props) -> bool``."""


# --- compiler ----------------------------------------------------------------------------------

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
}
_NUMERIC = frozenset((INT32, INT64, DOUBLE))


def _true(pk: str, rk: str, ts: int, props: dict) -> bool:
    return True


def _false(pk: str, rk: str, ts: int, props: dict) -> bool:
    return False


def _compile_compare(node: Compare) -> Predicate:
    cmp, lit, prop, code = _OPS[node.op], node.value, node.prop, node.code
    if prop == "PartitionKey" or prop == "RowKey":
        if code != STRING:
            return _false
        if prop == "PartitionKey":
            return lambda pk, rk, ts, props: cmp(pk, lit)
        return lambda pk, rk, ts, props: cmp(rk, lit)
    if prop == "Timestamp":
        if code != DATETIME:
            return _false
        return lambda pk, rk, ts, props: cmp(ts, lit)
    get = dict.get
    if code in _NUMERIC:

        def numeric(pk: str, rk: str, ts: int, props: dict) -> bool:
            v = get(props, prop)
            return v is not None and v[0] in _NUMERIC and cmp(v[1], lit)

        return numeric

    def exact(pk: str, rk: str, ts: int, props: dict) -> bool:
        v = get(props, prop)
        return v is not None and v[0] == code and cmp(v[1], lit)

    return exact


KEY_SET_MIN = 4  # an ``or`` of this many point keys or more is compiled into one set lookup


def _compile_key_set(terms: list[Node]) -> Predicate:
    """The ``or`` of ``terms``, its point-key terms checked by one set lookup (what Orleans sends:
    hundreds of them), each other term as compiled."""
    keys = frozenset(kp for kp in map(key_point, terms) if kp is not None)
    rest = [f for f in (compile_filter(t) for t in terms if key_point(t) is None) if f is not _false]
    if _true in rest:
        return _true

    def in_keys(pk: str, rk: str, ts: int, props: dict) -> bool:
        return (pk, rk) in keys

    if not rest:
        return in_keys
    others = tuple(rest)
    return lambda pk, rk, ts, props: (pk, rk) in keys or any(f(pk, rk, ts, props) for f in others)


def compile_filter(node: Node | None) -> Predicate:
    """Compile an AST into a predicate ``f(pk, rk, ts, props) -> bool``; None matches everything."""
    if node is None:
        return _true
    if isinstance(node, Compare):
        return _compile_compare(node)
    if isinstance(node, Const):
        return _true if node.value else _false
    if isinstance(node, Not):
        inner = compile_filter(node.expr)
        if inner is _true or inner is _false:
            return _false if inner is _true else _true
        return lambda pk, rk, ts, props: not inner(pk, rk, ts, props)
    if isinstance(node, Or):
        terms = chain_terms(node)
        if sum(1 for t in terms if key_point(t) is not None) >= KEY_SET_MIN:
            return _compile_key_set(terms)
    left, right = compile_filter(node.left), compile_filter(node.right)
    if isinstance(node, And):
        if left is _false or right is _false:
            return _false
        if left is _true:
            return right
        if right is _true:
            return left
        return lambda pk, rk, ts, props: left(pk, rk, ts, props) and right(pk, rk, ts, props)
    if left is _true or right is _true:
        return _true
    if left is _false:
        return right
    if right is _false:
        return left
    return lambda pk, rk, ts, props: left(pk, rk, ts, props) or right(pk, rk, ts, props)


CACHED_FILTER_CHARS = 4096  # longer filters (hundreds of point keys, each query its own) are not memoised


@lru_cache(maxsize=1024)
def _compile_memo(text: str) -> tuple[Node | None, Predicate]:
    node = parse_filter(text)
    return node, compile_filter(node)


def parse_cached(text: str | None) -> Node | None:
    """The AST of a filter (None for none), memoised with its predicate unless long (then only
    parsed: a caller that plans scans needs no predicate)."""
    if text is None:
        return None
    if len(text) > CACHED_FILTER_CHARS:
        return parse_filter(text)
    return _compile_memo(text)[0]


def compile_cached(text: str | None) -> tuple[Node | None, Predicate]:
    """Parse and compile a filter, memoised unless it is long (a cache of 1024 filters of 64 KiB
    would hold 64 MiB); None (no filter) gives ``(None, always-true)``."""
    if text is None:
        return None, _true
    if len(text) > CACHED_FILTER_CHARS:
        node = parse_filter(text)
        return node, compile_filter(node)
    return _compile_memo(text)
