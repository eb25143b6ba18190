"""Keep Python's cyclic garbage collector off the hot path of the server processes."""

from __future__ import annotations

import gc
import time


def tune_gc() -> None:
    """Freeze the start-up heap and collect young objects less often.

    A 1000-entity page allocates ~20k containers (msgpack decode, JSON encode); with the default
    thresholds each page triggers collections that walk the whole heap, which cost as much as the
    decoding itself. Our request paths create no reference cycles worth collecting promptly.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


class GcPauses:
    """The collector's pauses in this process, recorded by a ``gc.callbacks`` hook.

    Also keeps long-lived state out of later walks: after a collection of generation 1 or 2,
    everything that survived it is long-lived, and :meth:`freeze_survivors` (called from the
    process loop) moves it to the permanent generation. Without that a process holding a large
    heap that keeps growing (the coordinator's map and load history) pays a full walk of it now and
    then: 0.3 s for 800,000 objects on an idle core, seconds on a loaded host. Objects in the
    permanent generation are still freed by reference counting; only a reference cycle that turns
    to garbage after it was frozen is never reclaimed.
    """

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_s = [0.0, 0.0, 0.0]
        self.max_s = [0.0, 0.0, 0.0]
        self.frozen = 0  # freezes done
        self._t0 = 0.0
        self._survived = False  # a generation >= 1 collection ended since the last freeze

    def install(self) -> GcPauses:
        """Start recording (returns self)."""
        gc.callbacks.append(self._on_gc)
        return self

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        gen = info["generation"]
        took = time.perf_counter() - self._t0
        self.count[gen] += 1
        self.total_s[gen] += took
        self.max_s[gen] = max(self.max_s[gen], took)
        if gen >= 1:
            self._survived = True

    def freeze_survivors(self, now: bool = False) -> bool:
        """``gc.freeze()`` when a generation >= 1 collection ended since the last freeze (or at once
        with ``now``); True when it froze."""
        if not (now or self._survived):
            return False
        gc.freeze()
        self._survived = False
        self.frozen += 1
        return True

    def snapshot(self) -> dict:
        """Collections, total and longest pause (ms) per generation, and the frozen object count."""
        return {"collections": list(self.count), "total_ms": [round(t * 1000, 1) for t in self.total_s],
                "max_ms": [round(t * 1000, 1) for t in self.max_s], "freezes": self.frozen,
                "frozen_objects": gc.get_freeze_count()}
