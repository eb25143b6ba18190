"""The partition servers the coordinator knows: who is registered, where, and who is alive.

:class:`ServerRegistry` holds each server's :class:`~coordinator.map.server_info.ServerInfo` (what its
last heartbeat said), the servers the meta store named when this coordinator took over (kept alive for a
full lease before they are judged), and the registrations that must be persisted before their heartbeats
are answered (one synced write per batch, :meth:`ServerRegistry.persist_registrations`). Heartbeats and
leases themselves are :mod:`coordinator.leases`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from coordinator.map.server_info import ServerInfo

if TYPE_CHECKING:
    from coordinator.state.maps import MapService

log = logging.getLogger("rangetable.coordinator")


class ServerRegistry:
    """Registered partition servers by id; read and changed under the map's lock."""

    def __init__(self, maps: MapService) -> None:
        self._maps = maps
        self.servers: dict[str, ServerInfo] = {}
        self.known: dict[str, dict] = {}  # servers in the meta store when this leader took over
        self.registrations: dict[bytes, dict] = {}  # server records to persist before answering

    # --- lookups ------------------------------------------------------------------------------

    def is_alive(self, server: str | None) -> bool:
        """True for a registered server that has not been declared dead."""
        info = self.servers.get(server) if server else None
        return info is not None and info.alive

    def endpoint(self, server: str) -> str | None:
        """The data endpoint of a registered server."""
        info = self.servers.get(server)
        return info.endpoint if info else None

    def incarnation(self, server: str) -> str | None:
        """The incarnation id a server registered with (changes when it restarts)."""
        info = self.servers.get(server)
        return info.incarnation if info else None

    def pick_server(self) -> str | None:
        """The live server with the fewest ranges (None when none is alive)."""
        live = [s for s in self.servers.values() if s.alive and s.endpoint]
        if not live:
            return None
        pmap = self._maps.pmap
        return min(live, key=lambda s: (pmap.primary_count(s.id), s.id)).id

    def live_servers(self) -> list[str]:
        """Ids of the registered servers that are alive."""
        return [s.id for s in self.servers.values() if s.alive and s.endpoint]

    # --- changes ------------------------------------------------------------------------------

    def register(self, info: ServerInfo) -> None:
        """A new or restarted server (its first heartbeat): the next delta names it, and its record is
        persisted with the other registrations of this batch, before any answer leaves (one synced write
        for hundreds of servers starting at once). Called under the map's lock."""
        self.servers[info.id] = info
        log.info("partition server %s registered at %s", info.id, info.endpoint)
        self._maps.changes.servers.add(info.id)
        self.registrations[b"server/" + info.id.encode()] = {"endpoint": info.endpoint, "pid": info.pid}

    def persist_registrations(self) -> None:
        """Commit the registrations taken since the last call in one write (a new map version)."""
        if self.registrations:
            with self._maps.lock:
                puts, self.registrations = self.registrations, {}
                self._maps.commit_version(puts)

    def take_over(self, known: dict[str, dict]) -> None:
        """Remember the servers the meta store of a takeover names (``server/<id>`` records)."""
        self.known = known

    def keep_known(self, until: float) -> None:
        """Count every server known at the takeover as heard from at ``until``: a takeover (or a restart)
        shorter than the lease is invisible to clients; silent ones are declared dead after it."""
        for sid, v in self.known.items():
            self.servers.setdefault(sid, ServerInfo(sid, v["endpoint"], "", until, v.get("pid", 0)))

    def overdue(self, now: float, limit: float) -> bool:
        """True when some live server has been silent for more than ``limit`` seconds. Read without the map's
        lock: only the loop thread, which asks this every tick, adds servers or changes their ``alive`` and
        ``last_seen``; waiting there for a commit's lock (a meta-store write hung on a cut etcd member) stopped
        the loop answering heartbeats and every lease lapsed (the netsplit drill's etcd-minority cut)."""
        return any(s.alive and now - s.last_seen > limit for s in self.servers.values())

    def declare_dead(self, now: float, limit: float) -> list[ServerInfo]:
        """Mark every live server silent for more than ``limit`` seconds dead; returns them. Called under the map's
        lock, by the loop thread (:func:`coordinator.leases.check_servers` says how long it waits for the lock)."""
        dead = []
        for s in self.servers.values():
            if s.alive and now - s.last_seen > limit:
                s.alive = False
                dead.append(s)
        return dead
