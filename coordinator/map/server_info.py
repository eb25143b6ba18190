"""What the coordinator knows of each partition server, and how many events it keeps.

A leaf module: the loop thread (:mod:`coordinator.leases`), the takeover
(:mod:`coordinator.takeover`) and the coordinator itself build and read these records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_EVENTS = 1000  # coordinator events kept, in memory and in the meta store (older ones deleted)


@dataclass
class ServerInfo:
    """What the coordinator knows of one partition server."""

    id: str
    endpoint: str
    incarnation: str
    last_seen: float
    pid: int = 0
    alive: bool = True
    ranges: list = field(default_factory=list)
    load: dict = field(default_factory=dict)
    pending: int = 0  # requests queued at the server in its last loop turn
    in_step: tuple | None = None  # (primary stamp, range count) when its report last matched the map
    repl_endpoint: str = ""  # its replication endpoint (a cluster with --replicas > 1)
    repl: dict = field(default_factory=dict)  # its last replication report, per range (replicator.report)
    zone: str = ""  # its --zone: replicas of a range go to distinct zones
    geo_epoch: int = -1  # the geo role's epoch its last heartbeat said it enforces (coordinator/map/geo_role.py)


def live_endpoints(servers: Mapping[str, ServerInfo]) -> dict[str, str]:
    """Server id → endpoint of every live server that has one: what the map publishes."""
    return {s.id: s.endpoint for s in servers.values() if s.alive and s.endpoint}
