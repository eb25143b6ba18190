"""A range of an index's entries table: entries applied with the applier's claim and feed position
(partition_server/store/index_state.py, RangeStore.apply_index) — skipped at or below the stored position,
fenced under a lower claim, kept by a split's halves and merged as the higher claim and lower position."""

from __future__ import annotations

import pytest

from partition_server.store import index_state
from partition_server.store.keys import META_INDEX
from partition_server.store.range_store import RangeStore
from rangetable.errors import TableError
from rangetable.keys import encode_key
from tests.unit.range_store_helpers import P, store_fixture  # noqa: F401  (a fixture)


def k(pk: str, rk: str = "r") -> bytes:
    return encode_key(pk, rk)


def test_admit_after_and_check() -> None:
    assert index_state.admit((0, None), 0, None)
    assert index_state.admit((3, (5, b"a")), 3, (5, b"b"))
    assert not index_state.admit((3, (5, b"b")), 3, (5, b"b"))
    assert not index_state.admit((3, (5, b"b")), 4, (4, b"z"))  # a newer claim replaying old records: skipped
    assert index_state.admit((3, (5, b"b")), 3, None)  # the build's snapshot: never skipped
    with pytest.raises(TableError) as e:
        index_state.admit((3, None), 2, None)
    assert e.value.error_code == "IndexFenced"
    assert index_state.after((3, (5, b"b")), 4, None) == (4, (5, b"b"))
    assert index_state.after((3, (5, b"b")), 3, (6, b"")) == (3, (6, b""))
    assert index_state.check(2, [7, b"k"]) == (2, (7, b"k"))
    for claim, pos in ((-1, None), ("1", None), (1, [1]), (1, ["1", b""]), (1, [1, "k"])):
        with pytest.raises(TableError):
            index_state.check(claim, pos)


def test_merged_takes_higher_claim_and_lower_position() -> None:
    a, b = index_state.pack(2, (5, b"x")), index_state.pack(3, (9, b"a"))
    assert index_state.unpack(index_state.merged(a, b)) == (3, (5, b"x"))
    assert index_state.unpack(index_state.merged(a, None)) == (2, None)
    assert index_state.merged(None, None) is None
    assert index_state.unpack(None) == (0, None)


def test_apply_index_writes_skips_and_fences(store: RangeStore) -> None:
    assert store.apply_index([(k("a"), P(q=1)), (k("b"), {})], 1, (10, k("x")))
    assert store.get("a", "r").props == P(q=1) and store.get("b", "r").props == {}
    assert store.counts().entities == 2
    assert not store.apply_index([(k("c"), {})], 1, (10, k("x")))  # already applied: nothing written
    assert store.get("c", "r") is None
    assert store.apply_index([(k("a"), None), (k("c"), {})], 2, (11, b""))
    assert store.get("a", "r") is None and store.get("c", "r") is not None
    assert store.counts().entities == 2
    with pytest.raises(TableError) as e:
        store.apply_index([(k("d"), {})], 1, (12, b""))
    assert e.value.error_code == "IndexFenced"
    assert store.apply_index([(k("d"), {})], 2, None)  # snapshot entries: no position, still fenced
    assert index_state.unpack(store._db.get(META_INDEX)) == (2, (11, b""))


def test_split_halves_keep_and_merge_unites(store: RangeStore, tmp_path) -> None:
    store.apply_index([(k(p), {}) for p in "abcdef"], 4, (20, b""))
    store.split("d", tmp_path / "L", tmp_path / "R")
    left, right = RangeStore.open(tmp_path / "L"), RangeStore.open(tmp_path / "R")
    try:
        for half in (left, right):
            assert index_state.unpack(half._db.get(META_INDEX)) == (4, (20, b""))
        assert not right.apply_index([(k("x"), {})], 4, (20, b""))
        assert right.apply_index([(k("x"), {})], 5, (25, b""))
    finally:
        left.close()
        right.close()
    RangeStore.merge(tmp_path / "L", tmp_path / "R", tmp_path / "M")
    merged = RangeStore.open(tmp_path / "M")
    try:
        assert index_state.unpack(merged._db.get(META_INDEX)) == (5, (20, b""))
        assert merged.counts().entities == 7
    finally:
        merged.close()
