"""A request the range refused keeps its answer: a retry of its request id gets the same error, never a
new decision against what the range holds by then.

The netsplit drill found why (docs/drills.md): a client gave up on a delete during an outage and sent it
again (same request id) while the frontend was still retrying the first attempt; one attempt deleted the
row, another was answered "not found" and left no record; the client was answered, wrote the row again,
and an attempt still on its way then deleted that newer row.
"""

from __future__ import annotations

import pytest

from partition_server.store.range_store import RangeStore
from partition_server.store.request_records import refusal
from rangetable.edm import INT32
from rangetable.errors import TableError


def upsert(rk: str, n: int) -> dict:
    return {"op": "insert_or_replace", "pk": "p", "rk": rk, "props": {"n": [INT32, n]}, "if_match": None}


def delete(rk: str, if_match: str | None = None) -> dict:
    return {"op": "delete", "pk": "p", "rk": rk, "if_match": if_match}


def insert(rk: str, n: int) -> dict:
    return {"op": "insert", "pk": "p", "rk": rk, "props": {"n": [INT32, n]}}


def refused(fn, *args, **kw) -> TableError:
    with pytest.raises(TableError) as e:
        fn(*args, **kw)
    return e.value


@pytest.fixture
def store(tmp_path):
    s = RangeStore.open(tmp_path / "r")
    yield s
    s.close()


def test_a_delete_answered_not_found_does_not_delete_a_row_written_after_it(store: RangeStore) -> None:
    assert refused(store.write, delete("k3"), request_id="d-2").error_code == "ResourceNotFound"
    store.write(upsert("k3", 343), request_id="w-1")  # the client, answered, writes the row again
    again = refused(store.write, delete("k3"), request_id="d-2")  # the attempt still on its way
    assert again.error_code == "ResourceNotFound"
    assert store.get("p", "k3").props == {"n": [INT32, 343]}


def test_an_insert_refused_as_existing_is_not_applied_by_its_retry(store: RangeStore) -> None:
    store.write(upsert("a", 1))
    assert refused(store.write, insert("a", 2), request_id="i-1").error_code == "EntityAlreadyExists"
    store.write(delete("a"))
    assert refused(store.write, insert("a", 2), request_id="i-1").error_code == "EntityAlreadyExists"
    assert store.get("p", "a") is None


def test_a_failed_etag_condition_stays_failed(store: RangeStore) -> None:
    e = store.write(upsert("a", 1))
    stale = "W/\"datetime'2020-01-01T00%3A00%3A00.0000000Z'\""
    first = refused(store.write, delete("a", stale), request_id="c-1")
    assert first.error_code == "UpdateConditionNotSatisfied"
    store.write(upsert("a", 2))
    again = refused(store.write, delete("a", stale), request_id="c-1")
    assert (again.error_code, again.message) == (first.error_code, first.message)
    assert store.get("p", "a").props == {"n": [INT32, 2]} and e is not None


def test_a_refused_batch_keeps_its_error_and_index(store: RangeStore) -> None:
    ops = [upsert("a", 1), delete("b"), upsert("c", 3)]
    first = refused(store.batch, ops, request_id="b-1")
    assert (first.error_code, first.index) == ("ResourceNotFound", 1)
    store.write(upsert("b", 2))  # now the batch would succeed, were it decided again
    again = refused(store.batch, ops, request_id="b-1")
    assert (again.error_code, again.index) == ("ResourceNotFound", 1)
    assert store.get("p", "a") is None and store.get("p", "c") is None


def test_a_malformed_batch_is_refused_the_same_way_again(store: RangeStore) -> None:
    ops = [upsert("a", 1), {**upsert("b", 2), "pk": "q"}]
    first = refused(store.batch, ops, request_id="b-2")
    assert first.error_code == "CommandsInBatchActOnDifferentPartitions"
    assert refused(store.batch, ops, request_id="b-2").error_code == first.error_code


def test_a_refusal_survives_a_reopen(tmp_path) -> None:
    s = RangeStore.open(tmp_path / "r")
    refused(s.write, delete("k"), request_id="d-1")
    s.close()
    s = RangeStore.open(tmp_path / "r")
    try:
        s.write(upsert("k", 1))
        assert refused(s.write, delete("k"), request_id="d-1").error_code == "ResourceNotFound"
        assert s.get("p", "k") is not None
    finally:
        s.close()


def test_a_refusal_is_one_request_record_and_no_entity(store: RangeStore) -> None:
    before = store.stats()
    refused(store.write, delete("k"), request_id="d-1")
    after = store.stats()
    assert after["entities"] == before["entities"] == 0
    assert store._window.count == 1


def test_without_a_request_id_nothing_is_recorded(store: RangeStore) -> None:
    last = store.last_ts
    refused(store.write, delete("k"))
    assert store.last_ts == last and store._window.count == 0


def test_only_final_refusals_are_recorded() -> None:
    assert refusal(TableError("ServerBusy")) is None
    assert refusal(TableError("RangeBusy")) is None
    assert refusal(TableError("NotPrimary")) is None
    assert refusal(TableError("InternalError")) is None
    for code in ("ResourceNotFound", "EntityAlreadyExists", "UpdateConditionNotSatisfied", "ConditionCheckFailed",
                 "CounterOverflow", "InvalidInput"):
        assert refusal(TableError(code)) is not None
