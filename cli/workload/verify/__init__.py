"""Verifiers for failover drills and chaos tests (issue #4).

- :mod:`cli.workload.verify.history`: the history model (:class:`Op`) and a thread-safe
  :class:`Recorder` that workload threads call around each request.
- :mod:`cli.workload.verify.linearizability`: a per-key Wing & Gong / Lowe linearizability checker
  for a register with read, write, cas, insert, update and delete (:func:`check`).
- :mod:`cli.workload.verify.ack_loss`: the acknowledged-write-loss checker (:func:`check_ack_loss`)
  and the exactly-once counter checker (:func:`check_counters`).

Typical use::

    rec = Recorder()
    op = rec.invoke(key, "cas", value=new, expected=old)
    ...  # send the request
    rec.complete(op, "ok")          # or "fail" (412/409/404) or "unknown" (timeout)
    history = rec.history()
    assert check(history).ok
    assert check_ack_loss(history, final_state).ok
"""

from __future__ import annotations

from cli.workload.verify.ack_loss import (
    AckResult,
    CounterAnomaly,
    LostWrite,
    check_ack_loss,
    check_counters,
    combine,
)
from cli.workload.verify.history import Op, Recorder, by_key, dump_history, load_history
from cli.workload.verify.linearizability import KeyResult, Result, check, check_key

__all__ = [
    "AckResult",
    "CounterAnomaly",
    "KeyResult",
    "LostWrite",
    "Op",
    "Recorder",
    "Result",
    "by_key",
    "check",
    "check_ack_loss",
    "check_counters",
    "check_key",
    "combine",
    "dump_history",
    "load_history",
]
