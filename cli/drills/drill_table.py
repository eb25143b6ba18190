"""What the drills share: a fresh table split into ranges spread over the live servers, and a prober
that notes when each watched range answers again."""

from __future__ import annotations

import threading
import time

from cli.coordinator_client import call
from cli.workload.layout import spread_table
from rangetable.errors import TableError


def prepare_table(coordinator: str, native: str, table: str, pieces: int = 4) -> list[dict]:
    """Create the drill table split into ``pieces`` ranges spread over the live servers."""
    return spread_table(coordinator, native, table, [f"p{int(8 * i / pieces):02d}" for i in range(1, pieces)])


class Prober(threading.Thread):
    """Reads one key of each watched range every 50 ms; remembers when each first answered after t0."""

    def __init__(self, native: str, table: str, ranges: list[dict], t0: float) -> None:
        super().__init__(daemon=True)
        self.native, self.table, self.t0 = native, table, t0
        self.pending = {r["id"]: r["low"] for r in ranges}
        self.served: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        """Probe until every watched range answered or stopped."""
        while self.pending and not self.stop.is_set():
            for rid, low in list(self.pending.items()):
                try:
                    call(self.native, {"op": "get", "table": self.table, "pk": low or "p00", "rk": "probe"},
                         timeout=0.5)
                except TableError as exc:
                    if exc.error_code not in ("ResourceNotFound",):
                        continue
                self.served[rid] = round(time.monotonic() - self.t0, 3)
                del self.pending[rid]
            time.sleep(0.05)


def busiest_primary(ranges: list[dict]) -> str:
    """The server that is primary of most of ``ranges`` (the first by name on a tie)."""
    owned: dict[str, int] = {}
    for r in ranges:
        owned[r["primary"]] = owned.get(r["primary"], 0) + 1
    return max(sorted(owned), key=lambda s: owned[s])


def pick_victim(coordinator: str, ranges: list[dict], server: str | None = None) -> tuple[str, dict]:
    """The partition server a drill breaks: ``server``, or the primary of most of ``ranges``; with its
    entry of the coordinator's status. ClickException when it is not alive."""
    import click

    st = call(coordinator, {"op": "status"})
    victim = server or busiest_primary(ranges)
    info = next((s for s in st["servers"] if s["id"] == victim), None)
    if info is None or not info["alive"] or not info.get("pid"):
        raise click.ClickException(f"partition server {victim} is not alive")
    return victim, info

