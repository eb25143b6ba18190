"""Crash points for tests: make a process exit at a named step of a multi-step change.

``RANGETABLE_CRASH_AT=split.after_checkpoint`` (comma-separated names allowed) makes the process that
reaches that step exit at once with status 77, as a kill -9 would leave it: no cleanup, no flush
beyond what RocksDB's WAL already holds. Each point fires once per data dir (a marker file under
``<data-dir>/run/`` remembers it), so the supervisor's restart of the process carries on normally.

Points, by process: coordinator ``move.after_intent``, ``move.after_unload``, ``move.after_commit``,
``split.after_intent``, ``split.after_split``, ``split.after_commit``, ``merge.after_intent``,
``merge.after_merge``, ``merge.after_commit``; partition server ``ps.load.before_open``,
``ps.unload.after_close``, ``ps.split.after_split``,
``ps.merge.after_merge``.
"""

from __future__ import annotations

import os

POINTS = frozenset({
    "move.after_intent", "move.after_unload", "move.after_commit",
    "split.after_intent", "split.after_split", "split.after_commit",
    "merge.after_intent", "merge.after_merge", "merge.after_commit",
    "ps.load.before_open", "ps.unload.after_close", "ps.split.after_split",
    "ps.merge.after_merge",
})
EXIT_STATUS = 77


def crash_point(name: str, data_dir: str) -> None:
    """Exit the process right here if ``RANGETABLE_CRASH_AT`` names this point (once per data dir)."""
    wanted = os.environ.get("RANGETABLE_CRASH_AT")
    if not wanted or name not in wanted.split(","):
        return
    run = os.path.join(data_dir, "run")
    marker = os.path.join(run, f"crashed-{name}")
    if os.path.exists(marker):
        return
    os.makedirs(run, exist_ok=True)
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    os._exit(EXIT_STATUS)
