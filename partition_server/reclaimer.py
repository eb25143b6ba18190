"""The background thread that reclaims the space of expired entities (table TTL) and of change-feed
records older than their retention.

Each round visits the open ranges whose table has a TTL and runs bounded steps of
:meth:`~partition_server.store.range_store.RangeStore.expire_step` (backfilling a new index, else deleting
what the expiry index says has expired) until a step finds nothing or the round's time is up; each
step holds the store's write lock for one batch only, so writes go on between steps. The work is
paced: at most ``DUTY`` of the time, so a large expiry spreads out instead of starving requests.

Every :data:`TRIM_S` each serving range also trims its change feed (:meth:`RangeStore.trim_feed
<partition_server.store.range_store.RangeStore.trim_feed>`: one range delete, replicated like any batch).

Deleted entities leave tombstones; once a range has deleted a quarter of its size since its last
compaction, the thread compacts its entity span (RocksDB compacts without the GIL), so disk space
is returned soon, at an amortised cost of a few times the bytes that expired.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from partition_server.store.range_store import RangeStore
from rangetable.keys import META_PREFIX

log = logging.getLogger("rangetable.partition_server")

ROUND_S = 0.5  # a round every half second
DUTY = 0.5  # at most this share of the time working
COMPACT_SHARE = 0.25  # compact a range once it deleted this share of its size
TRIM_S = 30.0  # how often a range's change feed is trimmed to its retention


class Reclaimer:
    """Reclaims expired entities of the stores ``stores()`` returns, on a daemon thread."""

    def __init__(self, stores: Callable[[], list[RangeStore]], round_s: float = ROUND_S,
                 writes: Callable[[], bool] = lambda: True) -> None:
        self.stores = stores
        self.writes = writes  # False while the cluster's geo role takes no writes: nothing is reclaimed then
        self.round_s = round_s
        self.deleted = 0  # entities since start (metrics)
        self.deleted_bytes = 0
        self.busy_s = 0.0  # time spent working
        self._since_compact: dict[int, int] = {}  # id(store) -> bytes deleted since its last compaction
        self._trimmed: dict[int, float] = {}  # id(store) -> when its feed was last trimmed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Reclaimer:
        """Start the thread."""
        self._thread = threading.Thread(target=self._run, name="reclaim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (waits for the current step)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.round_s):
            try:
                self.round(self.round_s * DUTY)
            except Exception:  # a store closed under us, an I/O error: the next round tries again
                log.exception("reclaim round failed")

    def round(self, budget_s: float) -> int:
        """One round of at most ``budget_s`` seconds of work; returns the entities deleted."""
        t0 = time.perf_counter()
        deadline = t0 + budget_s
        total = 0
        stores = self.stores()
        self._trim(stores, t0)
        for store in stores if self.writes() else ():  # a fenced or secondary cluster reclaims nothing itself
            if not store.expiry.due:
                continue
            while time.perf_counter() < deadline:
                deleted, nbytes = store.expire_step()
                total += deleted
                self.deleted += deleted
                self.deleted_bytes += nbytes
                if nbytes:
                    self._since_compact[id(store)] = self._since_compact.get(id(store), 0) + nbytes
                if not deleted and store.expiry.cursor is None:
                    break
            self._maybe_compact(store)
        self.busy_s += time.perf_counter() - t0
        return total

    def _trim(self, stores: list[RangeStore], now: float) -> None:
        """Trim the change feed of every store not trimmed for :data:`TRIM_S` (a new one waits as long)."""
        trimmed = {id(s): self._trimmed.get(id(s), now) for s in stores}
        for store in stores:
            if now - trimmed[id(store)] >= TRIM_S:
                store.trim_feed()
                trimmed[id(store)] = now
        self._trimmed = trimmed

    def _maybe_compact(self, store: RangeStore) -> None:
        freed = self._since_compact.get(id(store), 0)
        if not freed:
            return
        size = store.stats()["bytes"]
        if freed >= COMPACT_SHARE * max(size, 1):
            self._since_compact[id(store)] = 0
            store.compact_span(b"", META_PREFIX)  # the entity keys
