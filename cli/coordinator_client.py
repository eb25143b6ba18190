"""Requests from the CLI to a coordinator or frontend endpoint (:mod:`rangetable.kernel.requests`), and what the
CLI makes of a coordinator's answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rangetable.kernel.requests import SILENCE, Connections, call

__all__ = ["SILENCE", "Connections", "call", "human_size", "range_loads"]


def range_loads(status: Mapping[str, Any]) -> dict[str, dict]:
    """Each range's last load report (range id → report) from its primary, from a coordinator ``status`` answer.

    A follower reports its replicas too (their size, a compaction), never the requests the primary serves: its
    report must not stand in for the primary's."""
    primary = {r["id"]: r.get("primary") for r in status.get("ranges", [])}
    return {rid: ld for s in status.get("servers", []) for rid, ld in (s.get("load") or {}).items()
            if primary.get(rid, s.get("id")) == s.get("id")}


def human_size(n: float) -> str:
    """Bytes for people: ``512 B``, ``1.5 KiB``, … up to GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
