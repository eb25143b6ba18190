"""The entity-group rules a batch is checked against before any data is read
(:func:`partition_server.store.range_ops.check_batch_shape`): a list of at most 100 ops, one PartitionKey,
each row once, and only TableErrors, naming the op, for whatever is sent."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition_server.store import range_ops
from rangetable.errors import TableError
from tests.unit.batch_cases import StrSub

SHAPE_CASES: list[tuple[Any, Any]] = [
    (None, ("InvalidInput", "A batch is a list of operations.", None)), ({}, ("InvalidInput", "A batch is a list of operations.", None)),
    ("x", ("InvalidInput", "A batch is a list of operations.", None)), ((), ("InvalidInput", "A batch is a list of operations.", None)),
    ([], "ok"), ([{"op": "insert", "pk": "a", "rk": "b"}] * 101, ("InvalidInput", None, 0)),
    ([None], ("InvalidInput", "An operation needs 'op', 'pk' and 'rk'.", 0)), ([5], ("InvalidInput", None, 0)),
    ([["pk", "rk"]], ("InvalidInput", None, 0)), ([{"pk": "a"}], ("InvalidInput", None, 0)), ([{"rk": "a"}], ("InvalidInput", None, 0)),
    ([{"pk": "a", "rk": ["x"]}], ("InvalidInput", "The RowKey must be a string.", 0)),
    ([{"pk": float("nan"), "rk": "a"}] * 2, ("CommandsInBatchActOnDifferentPartitions", None, 1)),
    ([{"pk": 1, "rk": "a"}, {"pk": 1.0, "rk": "b"}], "ok"), ([{"pk": "a", "rk": "x"}, {"pk": StrSub("a"), "rk": "y"}], "ok"),
    ([{"pk": "a", "rk": "x"}, {"pk": "a", "rk": "x"}], ("InvalidDuplicateRow", None, 1)),
]


@pytest.mark.parametrize(("ops", "want"), SHAPE_CASES)
def test_batch_shape(ops, want):
    """The entity-group rules that need no data: a list of at most 100 ops, one PartitionKey, rows once."""
    try:
        range_ops.check_batch_shape(ops)
        got: Any = "ok"
    except TableError as e:
        got = (e.error_code, e.message if want[1] is not None else None, e.index)
    assert got == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({"pk": st.sampled_from(["a", "a", "b", 1]),
                                       "rk": st.sampled_from(["x", "y", "z", 1, ("t",)])}), min_size=1, max_size=8))
def test_batch_shape_raises_only_table_errors(ops):
    try:
        range_ops.check_batch_shape(ops)
    except TableError as e:
        assert e.index is not None and 0 <= e.index < len(ops)
