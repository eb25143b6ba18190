"""The coordinator's durable state: catalog, partition map, operation intents and events.

One RocksDB (opened through the one raw-mode helper) under ``<data-dir>/coordinator``; values are
msgpack. Every change is one synced WriteBatch, so a crash leaves either the old or the new state.
"""

from __future__ import annotations

import os
from typing import Any

import msgpack
from rocksdict import WriteBatch, WriteOptions

from partition_server.storage import open_range_db


class MetaStore:
    """Atomic, synced writes of msgpack values under byte keys."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, "coordinator")
        os.makedirs(data_dir, exist_ok=True)
        self.db = open_range_db(self.path)
        self._wo = WriteOptions()
        self._wo.sync = True

    def items(self, prefix: bytes = b"") -> list[tuple[bytes, Any]]:
        """Every (key, value) under a prefix, in key order."""
        out = []
        for k, v in self.db.items(from_key=prefix):
            if not k.startswith(prefix):
                break
            out.append((k, msgpack.unpackb(v, raw=False, strict_map_key=False)))
        return out

    def commit(self, puts: dict[bytes, Any], deletes: list[bytes] = ()) -> None:  # type: ignore[assignment]
        """Write puts and deletes as one synced batch."""
        wb = WriteBatch(raw_mode=True)
        for k in deletes:
            wb.delete(k)
        for k, v in puts.items():
            wb.put(k, msgpack.packb(v, use_bin_type=True))
        self.db.write(wb, self._wo)

    def checkpoint(self, path: str) -> dict[str, Any]:
        """A consistent copy of the meta store at ``path`` (flush, then hard links); returns
        ``{"ms", "files", "bytes", "linked"}``. Call under the coordinator's lock."""
        from partition_server.checkpoint import checkpoint_db

        self.db.flush(True)
        return checkpoint_db(self.db, path)

    def close(self) -> None:
        """Release the directory."""
        self.db.close()
