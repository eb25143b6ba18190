"""Secondary-index definitions on the coordinator. Pure data, no sockets.

A definition (:class:`rangetable.index_def.IndexDef`, wire form) is stored under ``index/<table lower>/<name
lower>`` and kept in the partition map (:attr:`coordinator.map.partition_map.PartitionMap.indexes`), so it is
loaded, followed by a standby and published with the map like the catalog; it is changed by
:mod:`coordinator.control.operations` (``create_index``, ``drop_index``, ``index_ready``, ``delete_table``).

Who applies an index's changes is its claim (:mod:`coordinator.map.claims`).
"""

from __future__ import annotations

INDEX_PREFIX = b"index/"


def index_key(table: str, name: str) -> bytes:
    """Meta-store key of an index's definition (case-insensitive)."""
    return INDEX_PREFIX + f"{table.lower()}/{name.lower()}".encode()
