"""Conditions on column values and atomic counters: the rangetable extension of a write.

A write operation (:class:`rangetable.messages.WriteOp`) may carry, besides Azure's ETag condition:

* ``expect``: ``"exists"`` or ``"absent"`` (``"ignore"`` or absent: no expectation) — whether the row
  must exist before the write;
* ``cond``: a condition on the current entity in the OData ``$filter`` language
  (``stock ge 1 and status eq 'open'``), with Azure's rule that a comparison with a missing property
  is false. On a row that does not exist it is evaluated on an entity holding only its keys (so
  ``stock ge 1`` fails and ``not (stock ge 1)`` holds; a Timestamp comparison is false);
* ``incr``: counters, ``{name: [type code, amount]}``: each adds a signed amount to an Int32, Int64
  or Double property of the current entity (a missing one starts at 0 with the amount's type);
  overflow of Int32/Int64 (or a Double leaving the finite numbers) is ``CounterOverflow``, never a
  wrap. The answer of the write is the entity written, so it carries the new values.

The partition server checks the expectation and the condition against the entity it is about to
change, in the same step as the write (the range store's lock), then Azure's rules of the operation's
kind, then adds the counters. A failed expectation or condition is ``ConditionCheckFailed`` (412),
whose message names the condition; inside an entity group transaction it names the operation's index
and nothing is written (:func:`partition_server.store.range_ops.evaluate_batch`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from rangetable.edm import DOUBLE, INT32, INT32_MAX, INT32_MIN, INT64, INT64_MAX, INT64_MIN, TYPE_NAMES
from rangetable.entity import RESERVED_NAMES
from rangetable.errors import TableError
from rangetable.filter import Compare, Const, Node, Not, Predicate, compile_filter, parse_filter

FIELDS = frozenset(("cond", "expect", "incr"))
"""The op fields of this extension; an op holding none of them is a plain Azure write."""
EXPECTATIONS = ("exists", "absent", "ignore")
COUNTER_CODES = frozenset((INT32, INT64, DOUBLE))
MAX_CONDITION_CHARS = 4096
_SHOWN_CHARS = 200  # of a condition, in the message of its failure
_LIMITS = {INT32: (INT32_MIN, INT32_MAX), INT64: (INT64_MIN, INT64_MAX)}


class Guard(NamedTuple):
    """The extension fields of one write, checked: what :func:`check` and :func:`add_counters` take."""

    expect: str | None  # "exists", "absent" or None
    text: str | None  # the condition as given
    present: Predicate | None  # the condition, for a row that exists
    absent: Predicate | None  # the condition, for a row that does not (only its keys to compare)
    counters: dict[str, list[Any]] | None  # name -> [type code, amount]


def _invalid(message: str) -> TableError:
    return TableError("InvalidInput", message)


def _without_row(node: Node) -> Node:
    """``node`` for a row that does not exist: every Timestamp comparison is false (properties are
    missing anyway, so their comparisons are false already)."""
    if isinstance(node, Compare):
        return Const(False) if node.prop == "Timestamp" else node
    if isinstance(node, Not):
        return Not(_without_row(node.expr))
    if isinstance(node, Const):
        return node
    return type(node)(_without_row(node.left), _without_row(node.right))


@lru_cache(maxsize=1024)
def compile_condition(text: str) -> tuple[Predicate, Predicate]:
    """The condition ``text`` compiled for a row that exists and for one that does not; InvalidInput
    (with the position, as for ``$filter``) when it does not parse."""
    if len(text) > MAX_CONDITION_CHARS:
        raise _invalid(f"A condition is at most {MAX_CONDITION_CHARS} characters.")
    if not text.strip():
        raise _invalid("The condition is empty.")
    node = parse_filter(text)
    return compile_filter(node), compile_filter(_without_row(node))


def read_counters(incr: Any, props: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The ``incr`` field checked: a non-empty map of property name to ``[code, amount]`` with an
    Int32, Int64 or Double code and an amount of that type, no name also set by ``props``."""
    if not isinstance(incr, dict) or not incr:
        raise _invalid("Counters are a non-empty map of property name to [type, amount].")
    for name, pair in incr.items():
        if type(name) is not str or name in RESERVED_NAMES:
            raise _invalid(f"{name!r} cannot be a counter.")
        if name in props:
            raise _invalid(f"The property {name!r} is both set and counted.")
        if not isinstance(pair, list | tuple) or len(pair) != 2 or pair[0] not in COUNTER_CODES:
            raise _invalid(f"The counter {name!r} needs an Edm.Int32, Edm.Int64 or Edm.Double amount.")
        code, amount = pair
        if type(amount) is bool or not isinstance(amount, int | float):
            raise _invalid(f"The amount of the counter {name!r} is not a number.")
        if code == DOUBLE:
            if not math.isfinite(amount):
                raise _invalid(f"The amount of the counter {name!r} is not finite.")
        elif type(amount) is not int or not _LIMITS[code][0] <= amount <= _LIMITS[code][1]:
            raise _invalid(f"The amount of the counter {name!r} is not a valid {TYPE_NAMES[code]}.")
    return {name: list(pair) for name, pair in incr.items()}


