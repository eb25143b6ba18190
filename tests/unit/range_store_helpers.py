"""Shared by the range store unit tests (``test_range_store.py``, ``test_range_store_scans_and_splits.py``):
a fresh store on a real RocksDB, typed props from plain values, and an insert op."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from partition_server.store.range_store import RangeStore
from rangetable.edm import INT32, STRING


@pytest.fixture(name="store")
def store_fixture(tmp_path) -> Iterator[RangeStore]:
    """A range store opened in the test's temporary dir, closed after the test."""
    s = RangeStore.open(tmp_path / "r")
    yield s
    s.close()


def P(**kw: object) -> dict:
    """Typed props from plain values (str → String, int → Int32)."""
    return {k: [STRING if isinstance(v, str) else INT32, v] for k, v in kw.items()}


def ins(pk: str, rk: str, **props: object) -> dict:
    """An insert op of ``props`` (see :func:`P`)."""
    return {"op": "insert", "pk": pk, "rk": rk, "props": P(**props)}
