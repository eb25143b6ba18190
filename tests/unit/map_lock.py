"""The coordinator's map lock held by another thread, as a controller's commit hung on a cut etcd member holds
it: for the tests of what the coordinator's loop does meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from coordinator.state.maps import MapService


@contextmanager
def held_by_a_commit(maps: MapService) -> Iterator[None]:
    """Hold ``maps.lock`` in another thread for the ``with`` block (at most 5 s)."""
    held, release = threading.Event(), threading.Event()

    def commit() -> None:
        with maps.lock:
            held.set()
            release.wait(5)

    t = threading.Thread(target=commit)
    t.start()
    held.wait(5)
    try:
        yield
    finally:
        release.set()
        t.join()
