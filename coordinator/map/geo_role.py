"""A cluster's geo role, on its coordinator (issue 35, ``docs/geo.md``, "Failover"). Pure data.

One of three, decided here and nowhere else, persisted (``georole`` → ``{"role", "epoch", "source"}``) and sent
to every frontend with the cuts (``[b"cuts", …]`` on the PUB socket) and to every partition server with its
lease:

* ``primary``: takes writes;
* ``fenced``: takes no write (a planned failover drains it before its secondary takes over);
* ``secondary``: follows ``source`` (the connection file of the cluster it copies) and takes no write but its
  appliers'.

Every change raises the **geo epoch**. Partition servers enforce the role (a lease answer carries
:meth:`GeoRole.lease`: ``writes`` ``"all"``, ``"source"`` — every write refused but a secondary's
``source_apply``/``source_copy`` — or ``"none"`` — every one but the seal of a forced failover), so a frontend
that has not heard of a change yet writes nothing a fenced cluster would acknowledge; each heartbeat echoes the
epoch its server enforces, and a change is **in force** once every live server echoed it
(:meth:`GeoRole.waiting`): a server that cannot be reached stops serving when its lease runs out, before it is
declared dead. A cluster started with ``--secondary-of`` begins as a secondary
of that source (:meth:`GeoRole.load`'s ``seed``); once a role is persisted, it wins over the flag.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.map.server_info import ServerInfo
from rangetable.errors import TableError

ROLE_KEY = b"georole"
ROLES = ("primary", "fenced", "secondary")


@dataclass
class GeoRole:
    """The cluster's geo role (see the module docstring)."""

    role: str = "primary"
    epoch: int = 0
    source: dict[str, Any] | None = None  # a secondary's source: its connection file's document
    promoted: dict[str, int] | None = None  # a primary a forced failover made: each table's cut it was promoted at
    fence: dict[str, Any] | None = None  # … and the old source it fences: {"target": its admin connection, "done"}

    def load(self, stored: Any, seed: dict[str, Any] | None) -> None:
        """Install the persisted role at a takeover; none persisted: a secondary of ``seed`` when given (the
        ``--secondary-of`` a cluster was started with), else a primary."""
        self.promoted = self.fence = None
        if isinstance(stored, dict) and stored.get("role") in ROLES and type(stored.get("epoch")) is int:
            self.role, self.epoch, self.source = stored["role"], stored["epoch"], stored.get("source")
            self.promoted, self.fence = stored.get("promoted"), stored.get("fence")
        elif seed is not None:
            self.role, self.epoch, self.source = "secondary", 0, seed
        else:
            self.role, self.epoch, self.source = "primary", 0, None

    def change(self, role: Any, source: Any = None, promoted: dict[str, int] | None = None,
               fence: Any = None) -> dict[bytes, Any]:
        """Take role ``role`` (a secondary's ``source`` a connection document with curve keys; a primary's
        ``promoted`` the cuts a forced failover promoted it at and ``fence`` the admin connection document of
        the old source to fence, both kept until its next change); returns the meta-store put. The same role
        again (and the same source) changes nothing and returns no put."""
        keys = fence.get("curve") if isinstance(fence, dict) else None
        if fence is not None and not (isinstance(fence, dict) and isinstance(fence.get("coordinator"), str)
                                      and isinstance(keys, dict) and isinstance(keys.get("client"), dict)
                                      and isinstance(keys.get("servers"), dict)
                                      and isinstance(keys["servers"].get("coordinator"), str)):
            raise TableError("InvalidInput", "the old source to fence needs its coordinator and admin key")
        if role not in ROLES:
            raise TableError("InvalidInput", f"role must be one of {', '.join(ROLES)}")
        if role == "secondary":
            if not (isinstance(source, dict) and isinstance(source.get("curve"), dict)
                    and (source.get("native") or source.get("frontends"))):
                raise TableError("InvalidInput", "a secondary needs its source's connection file (curve keys and "
                                                 "a native endpoint)")
        else:  # a fenced secondary (a forced failover promoting it) still names its source; a primary none
            source = self.source if role == "fenced" else None
        if role == self.role and source == self.source and promoted is None:
            return {}
        self.role, self.epoch, self.source, self.promoted = role, self.epoch + 1, source, promoted
        self.fence = None if fence is None else {"target": fence, "done": False}
        return {ROLE_KEY: self.stored()}

    @property
    def fencing(self) -> dict[str, Any] | None:
        """The admin connection document of the old source still to fence (None: none, or fenced already)."""
        return None if self.fence is None or self.fence.get("done") else self.fence.get("target")

    def fenced_old(self) -> dict[bytes, Any]:
        """The old source is fenced: the meta-store put (the epoch stays: nothing changes here)."""
        if self.fence is not None:
            self.fence = {**self.fence, "done": True}
        return {ROLE_KEY: self.stored()}

    def stored(self) -> dict[str, Any]:
        """The persisted form."""
        return {"role": self.role, "epoch": self.epoch, "source": self.source, "promoted": self.promoted,
                "fence": self.fence}

    @property
    def follows(self) -> bool:
        """True on a secondary: its frontends apply the source's changes and read at each table's cut."""
        return self.role == "secondary"

    def lease(self) -> dict[str, Any]:
        """What a lease answer carries: the epoch and which writes the servers take: ``all`` on a primary,
        ``source`` (its appliers') on a secondary, ``none`` but a seal when fenced."""
        return {"epoch": self.epoch, "writes": {"primary": "all", "secondary": "source", "fenced": "none"}[self.role]}

    def wire(self) -> dict[str, Any]:
        """What frontends are sent: the role, its epoch and a secondary's source."""
        return {"role": self.role, "epoch": self.epoch, "source": self.source}

    def waiting(self, servers: Iterable[ServerInfo]) -> list[str]:
        """The live servers whose last heartbeat did not say they enforce this epoch; empty once the role is in
        force."""
        return sorted(s.id for s in servers if s.alive and s.geo_epoch < self.epoch)

    def status(self, servers: Iterable[ServerInfo]) -> dict[str, Any]:
        """``geo_role``'s answer: the role, epoch, a secondary's source endpoint, and whether it is in force."""
        waiting = self.waiting(servers)
        src = self.source or {}
        fence = None if self.fence is None else {"source": (self.fence.get("target") or {}).get("coordinator"),
                                                 "done": bool(self.fence.get("done"))}
        return {"role": self.role, "epoch": self.epoch, "source": src.get("native"), "promoted": self.promoted,
                "fence": fence, "in_force": not waiting, "waiting": waiting}
