"""Requests that read or change the map, answered by a thread of their own so the loop never waits for the lock.

The coordinator's loop answers heartbeats, and a partition server whose heartbeats go unanswered for a lease
stops serving. Every question that takes the map's lock — ``status``, ``list_tables``, an index claim, a
client key added — waits behind whoever holds it, and a controller's meta-store commit holds it for as long
as the store takes: up to its timeout when the etcd member it writes to is cut off (the netsplit drill's
etcd-minority cut). Asked in the loop, such a question stopped the heartbeats' answers and every lease
lapsed. So the loop hands them here (:meth:`Answerer.ask`): one thread runs them in the order they came and
sends each answer through the loop's inproc socket, as the controller and the map snapshots do.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from rangetable import protocol
from rangetable.errors import TableError

log = logging.getLogger("rangetable.coordinator")

Question = Callable[[], "bytes | None"]  # the answer's body, or None when it is sent later (a deferred answer)


class Answerer:
    """One thread that runs the questions handed to it and sends their answers through ``notify``."""

    def __init__(self, notify: Callable[[list[bytes]], None]) -> None:
        self.notify = notify
        self._questions: queue.SimpleQueue[tuple[bytes, bytes, Question] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def ask(self, ident: bytes, rid: bytes, question: Question) -> None:
        """Run ``question`` off the loop; its body goes to the requester ``ident`` as the answer to ``rid``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="answerer", daemon=True)
            self._thread.start()
        self._questions.put((ident, rid, question))

    def stop(self) -> None:
        """End the thread once the questions before this are answered."""
        if self._thread is not None:
            self._questions.put(None)

    def _run(self) -> None:
        while (item := self._questions.get()) is not None:
            ident, rid, question = item
            try:
                body = question()
            except TableError as exc:
                body = protocol.error(exc)
            except Exception as exc:
                log.exception("request failed")
                body = protocol.error(TableError("InternalError", f"{type(exc).__name__}: {exc}"))
            if body is not None:
                self.notify([b"reply", ident, rid, body])
