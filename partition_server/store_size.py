"""How many bytes of entity data a range store holds (``RangeStore.stats()["bytes"]``: what splits,
the dashboard and ``rangetable ranges`` show), from RocksDB's properties only: cheap, approximate."""

from __future__ import annotations

from typing import Any


def data_bytes(db: Any, record_bytes: int) -> int:
    """The entity bytes of ``db``: its live SST data and its memtables (a range of tens of thousands of
    entities still in memtables is not empty), less the share of the request records (``record_bytes``
    uncompressed)."""
    live = db.property_int_value("rocksdb.estimate-live-data-size") or 0
    mem = db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
    raw = raw_sst_bytes(db.property_value("rocksdb.aggregated-table-properties") or "") + mem
    return entity_bytes(live + mem, raw, record_bytes)


def raw_sst_bytes(table_properties: str) -> int:
    """Uncompressed key + value bytes of a DB's SST files, from its ``rocksdb.aggregated-table-properties``
    text (``…; raw key size=N; … raw value size=M; …``); 0 when absent."""
    total = 0
    for field in ("raw key size=", "raw value size="):
        at = table_properties.find(field)
        if at >= 0:
            digits = table_properties[at + len(field):].split(";", 1)[0].strip()
            total += int(digits) if digits.isdigit() else 0
    return total


def entity_bytes(stored: int, raw: int, records: int) -> int:
    """The bytes of entity data in a range: ``stored`` (SST files, compressed, plus memtables) less the
    share of it that request records take, ``records`` of the ``raw`` uncompressed bytes. (Subtracting
    the records' uncompressed bytes from compressed sizes gave 0 for a range of tens of thousands of
    entities.)"""
    if raw <= 0:
        return stored
    return int(stored * (1.0 - min(1.0, records / raw)))