def read_guard(op: Mapping[str, Any], kind: str, props: Mapping[str, Any]) -> Guard | None:
    """The extension fields of op dict ``op`` (of ``kind``, writing ``props``) as a :class:`Guard`, or
    None when it has none; InvalidInput when one is malformed."""
    if FIELDS.isdisjoint(op):
        return None
    text, expect, incr = op.get("cond"), op.get("expect"), op.get("incr")
    if text is None and expect is None and incr is None:
        return None
    if expect is not None and expect not in EXPECTATIONS:
        raise _invalid(f"expect must be one of {', '.join(EXPECTATIONS)}, not {expect!r}.")
    present = absent = None
    if text is not None:
        if type(text) is not str:
            raise _invalid("A condition is a string in the $filter language.")
        present, absent = compile_condition(text)
    counters = None
    if incr is not None:
        if kind == "delete":
            raise _invalid("A delete cannot carry counters.")
        counters = read_counters(incr, props)
    return Guard(None if expect == "ignore" else expect, text, present, absent, counters)


def check(guard: Guard, pk: str, rk: str, stored: list | None) -> None:
    """Raise ConditionCheckFailed unless the expectation and the condition of ``guard`` hold for the
    row (pk, rk), whose stored value is ``stored`` (``[ts, props]`` decoded, None: no row)."""
    if stored is None:
        if guard.expect == "exists":
            raise TableError("ConditionCheckFailed", "The entity does not exist (the write expects it to).")
        if guard.absent is not None and not guard.absent(pk, rk, 0, {}):
            raise failed(guard.text, "the entity does not exist")
        return
    if guard.expect == "absent":
        raise TableError("ConditionCheckFailed", "The entity exists (the write expects it not to).")
    if guard.present is not None and not guard.present(pk, rk, stored[0], stored[1]):
        raise failed(guard.text, None)


def failed(text: str | None, why: str | None) -> TableError:
    """ConditionCheckFailed naming the condition ``text`` (shortened when long)."""
    shown = text if text is None or len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"
    return TableError("ConditionCheckFailed", f"The condition {shown!r} is not met"
                      + (f" ({why})." if why else " by the current entity."))


def add_counters(counters: dict[str, list[Any]], stored: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """The new values of ``counters`` added to the ``stored`` properties (a missing one starts at 0
    with its amount's type); InvalidInput for a property that is not a number (or a Double amount to
    an integer), CounterOverflow when a result leaves its type's range."""
    out: dict[str, list[Any]] = {}
    for name, (acode, amount) in counters.items():
        cur = stored.get(name)
        if cur is None:
            code, base = acode, 0
        else:
            code, base = cur[0], cur[1]
            if code not in COUNTER_CODES:
                raise _invalid(f"The property {name!r} is {TYPE_NAMES[code]}; a counter needs "
                               "Edm.Int32, Edm.Int64 or Edm.Double.")
            if acode == DOUBLE and code != DOUBLE:
                raise _invalid(f"A Double amount cannot be added to the {TYPE_NAMES[code]} property {name!r}.")
        if code == DOUBLE:
            value: Any = float(base) + amount
            if not math.isfinite(value):
                raise TableError("CounterOverflow", f"The counter {name!r} would leave the finite Edm.Double range.")
        else:
            value = base + amount
            low, high = _LIMITS[code]
            if not low <= value <= high:
                raise TableError("CounterOverflow",
                                 f"The counter {name!r} would overflow {TYPE_NAMES[code]} ({base} + {amount}).")
        out[name] = [code, value]
    return out
