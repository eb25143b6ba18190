"""Conditions on column values and atomic counters (rangetable/write_conditions.py) on the partition
server's write path: the pure rules, single writes and entity group transactions on a real range store
(atomic, naming the failing op, exactly-once under a repeated request id), and the batch fast path
deciding exactly as the plain evaluation for batches that carry conditions and counters.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partition_server.store import fast_path, range_ops
from partition_server.store.range_store import RangeStore
from rangetable import write_conditions as wc
from rangetable.edm import DOUBLE, INT32, INT32_MAX, INT64, INT64_MAX, INT64_MIN, STRING
from rangetable.errors import TableError
from tests.unit.batch_cases import NAMES, make_batch, outcome, plain_batch


@pytest.fixture
def store(tmp_path):
    with RangeStore.open(tmp_path / "r") as s:
        yield s


def guard(**fields):
    return wc.read_guard(fields, "merge", {})


def code_of(fn, *args, **kwargs) -> str | None:
    try:
        fn(*args, **kwargs)
    except TableError as e:
        return e.error_code
    return None


# --- the pure rules ---------------------------------------------------------------------------------


def test_no_extension_fields_no_guard():
    assert wc.read_guard({"op": "merge", "pk": "p", "rk": "r", "props": {}, "if_match": None}, "merge", {}) is None
    assert wc.read_guard({"cond": None, "expect": None, "incr": None}, "merge", {}) is None


@pytest.mark.parametrize("fields", [
    {"expect": "maybe"}, {"cond": 5}, {"cond": ""}, {"cond": "stock ge"}, {"cond": "x" * 5000},
    {"incr": {}}, {"incr": []}, {"incr": {"n": [STRING, 1]}}, {"incr": {"n": [INT32, 2**31]}},
    {"incr": {"n": [INT32, 1.5]}}, {"incr": {"n": [INT32, True]}}, {"incr": {"n": [DOUBLE, float("nan")]}},
    {"incr": {"PartitionKey": [INT32, 1]}}, {"incr": {"n": [INT32]}}, {"incr": {5: [INT32, 1]}},
])
def test_malformed_fields_are_invalid_input(fields):
    assert code_of(wc.read_guard, fields, "merge", {}) == "InvalidInput"


def test_counted_and_set_at_once_or_on_a_delete_is_invalid():
    assert code_of(wc.read_guard, {"incr": {"n": [INT32, 1]}}, "merge", {"n": [INT32, 5]}) == "InvalidInput"
    assert code_of(wc.read_guard, {"incr": {"n": [INT32, 1]}}, "delete", {}) == "InvalidInput"


def test_condition_on_a_present_row_follows_azure_missing_property_rule():
    g = guard(cond="stock ge 1 and status eq 'open'")
    wc.check(g, "p", "r", [5, {"stock": [INT64, 3], "status": [STRING, "open"]}])
    for props in ({"stock": [INT32, 0], "status": [STRING, "open"]}, {"status": [STRING, "open"]},
                  {"stock": [STRING, "9"], "status": [STRING, "open"]}):
        with pytest.raises(TableError) as e:
            wc.check(g, "p", "r", [5, props])
        assert e.value.error_code == "ConditionCheckFailed" and e.value.status_code == 412
        assert "stock ge 1 and status eq 'open'" in e.value.message
    wc.check(guard(cond="not (stock ge 1)"), "p", "r", [5, {}])  # a missing property: the comparison is false


def test_condition_on_a_missing_row_sees_only_its_keys():
    wc.check(guard(cond="PartitionKey eq 'p' and not (stock ge 1)"), "p", "r", None)
    for cond in ("stock ge 1", "Timestamp lt datetime'2999-01-01T00:00:00Z'", "RowKey eq 'other'"):
        assert code_of(wc.check, guard(cond=cond), "p", "r", None) == "ConditionCheckFailed"
    wc.check(guard(cond="not (Timestamp lt datetime'2999-01-01T00:00:00Z')"), "p", "r", None)


def test_expectations():
    row = [5, {}]
    wc.check(guard(expect="exists"), "p", "r", row)
    wc.check(guard(expect="absent"), "p", "r", None)
    wc.check(guard(expect="ignore"), "p", "r", None)
    assert code_of(wc.check, guard(expect="exists"), "p", "r", None) == "ConditionCheckFailed"
    assert code_of(wc.check, guard(expect="absent"), "p", "r", row) == "ConditionCheckFailed"


def test_counters_types_and_overflow():
    stored = {"i": [INT32, 5], "l": [INT64, 7], "d": [DOUBLE, 0.5], "s": [STRING, "x"]}
    got = wc.add_counters({"i": [INT32, -6], "l": [INT32, 1], "d": [INT32, 2], "new": [INT64, -3],
                           "f": [DOUBLE, 1.5]}, stored)
    assert got == {"i": [INT32, -1], "l": [INT64, 8], "d": [DOUBLE, 2.5], "new": [INT64, -3], "f": [DOUBLE, 1.5]}
    assert type(got["d"][1]) is float
    assert wc.add_counters({"i": [INT64, INT32_MAX - 5]}, stored) == {"i": [INT32, INT32_MAX]}
    assert code_of(wc.add_counters, {"i": [INT64, INT32_MAX - 4]}, stored) == "CounterOverflow"
    assert code_of(wc.add_counters, {"l": [INT64, INT64_MAX]}, stored) == "CounterOverflow"
    assert code_of(wc.add_counters, {"l": [INT64, INT64_MIN]}, {"l": [INT64, -1]}) == "CounterOverflow"
    assert code_of(wc.add_counters, {"d": [DOUBLE, 1.7e308]}, {"d": [DOUBLE, 1.7e308]}) == "CounterOverflow"
    assert code_of(wc.add_counters, {"s": [INT32, 1]}, stored) == "InvalidInput"
    assert code_of(wc.add_counters, {"i": [DOUBLE, 1.0]}, stored) == "InvalidInput"


# --- on a range store ---------------------------------------------------------------------------------


def merge(rk, **fields):
    return {"op": "merge", "pk": "p", "rk": rk, "props": {}, "if_match": None, **fields}


def test_conditional_decrement_stops_at_zero(store):
    store.write({"op": "insert", "pk": "p", "rk": "r", "props": {"stock": [INT32, 3]}, "if_match": None})
    results = []
    for _ in range(5):
        try:
            results.append(store.write(merge("r", cond="stock ge 1", incr={"stock": [INT32, -1]})).props["stock"])
        except TableError as e:
            results.append(e.error_code)
    assert results == [[INT32, 2], [INT32, 1], [INT32, 0], "ConditionCheckFailed", "ConditionCheckFailed"]
    assert store.get("p", "r").props == {"stock": [INT32, 0]}


def test_every_kind_takes_conditions(store):
    base = {"pk": "p", "rk": "r", "if_match": None}
    assert code_of(store.write, {**base, "op": "insert", "props": {}, "cond": "a eq 1"}) == "ConditionCheckFailed"
    store.write({**base, "op": "insert", "props": {"a": [INT32, 1]}, "cond": "not (a eq 1)"})
    for kind in ("replace", "merge", "insert_or_replace", "insert_or_merge", "delete"):
        op = {**base, "op": kind, "props": None if kind == "delete" else {"a": [INT32, 1]}, "cond": "a eq 2"}
        assert code_of(store.write, op) == "ConditionCheckFailed", kind
    store.write({**base, "op": "insert_or_replace", "props": {"a": [INT32, 2]}, "expect": "exists"})
    store.write({**base, "op": "delete", "props": None, "cond": "a eq 2"})
    assert store.get("p", "r") is None
    # the kind's own rules still hold after the extension's checks pass
    assert code_of(store.write, {**base, "op": "merge", "props": {}, "expect": "absent"}) == "ResourceNotFound"


def test_counters_on_a_missing_row_start_at_zero_and_replace_keeps_counting(store):
    e = store.write({"op": "insert_or_merge", "pk": "p", "rk": "c", "props": {"tag": [STRING, "x"]}, "if_match": None,
                     "incr": {"n": [INT64, -2], "d": [DOUBLE, 0.25]}})
    assert e.props == {"tag": [STRING, "x"], "n": [INT64, -2], "d": [DOUBLE, 0.25]}
    e = store.write({"op": "replace", "pk": "p", "rk": "c", "props": {}, "if_match": "*", "incr": {"n": [INT32, 5]}})
    assert e.props == {"n": [INT64, 3]}
    assert code_of(store.write, merge("c", incr={"n": [INT64, INT64_MAX]})) == "CounterOverflow"
    assert store.get("p", "c").props == {"n": [INT64, 3]}


def test_a_failing_condition_in_a_batch_names_its_op_and_writes_nothing(store):
    store.write({"op": "insert", "pk": "p", "rk": "a", "props": {"stock": [INT32, 1]}, "if_match": None})
    ops = [merge("a", incr={"stock": [INT32, -1]}),
           {"op": "insert", "pk": "p", "rk": "b", "props": {}, "if_match": None},
           merge("a2", expect="exists")]
    with pytest.raises(TableError) as e:
        store.batch(ops)
    assert (e.value.error_code, e.value.index) == ("ConditionCheckFailed", 2)
    assert store.get("p", "a").props == {"stock": [INT32, 1]} and store.get("p", "b") is None
    ops[2] = merge("a3", cond="x eq 1")
    ops[2]["op"] = "insert_or_merge"
    with pytest.raises(TableError) as e:
        store.batch(ops)
    assert (e.value.error_code, e.value.index) == ("ConditionCheckFailed", 2) and "'x eq 1'" in e.value.message
    ops[2]["cond"] = "not (x eq 1)"
    out = store.batch(ops)
    assert out[0].props == {"stock": [INT32, 0]} and store.get("p", "a3") is not None


def test_a_repeated_request_id_counts_once(store):
    store.write({"op": "insert", "pk": "p", "rk": "r", "props": {"n": [INT32, 10]}, "if_match": None})
    op = merge("r", cond="n ge 1", incr={"n": [INT32, -1]})
    first = store.write(op, request_id="rid-1", wire=True)
    assert store.write(op, request_id="rid-1", wire=True) == first
    assert store.get("p", "r").props == {"n": [INT32, 9]}
    batch = [merge("r", incr={"n": [INT32, -4]})]
    first_b = store.batch(batch, request_id="rid-2", answer="wire")
    assert store.batch(batch, request_id="rid-2", answer="wire") == first_b
    assert store.get("p", "r").props == {"n": [INT32, 5]}


# --- the batch fast path decides as the plain evaluation --------------------------------------------

CONDITIONS = ["qty ge 0", "not (qty ge 0)", "price lt 1e300 or big gt 0", "name eq 'x' and active eq true",
              "Timestamp gt datetime'2000-01-01T00:00:00Z'", "RowKey ne ''", "qty ge", 7]


def with_guards(rng: random.Random, ops: list) -> list:
    """``ops`` with expectations, conditions and counters sprinkled over them (some malformed)."""
    for op in ops:
        if not isinstance(op, dict) or rng.random() < 0.4:
            continue
        r = rng.random()
        if r < 0.3:
            op["cond"] = rng.choice(CONDITIONS)
        elif r < 0.5:
            op["expect"] = rng.choice(["exists", "absent", "ignore", "sometimes"])
        else:
            name = rng.choice(["qty", "big", "price", "name", "fresh"])
            code = rng.choice([INT32, INT64, DOUBLE])
            amount = rng.choice([1, -1, 2**31, INT64_MAX]) if code != DOUBLE else rng.choice([0.5, -2.0])
            op["incr"] = {name: [code, amount]}
            if rng.random() < 0.3:
                op["cond"] = rng.choice(CONDITIONS)
    return ops


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(0, 10_000), st.booleans(), st.booleans())
def test_guarded_batches_fast_equals_plain(rng, case, wire_, probe):
    ops, stored = make_batch(rng, case)
    if isinstance(ops, list):
        with_guards(rng, ops)
    a = outcome(range_ops.check_batch_shape, plain_batch, ops, stored, wire_)
    b = outcome(range_ops.check_batch_shape, fast_path.prepare_batch, ops, stored, wire_, probe)
    assert a == b, (case, ops)


def test_guarded_batches_reach_both_outcomes():
    rng = random.Random(1)
    seen = set()
    for case in range(400):
        ops, stored = make_batch(rng, case)
        with_guards(rng, ops)
        res = outcome(range_ops.check_batch_shape, fast_path.prepare_batch, ops, stored, True)
        seen.add(res[1] if res[0] == "error" else res[0])
    assert {"ok", "ConditionCheckFailed", "CounterOverflow", "InvalidInput"} <= seen
    assert "qty" in NAMES and "big" in NAMES and "price" in NAMES
