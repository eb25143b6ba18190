"""A secondary table's cut as its coordinator's ``geo_status`` answers it, asked once (:func:`table_row`) or
sampled (:class:`CutSampler`): what ``rangetable bench geo``, ``bench geo-rejoin`` and ``drill geo`` measure the
RPO and the copies by (``docs/geo.md``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from cli.coordinator_client import call
from rangetable.edm import TICKS_PER_SECOND, now_ticks

SAMPLE_S = 0.25  # how often the secondary's cut is asked


def table_row(coordinator: str, table: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """``table``'s row of ``geo_status`` (``{"table", "cut", "lag_s", "applied", ...}``), None when the cluster
    has no such table."""
    rows = call(coordinator, {"op": "geo_status"}, timeout=timeout)["tables"]
    return next((r for r in rows if r["table"].lower() == table.lower()), None)


@dataclass
class CutSampler:
    """Samples the cut of ``table`` at the secondary whose coordinator is ``coordinator`` (which may change: a
    failover's new secondary) every :data:`SAMPLE_S` on a thread of its own: the RPO — the wall clock less the
    cut, what a failover at that moment would lose — and the applier's count, taken by the interval."""

    coordinator: str
    table: str
    rpo: list[float] = field(default_factory=list)
    applied: int = 0  # records applied since sampling began, across appliers
    copied: int = 0  # entities the table's first copy put, as its applier last reported them
    _count: int = 0  # the applier's own count as last reported
    last_rpo: float | None = None
    last_cut: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        """Begin sampling."""
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            try:
                row = table_row(self.coordinator, self.table)
            except Exception:
                continue
            if row is None or row["cut"] is None:
                continue
            rpo = max(0.0, (now_ticks() - row["cut"]) / TICKS_PER_SECOND)
            with self.lock:
                self.rpo.append(rpo)
                self.last_rpo, self.last_cut = rpo, row["cut"]
                count = int(row.get("applied") or 0)  # since its applier started: a new one counts from 0
                self.applied += count - self._count if count >= self._count else count
                self._count = count
                self.copied = max(self.copied, int(row.get("copied") or 0))

    def take(self) -> tuple[list[float], int]:
        """The RPO samples since the last take, and the applied count now."""
        with self.lock:
            out, self.rpo = self.rpo, []
            return out, self.applied
