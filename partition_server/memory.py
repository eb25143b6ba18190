"""What a partition server holds in memory, by kind, for its metrics and the soak's table.

``rangetable_server_memory_bytes{kind}``: the replica logs' rings (``replica_logs``; their batch count is
``rangetable_server_replica_log_batches``), and every open store's memtables and table readers summed
over its ranges (``memtables``, ``table_readers``: RocksDB's ``cur-size-all-mem-tables`` and
``estimate-table-readers-mem``). Read by the metrics thread while the loop
changes the sets: it copies them first and skips a store closed meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from partition_server.store.replica_log import ReplicaLog


class _Store(Protocol):
    def memory(self) -> dict[str, int]: ...


def ring_totals(logs: Iterable[ReplicaLog]) -> dict[str, int]:
    """Bytes and batches held by ``logs`` (each counted once even if two roles share it)."""
    seen: dict[int, ReplicaLog] = {id(lg): lg for lg in logs}
    return {"replica_logs": sum(lg.nbytes for lg in seen.values()),
            "replica_log_batches": sum(len(lg.entries) for lg in seen.values())}


def store_totals(stores: Iterable[_Store]) -> dict[str, int]:
    """Memtable and table-reader bytes summed over ``stores`` (a closed or failing store counts 0)."""
    out = {"memtables": 0, "table_readers": 0}
    for st in stores:
        try:
            m = st.memory()
        except Exception:  # closed between the copy and the read (RangeBusy), or a DB error
            continue
        for k in out:
            out[k] += int(m.get(k, 0))
    return out


def server_memory(ranges: Any) -> dict[str, int]:
    """The memory figures of a :class:`~partition_server.ranges.RangeSet` (see the module docstring)."""
    served = list(ranges.open.values())
    repl = ranges.repl
    logs: list[ReplicaLog] = []
    if repl is not None:
        logs += [p.outbox.log for p in list(repl.primaries.values())]
        logs += [f.log for f in list(repl.following.values())]
    return {**ring_totals(logs), **store_totals(s.store for s in served)}
