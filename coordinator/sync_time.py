"""The ``-secondary`` endpoint's ``LastSyncTime``: pure policy over the primaries' replication reports.

Every write made before ``LastSyncTime`` is readable on the secondary endpoint (Azure's definition for
RA-GRS). The secondary reads a range from an in-sync follower (the primary when it has none), so a range is
synced up to ``t - sync_lag``, where ``t`` is when its primary's last heartbeat arrived here and
``sync_lag`` is the age, at that heartbeat, of the oldest batch some in-sync follower lacks
(:meth:`partition_server.replication.protocol.Primary.sync_lag`; 0 when they hold every batch). The account's
``LastSyncTime`` is the earliest of those over every replicated range, and now when there is none
(without replication the secondary reads the primaries). Times are the coordinator's clock: the heartbeat's
travel time (milliseconds) is the only overestimate. A primary that stopped reporting (dead, paused) holds
``LastSyncTime`` at its last report until its range has a new primary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator.map.server_info import ServerInfo
from rangetable.messages import is_replicated

CACHE_S = 1.0  # frontends ask at most this often (the answer is a second old at most)


def last_sync(ranges: Iterable[dict], servers: Mapping[str, ServerInfo], now: float, wall: float) -> dict:
    """``{"last_sync": wall-clock seconds, "lag_s": now - last_sync, "replicated": ranges counted,
    "behind": the range that holds it back (None if none)}`` for the map's ``ranges``, the servers' last
    reports, ``now`` (monotonic, the clock of ``ServerInfo.last_seen``) and ``wall`` (``time.time()`` at
    ``now``)."""
    worst = wall
    behind = None
    count = 0
    for rec in ranges:
        if not is_replicated(rec):
            continue  # not replicated: the secondary reads its primary
        info = servers.get(rec.get("primary") or "")
        if info is None:
            continue  # no primary yet: nothing was written through one
        count += 1
        rep = info.repl.get(rec["id"])
        lag = rep.get("sync_lag", 0.0) if isinstance(rep, dict) else 0.0
        if not isinstance(lag, int | float) or lag < 0:
            lag = 0.0
        at = wall - (now - info.last_seen) - float(lag)
        if at < worst:
            worst, behind = at, rec["id"]
    return {"last_sync": worst, "lag_s": round(wall - worst, 4), "replicated": count, "behind": behind}
