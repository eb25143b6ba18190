"""Shared by the tests of a secondary cluster (``test_cut.py``, ``test_geo_applier.py``): a source range with its
change feed on, random histories written to it with the source's state after each, and a store's state as of a
cut."""

from __future__ import annotations

import random
from pathlib import Path

from partition_server.store.range_store import RangeStore
from rangetable.errors import TableError
from tests.unit.range_store_helpers import P


def source_store(tmp_path: Path, name: str = "src") -> RangeStore:
    """A range store with its change feed on, in ``tmp_path / name``."""
    s = RangeStore.open(tmp_path / name)
    s.set_feed(True)
    return s


def read_state(store: RangeStore, at: int | None = None, lo: bytes = b"",
           hi: bytes | None = None) -> dict[tuple[str, str], tuple[int, dict]]:
    """(pk, rk) -> (Timestamp, props) of every entity of ``[lo, hi)`` in ``store``, now or as of the cut ``at``."""
    entities, _ = store.scan(lo, hi, limit=100_000, at=at)
    return {(e.pk, e.rk): (e.ts, e.props) for e in entities}


def history(src: RangeStore, rng: random.Random, n: int) -> list[tuple[int, dict]]:
    """``n`` random writes and transactions on ``src``; the source's whole state after each (by Timestamp)."""
    states: list[tuple[int, dict]] = [(0, {})]
    for i in range(n):
        rk = rng.choice("abcdefgh")
        roll = rng.random()
        try:
            if roll < 0.15:  # a transaction: one Timestamp for several entities
                rks = rng.sample("abcdefgh", 3)
                src.batch([{"op": "insert_or_merge", "pk": "p", "rk": r, "props": P(v=i, t=r)} for r in rks])
            elif roll < 0.35:
                src.write({"op": "delete", "pk": "p", "rk": rk})
            elif roll < 0.65:
                src.write({"op": "insert_or_merge", "pk": rng.choice("pq"), "rk": rk, "props": P(m=i)})
            else:
                src.write({"op": "insert_or_replace", "pk": rng.choice("pq"), "rk": rk, "props": P(v=i)})
        except TableError:  # a delete of an absent entity: no change, no record
            continue
        states.append((src.last_ts, read_state(src)))
    return states


def records_of(src: RangeStore) -> list[list]:
    """Every record of ``src``'s feed, ``[ts, key, kind, value, before]`` in position order."""
    return src.read_changes(None, b"", None, 100_000).records


def position_of(record: list) -> tuple[int, bytes]:
    """The feed position ``(Timestamp, key)`` of a record ``[ts, key, kind, value, before]``."""
    return record[0], record[1]
