"""What the coordinator needs of a meta store: the RocksDB one (:mod:`coordinator.meta.store`) or the
etcd one (:mod:`coordinator.meta.etcd_store`), both of which satisfy :class:`MetaStoreLike` structurally."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class MetaStoreLike(Protocol):
    """The meta store (RocksDB: :mod:`coordinator.meta.store`, or etcd: :mod:`coordinator.meta.etcd_store`)."""

    name: str

    def items(self, prefix: bytes = b"") -> list[tuple[bytes, Any]]:
        """Every record whose key starts with ``prefix``, in key order."""
        ...

    def commit(self, puts: dict[bytes, Any], deletes: Sequence[bytes] = ...) -> None:
        """Write ``puts`` and delete ``deletes`` in one durable write."""
        ...

    def checkpoint(self, path: str) -> dict[str, Any]:
        """A consistent copy of the store in ``path``."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...
