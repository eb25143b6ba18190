"""A table laid out for a drill or a bench: split at given keys, its ranges spread over the live servers."""

from __future__ import annotations

import time

from cli.coordinator_client import call
from rangetable.errors import TableError


def table_ranges(coordinator: str, table: str) -> list[dict]:
    """The ranges of ``table`` in the coordinator's status, in key order."""
    return [r for r in call(coordinator, {"op": "status"})["ranges"] if r["table"] == table]


def spread_table(coordinator: str, native: str, table: str, keys: list[str]) -> list[dict]:
    """Create ``table``, split it at ``keys`` and spread its ranges' primaries over the live servers.
    Returns its ranges."""
    call(native, {"op": "create_table", "table": table})
    split_at(coordinator, table, keys)
    return spread_primaries(coordinator, table)


def split_at(coordinator: str, table: str, keys: list[str]) -> None:
    """Split ``table`` at each of ``keys`` not a range boundary already (so a retry goes on where it stopped)."""
    for k in keys:
        r = next(r for r in table_ranges(coordinator, table) if r["low"] <= k and (r["high"] is None or k < r["high"]))
        if r["low"] != k:
            call(coordinator, {"op": "split", "range": r["id"], "key": k}, timeout=60)


def primary_targets(ranges: list[dict], servers: list[str]) -> dict[str, str]:
    """Where each range's primary goes: range ``i`` to the ``i``-th server round robin. A replicated range's
    primary moves only to an in-sync replica: when that server is not one, to its in-sync member with the
    fewest primaries so far. A one-copy range may go anywhere."""
    primaries = {sid: 0 for sid in servers}
    out: dict[str, str] = {}
    for i, r in enumerate(ranges):
        choices = [x for x in r.get("insync", servers) if x in primaries] or [r["primary"]]
        want = servers[i % len(servers)]
        to = want if want in choices else min(choices, key=lambda x: (primaries.get(x, 0), x))
        primaries[to] = primaries.get(to, 0) + 1
        out[r["id"]] = to
    return out


def spread_primaries(coordinator: str, table: str, timeout: float = 60.0) -> list[dict]:
    """Move the primaries of ``table``'s ranges as :func:`primary_targets` says. A move the coordinator
    turns down because the range is busy or its replica fell out of sync meanwhile is planned again from
    a fresh map until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        servers = sorted(s["id"] for s in call(coordinator, {"op": "status"})["servers"] if s["alive"])
        ranges = table_ranges(coordinator, table)
        targets = primary_targets(ranges, servers)
        moves = [(r["id"], targets[r["id"]]) for r in ranges if r["primary"] != targets[r["id"]]]
        if not moves:
            return ranges
        try:
            for rid, to in moves:
                call(coordinator, {"op": "move", "range": rid, "server": to}, timeout=60)
        except TableError as exc:
            if exc.error_code not in ("InvalidInput", "ServerBusy") or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
