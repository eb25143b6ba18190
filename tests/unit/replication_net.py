"""Replication without sockets, for unit tests: a Primary on a real RocksDB store and two Followings on
their own stores, with the messages moved by hand (:class:`Net`); the ``net`` fixture is in conftest.py."""

from __future__ import annotations

import time
from pathlib import Path

from partition_server.replication.protocol import Following, Primary
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import ReplicaLog, RingBudget
from tests.unit.range_store_helpers import P

PEERS = {"a": "ea", "b": "eb", "c": "ec"}
BY_ENDPOINT = {v: k for k, v in PEERS.items()}


class Net:
    """Primary ``a`` and followers ``b``, ``c`` of range ``r`` at epoch 1; a fixed store clock."""

    def __init__(self, tmp: Path, insync: list[str] | None = None, max_batches: int = 100_000,
                 budget: RingBudget | None = None) -> None:
        self.tmp = tmp
        self.ticks = [1000]
        self.stores = {s: self._open(s) for s in PEERS}
        self.p = Primary("r", 1, self.stores["a"], ReplicaLog(0, max_batches=max_batches, budget=budget), PEERS,
                         insync if insync is not None else ["a", "b", "c"], "a", 1, "tok")
        self.f = {s: Following("r", 1, self.stores[s], ReplicaLog(0, budget=budget), "a", "ea", "tok")
                  for s in ("b", "c")}
        self.t = time.monotonic()
        self.n = 0

    def _open(self, s: str) -> RangeStore:
        return RangeStore.open(self.tmp / s, clock=lambda: self.ticks[0])

    def write(self, k: int = 1) -> None:
        for _ in range(k):
            self.n += 1
            self.stores[self.p.me].write({"op": "insert_or_replace", "pk": f"p{self.n % 3}", "rk": f"{self.n:05d}",
                                          "props": P(n=self.n)})

    def hello(self, *who: str) -> None:
        for s in who:
            self.p.on_ack(s, self.f[s].applied, self.t)

    def sends(self, dt: float = 0.0) -> list[tuple[str, list[tuple[int, bytes]]]]:
        self.t += dt
        return [(BY_ENDPOINT[e], b) for e, b in self.p.to_send(self.t)]

    def deliver(self, msgs: list[tuple[str, list[tuple[int, bytes]]]], only: set[str] | None = None) -> None:
        for s, batches in msgs:
            if only is None or s in only:
                acked = self.f[s].apply(self.p.epoch, batches)
                assert acked >= 0
                self.p.on_ack(s, acked, self.t)

    def pump(self, only: set[str] | None = None) -> None:
        self.deliver(self.sends(), only)

    def close(self) -> None:
        for st in self.stores.values():
            st.close()
