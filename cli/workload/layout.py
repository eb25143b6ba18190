"""A table laid out for a drill or a bench: split at given keys, its ranges spread over the live servers."""

from __future__ import annotations

from cli.coordinator_client import call


def table_ranges(coordinator: str, table: str) -> list[dict]:
    """The ranges of ``table`` in the coordinator's status, in key order."""
    return [r for r in call(coordinator, {"op": "status"})["ranges"] if r["table"] == table]


def spread_table(coordinator: str, native: str, table: str, keys: list[str]) -> list[dict]:
    """Create ``table``, split it at ``keys`` and give range ``i`` to the ``i``-th live server (round robin;
    for a replicated range that moves its primary). Returns its ranges."""
    call(native, {"op": "create_table", "table": table})
    servers = sorted(s["id"] for s in call(coordinator, {"op": "status"})["servers"] if s["alive"])
    for k in keys:
        r = next(r for r in table_ranges(coordinator, table) if r["low"] < k and (r["high"] is None or k < r["high"]))
        call(coordinator, {"op": "split", "range": r["id"], "key": k}, timeout=60)
    for i, r in enumerate(table_ranges(coordinator, table)):
        target = servers[i % len(servers)]
        if r["owner"] != target:
            call(coordinator, {"op": "move", "range": r["id"], "server": target}, timeout=60)
    return table_ranges(coordinator, table)
