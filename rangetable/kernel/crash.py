"""Crash points for tests: make a process exit at a named step of a multi-step change.

``RANGETABLE_CRASH_AT=split.after_checkpoint`` (comma-separated names allowed) makes the process that
reaches that step exit at once with status 77, as a kill -9 would leave it: no cleanup, no flush
beyond what RocksDB's WAL already holds. Each point fires once per data dir (a marker file under
``<data-dir>/run/`` remembers it), so the supervisor's restart of the process carries on normally. On a
replicated cluster every partition server has a data dir of its own: ``RANGETABLE_CRASH_DIR`` names one
directory for the markers of every process, so a point fires once in the whole cluster (one process crashes,
as one would), not once on each replica. With ``RANGETABLE_CRASH_ARMED=1`` a named point fires only while
``<crash dir>/arm-<point>`` exists, so one cluster started with every point named can take one crash after
another, each at the instant a test picks (``tests/integration/test_crash_points.py``).

Points, by process: coordinator ``move.after_intent``, ``move.after_unload``, ``move.after_commit``,
``split.after_intent``, ``split.after_split``, ``split.after_commit``, ``merge.after_intent``,
``merge.after_merge``, ``merge.after_commit``; partition server ``ps.load.before_open``,
``ps.unload.after_close``, ``ps.split.after_split``,
``ps.merge.after_merge``; on a replicated range a move is a leadership transfer, with coordinator points
``transfer.after_intent``, ``promote.after_seal`` and ``promote.after_commit`` (:data:`ONE_COPY_POINTS` are the
steps only a one-copy move takes).

Fault points are the same idea for a misbehaviour rather than an exit: ``RANGETABLE_FAULT_AT=warm.freeze``
names the fault, and it acts from the moment a test creates ``<data-dir>/run/arm-warm.freeze`` (so the
test picks the instant). ``warm.freeze``: a standby coordinator's warm copy of the leader's meta store
stops taking in the leader's writes while still reporting the store's sequence number, as rocksdict's
secondary instance was seen doing (issue 24; ``tests/integration/test_stale_takeover.py``). ``split.hold``: the
coordinator's split waits past its intent (the map says "splitting") for as long as the arm file exists, so a test
meets a split under way at an instant it chooses rather than by winning a race (``tests/integration/test_backup.py``).
"""

from __future__ import annotations

import os

POINTS = frozenset({
    "move.after_intent", "move.after_unload", "move.after_commit",
    "split.after_intent", "split.after_split", "split.after_commit",
    "merge.after_intent", "merge.after_merge", "merge.after_commit",
    "ps.load.before_open", "ps.unload.after_close", "ps.split.after_split",
    "ps.merge.after_merge",
    "transfer.after_intent", "promote.after_seal", "promote.after_commit",
})
ONE_COPY_POINTS = frozenset({"move.after_intent", "move.after_unload", "move.after_commit", "ps.unload.after_close"})
"""The points of a one-copy move (unload from the source, load on the target); a replicated range never takes them."""
EXIT_STATUS = 77


def _named(variable: str, name: str) -> bool:
    """Whether the comma-separated environment ``variable`` names ``name``."""
    return name in os.environ.get(variable, "").split(",")


def crash_point(name: str, data_dir: str) -> None:
    """Exit the process right here if ``RANGETABLE_CRASH_AT`` names this point (once per crash dir; only
    while armed, with ``RANGETABLE_CRASH_ARMED``)."""
    if not _named("RANGETABLE_CRASH_AT", name):
        return
    run = os.environ.get("RANGETABLE_CRASH_DIR") or os.path.join(data_dir, "run")
    marker = os.path.join(run, f"crashed-{name}")
    if os.path.exists(marker):
        return
    if os.environ.get("RANGETABLE_CRASH_ARMED") and not os.path.exists(os.path.join(run, f"arm-{name}")):
        return
    os.makedirs(run, exist_ok=True)
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    os._exit(EXIT_STATUS)


def fault_armed(name: str, data_dir: str) -> bool:
    """Whether fault ``name`` acts now: ``RANGETABLE_FAULT_AT`` names it and ``<data-dir>/run/arm-<name>`` exists."""
    return _named("RANGETABLE_FAULT_AT", name) and os.path.exists(os.path.join(data_dir, "run", f"arm-{name}"))
