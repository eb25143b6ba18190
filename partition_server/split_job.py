"""A split prepared while its range serves, then switched over in a few milliseconds.

The slow parts of a split — checkpointing the store into two directories and opening both (RocksDB
writes and syncs a MANIFEST per open: 4 ms on a quiet disk, 15–275 ms on a busy one, measured) — run
on a background thread while the parent range keeps serving. From just before the checkpoint on,
every batch the parent writes is also recorded (the store's *tee*: :class:`partition_server.store.tee.RecordingBatch`), and the
thread replays the records into the halves until few remain. The switch-over, on the server's loop
(so no write is in flight), replays the rest and hands the halves over; the range is offline only
from then until the coordinator has committed the split and loaded the halves.

Replaying a record that the checkpoint already holds is harmless: records are blind puts, deletes and
range deletes of whole values, replayed in commit order, so the halves end as they would after a
checkpoint taken at the switch-over. Each entity key goes to the half whose span holds it; meta keys (the last
Timestamp, the request-id window and its records) go to both, as a plain split keeps them in both — except the
parent's counts: each half counts itself once from its checkpoint (the smaller side scanned, on the background
thread) and then follows what each replayed write changes in it (:meth:`RangeStore.write_raw`), which is just
as harmless to repeat.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable

import rocksdict

from partition_server.store.keys import META_COUNT
from partition_server.store.range_store import RangeStore
from partition_server.store.tee import Ops, RangeEnd, add_op
from rangetable.errors import TableError
from rangetable.kernel.stats import StepClock
from rangetable.keys import META_PREFIX

CATCH_UP_ROUNDS = 20  # replays on the background thread before the switch-over takes the rest
CATCH_UP_ENOUGH = 256  # operations: fewer left over than this and the switch-over replays them


def replay(records: list[Ops], split_key: bytes,
           left: RangeStore, right: RangeStore) -> int:
    """Write recorded batches into the halves: an entity key into the half that holds it (left below
    ``split_key``), a meta key into both (not the parent's counts: each half keeps its own). Returns how
    many operations were replayed."""
    if not records:
        return 0
    batches = (rocksdict.WriteBatch(raw_mode=True), rocksdict.WriteBatch(raw_mode=True))
    families = (left.feed.family, right.feed.family)
    writes: tuple[list[tuple[bytes, bytes | None]], list[tuple[bytes, bytes | None]]] = ([], [])
    recount = False
    n = 0
    for ops in records:
        for key, value in ops:
            n += 1
            if type(value) is RangeEnd:
                recount = recount or key < META_PREFIX
                _replay_range(batches, families, key, value.end, split_key)
                continue
            if key < META_PREFIX:
                side = 0 if key < split_key else 1
                writes[side].append((key, value))  # type: ignore[arg-type]  # not a RangeEnd here
                add_op(batches[side], key, value, families[side])
            elif key != META_COUNT:
                for wb, family in zip(batches, families, strict=True):
                    add_op(wb, key, value, family)
    left.write_raw(batches[0], writes[0], recount)
    right.write_raw(batches[1], writes[1], recount)
    return n


def _replay_range(batches: tuple[rocksdict.WriteBatch, rocksdict.WriteBatch],
                  families: tuple[rocksdict.ColumnFamily, rocksdict.ColumnFamily], begin: bytes, end: bytes,
                  split_key: bytes) -> None:
    """A recorded range delete ``[begin, end)`` into the halves: its entity keys below ``split_key`` to
    the left, its other entity keys to the right, its meta keys to both (the feed's into their family)."""
    for side, lo, hi in ((0, begin, min(end, split_key)), (0, max(begin, META_PREFIX), end),
                         (1, max(begin, split_key), end)):
        if lo < hi:
            add_op(batches[side], lo, RangeEnd(hi), families[side])


class SplitJob:
    """One split of ``parent`` at ``split_pk`` in progress; ``notify`` is called (from the job's
    thread) when the preparation is done or has failed, so the server's loop calls :meth:`finish`."""

    def __init__(self, parent: RangeStore, split_pk: str, left_path: str, right_path: str,
                 notify: Callable[[], None] = lambda: None) -> None:
        self.parent = parent
        self.split_key = split_pk.encode("utf-8")
        self.paths = (left_path, right_path)
        self.notify = notify
        self.steps: dict[str, float] = {}
        self.halves: tuple[RangeStore, RangeStore] | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._prepare, name="split", daemon=True)

    def start(self) -> SplitJob:
        """Begin the preparation on a background thread."""
        self._thread.start()
        return self

    def _prepare(self) -> None:
        clock = StepClock(self.steps)
        try:
            self.parent.begin_tee(*self.paths)
            clock.step("checkpoint")
            left = RangeStore.open(self.paths[0], **self.parent.limits())
            try:
                right = RangeStore.open(self.paths[1], **self.parent.limits())
            except BaseException:
                left.close()
                raise
            self.halves = (left, right)
            clock.step("open")
            smaller = left.left_share(self.split_key) <= 0.5
            left.count_half(self.split_key, True, smaller)
            right.count_half(self.split_key, False, smaller)
            clock.step("count")
            left.drop_span(self.split_key, META_PREFIX)
            right.drop_span(b"", self.split_key)
            clock.step("drop")
            for _ in range(CATCH_UP_ROUNDS):
                if replay(self.parent.take_tee(), self.split_key, left, right) < CATCH_UP_ENOUGH:
                    break
            clock.step("catch_up")
        except BaseException as exc:  # reported by finish(), on the server's loop
            self.error = exc
        finally:
            self.done.set()
            self.notify()

    def finish(self) -> tuple[RangeStore, RangeStore]:
        """Replay the last records and return the halves, open (call with no write of the parent in
        flight: on the server's loop). Raises the preparation's failure after cleaning up."""
        self._thread.join()
        clock = StepClock(self.steps)
        tail = self.parent.stop_tee()
        if self.error is not None or self.halves is None:
            self.abort()
            err = self.error
            raise err if isinstance(err, TableError) else TableError(
                "InternalError", f"split preparation failed: {type(err).__name__}: {err}")
        left, right = self.halves
        replay(tail, self.split_key, left, right)
        left.reload_meta()
        right.reload_meta()
        clock.step("switch")
        return left, right

    def abort(self) -> None:
        """Give the split up: stop recording, close the halves and remove their directories."""
        self._thread.join()
        self.parent.stop_tee()
        if self.halves is not None:
            for half in self.halves:
                half.close()
            self.halves = None
        for path in self.paths:
            shutil.rmtree(path, ignore_errors=True)
