"""Shared by unit tests of frontend requests asked of every range of a table (``test_index_write.py``,
``test_cut.py``): a frontend's map of one table cut at given PartitionKeys."""

from __future__ import annotations

from frontend.routing import MapCache


def one_table_map(table: str, lows: list[str], version: int) -> MapCache:
    """A map of ``table`` whose ranges start at ``lows`` (the first ``""``), ids ``r<version>-<i>``, all served by
    one server."""
    cache = MapCache()
    highs = lows[1:] + [None]
    cache.apply({"version": version, "tables": [table], "servers": {"s1": "tcp://a"},
                 "ranges": [{"id": f"r{version}-{i}", "table": table, "low": lo, "high": hi, "epoch": 1,
                             "primary": "s1"} for i, (lo, hi) in enumerate(zip(lows, highs, strict=True))]})
    return cache
