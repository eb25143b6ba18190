"""A scan's byte prefilter: what a stored value must contain for a ``$filter`` to be able to match it.

A fast path (the plain path — decode the value, run the predicate — is what every row that passes still takes,
and ``tests/unit/test_prefilter.py`` checks both give the same pages). A stored value is
``msgpack([ts, {name: [type code, value], ...}])`` (:func:`partition_server.store.fast_path.pack_value`), and a
map's key is followed at once by its value, so a row where ``prop eq literal`` holds contains the bytes
``pack(prop) + pack([code, value])`` for one of the stored forms equal to the literal. For every equality
that must hold — the ``and``-ed comparisons at the top of the filter, on a property other than the keys and
Timestamp, of a String, Boolean or number — :func:`needles` lists those forms; a row holding none of one of
them is skipped without being decoded (a substring search in C, against decoding every property and running
the predicate). A row that holds them all may still fail (the bytes can sit inside another value): the
predicate decides it as before.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from rangetable import protocol
from rangetable.edm import BOOLEAN, DOUBLE, INT32, INT64, STRING
from rangetable.filter_syntax import And, Compare, Node

Needles = tuple[tuple[bytes, ...], ...]  # every inner tuple: one of its byte strings must occur in the value

_INT32 = range(-(2**31), 2**31)
_INT64 = range(-(2**63), 2**63)
_KEYS = frozenset(("PartitionKey", "RowKey", "Timestamp"))


def _forms(node: Compare) -> list[list[Any]]:
    """The stored ``[code, value]`` forms that equal the literal of ``prop eq literal``; [] when not known."""
    code, lit = node.code, node.value
    if code == STRING and isinstance(lit, str) or code == BOOLEAN and isinstance(lit, bool):
        return [[code, lit]]
    if code not in (INT32, INT64, DOUBLE) or isinstance(lit, bool) or not isinstance(lit, int | float):
        return []
    if isinstance(lit, float) and not math.isfinite(lit):
        return []  # NaN equals nothing and infinities are not stored as numbers of other types: no prefilter
    try:
        as_float = float(lit)
    except OverflowError:
        return []
    forms: list[list[Any]] = []
    if lit == int(lit):  # the integer forms first: an integer literal is most often compared with integers
        n = int(lit)
        if n in _INT32:
            forms.append([INT32, n])
        if n in _INT64:
            forms.append([INT64, n])
    forms.append([DOUBLE, as_float])
    if as_float == 0.0:
        forms.append([DOUBLE, -math.copysign(0.0, as_float)])  # the other zero: equal, but packed otherwise
    return forms


def needles(node: Node | None) -> Needles:
    """The byte strings of :func:`_forms` for each equality of ``node`` that must hold (see the module
    docstring); () when there is none to look for."""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, And):
            stack += [n.right, n.left]
        elif isinstance(n, Compare) and n.op == "eq" and n.prop not in _KEYS:
            forms = _forms(n)
            if forms:
                key = protocol.pack(n.prop)
                out.append(tuple(key + protocol.pack(f) for f in forms))
    return tuple(out)


@lru_cache(maxsize=1024)
def matcher(wanted: Needles) -> Callable[[bytes], bool]:
    """A test of a stored value: False when it lacks every form of one group of ``wanted`` (no filter they came
    from can match it). Each group of several forms is one compiled alternation: one search in C per group."""
    if len(wanted) == 1 and len(wanted[0]) == 1:  # one byte string (an equality on a String): a plain `in`
        needle = wanted[0][0]
        return lambda value: needle in value
    searches = [re.compile(b"|".join(re.escape(n) for n in group)).search for group in wanted]
    if len(searches) == 1:
        search = searches[0]
        return lambda value: search(value) is not None

    def test(value: bytes) -> bool:
        for search in searches:
            if search(value) is None:
                return False
        return True

    return test
