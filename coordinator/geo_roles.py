"""A cluster's geo role, asked and changed through its coordinator (issue 35, ``docs/geo.md``, "Failover").

* ``geo_role`` {}: the role (:class:`coordinator.map.geo_role.GeoRole`), its epoch, a secondary's source and
  whether every live partition server enforces it (``in_force``, ``waiting``);
* ``geo_role`` {role, source?, cuts?}: take ``role`` — ``fenced`` (no write any more: a planned failover
  drains this cluster), ``primary`` (a secondary stops following and takes writes: its appliers' claims end and
  its cuts go), or ``secondary`` of ``source`` (a connection document) at ``cuts`` (``{table: Timestamp}``: the
  state it holds of the new primary, so it follows from there without a copy). Persisted before it is
  answered; the frontends hear it on the PUB socket within a second, the partition servers with their next
  lease. The operator's key only.

The steps of a failover, each asked of one of the two clusters, are in :mod:`cli.geo_failover`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from coordinator.map.geo_role import GeoRole
from coordinator.map.source_cuts import COPY_PREFIX, CUT_PREFIX

if TYPE_CHECKING:
    from coordinator.interfaces import AdminHost

OPS = frozenset({"geo_role"})


def handle(co: AdminHost, req: dict) -> dict[str, Any]:
    """Answer ``geo_role`` (see the module docstring)."""
    cl = co.cluster
    maps = cl.map
    if "role" in req:
        with maps.lock:
            nxt = GeoRole(maps.geo.role, maps.geo.epoch, maps.geo.source)
        puts = nxt.change(req["role"], req.get("source"))
        if puts:
            now = time.monotonic()
            with maps.lock:
                if nxt.follows:
                    more, deletes = maps.cuts.install(req.get("cuts") or {}, now)
                else:
                    more, deletes = {}, maps.cuts.clear()
            try:
                maps.meta_store().commit({**puts, **more}, deletes)  # persisted before anyone acts on it
            except Exception:
                with maps.lock:  # the cuts as they are stored: the role stays what it was
                    maps.cuts.load(maps.meta_store().items(CUT_PREFIX) + maps.meta_store().items(COPY_PREFIX), now)
                raise
            with maps.lock:
                maps.geo = nxt
                maps.source_claims.end_all()  # appliers of the role before stop: their claims are no longer live
            cl.events.record("geo_role", role=nxt.role, epoch=nxt.epoch, source=(nxt.source or {}).get("native"))
    with maps.lock:
        return maps.geo.status(cl.registry.servers.values())

