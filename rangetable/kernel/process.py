"""The entry point shared by every server process: stop cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import signal
from typing import Any, Protocol

from rangetable.kernel.gc_tuning import tune_gc


class Serving(Protocol):
    """A process loop that runs in ``serve()`` until ``stopping`` is set."""

    stopping: bool

    def serve(self) -> None:
        """Run the loop until ``stopping`` is set."""


def serve_until_signalled(server: Serving, *, gc_tuned: bool = True) -> None:
    """Run ``server.serve()``; SIGTERM and SIGINT set ``server.stopping`` so the loop ends cleanly."""

    def stop(signum: int, frame: Any) -> None:
        server.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if gc_tuned:
        tune_gc()
    server.serve()
