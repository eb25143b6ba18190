"""A cluster's geo role, asked and changed through its coordinator (issue 35, ``docs/geo.md``, "Failover").

* ``geo_role`` {}: the role (:class:`coordinator.map.geo_role.GeoRole`), its epoch, a secondary's source, the
  cuts a forced failover promoted it at, and whether every live partition server enforces it (``in_force``,
  ``waiting``);
* ``geo_role`` {role, source?, cuts?, expect?}: take ``role`` — ``fenced`` (no write any more: a failover
  drains or fences this cluster), ``primary`` (a secondary stops following and takes writes: its appliers'
  claims end and its cuts go), or ``secondary`` of ``source`` (a connection document) at ``cuts``
  (``{table: Timestamp}``: the state it holds of the new primary, so it follows from there without a copy) or
  ``rejoin`` (the same, but for its own changes since: it copies what differs, :meth:`TableApplier.rejoin
  <frontend.geo.applier.TableApplier.rejoin>`); a table in neither is copied whole. With ``expect`` only while
  the epoch is that one (``UpdateConditionNotSatisfied`` otherwise: a fence sent long ago does not land on a
  later role). Persisted before it is answered; the frontends hear it on the PUB socket within a second, the
  partition servers with their next lease;
* ``geo_role`` {role: primary, force: true} on a secondary: :func:`promote_at_cuts`, a forced failover's
  promotion (a controller job: it waits for servers).

The operator's key only. The steps of a failover across the two clusters are in :mod:`cli.geo_failover`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from coordinator.control import operations as ops
from coordinator.map.geo_role import GeoRole
from coordinator.map.source_cuts import COPY_PREFIX, CUT_PREFIX
from rangetable import curve
from rangetable.errors import TableError
from rangetable.kernel.requests import call

if TYPE_CHECKING:
    from collections.abc import Callable

    from coordinator.control.controller import Controller
    from coordinator.interfaces import AdminHost
    from coordinator.state.cluster import Cluster

log = logging.getLogger("rangetable.coordinator")

OPS = frozenset({"geo_role"})
IN_FORCE_TIMEOUT_S = 30.0  # a forced promotion waits this long at most for every server to stop the appliers
SEAL_ROUNDS = 20  # rounds of sealing the ranges left (each after a fresh look at the map)


def handle(co: AdminHost, req: dict, reply: Callable[[Any, TableError | None], None]) -> dict[str, Any] | None:
    """Answer ``geo_role`` (see the module docstring); None when a controller job answers through ``reply``."""
    cl = co.cluster
    if req.get("role") == "primary" and req.get("force"):
        co.controller.submit(promote_at_cuts, cl, co.controller, req.get("fence"), reply=reply)
        return None
    if "role" in req:
        expect = req.get("expect")
        with cl.map.lock:
            if expect is not None and expect != cl.map.geo.epoch:
                raise TableError("UpdateConditionNotSatisfied", f"the geo role is at epoch {cl.map.geo.epoch}, "
                                                                f"not {expect}")
        take(cl, req["role"], req.get("source"), req.get("cuts"), rejoin=req.get("rejoin"))
    return status(cl)


def status(cl: Cluster) -> dict[str, Any]:
    """``geo_role``'s answer."""
    with cl.map.lock:
        return cl.map.geo.status(cl.registry.servers.values())


def take(cl: Cluster, role: Any, source: Any = None, cuts: Any = None,
         promoted: dict[str, int] | None = None, fence: Any = None, rejoin: Any = None) -> GeoRole:
    """Take a role (see the module docstring) and persist it with what goes with it; returns it. The same role
    again changes nothing."""
    maps = cl.map
    with maps.lock:
        nxt = GeoRole(maps.geo.role, maps.geo.epoch, maps.geo.source, maps.geo.promoted, maps.geo.fence)
    puts = nxt.change(role, source, promoted, fence)
    if not puts:
        return nxt
    now = time.monotonic()
    with maps.lock:
        if nxt.follows:
            more, deletes = maps.cuts.install(cuts or {}, now, rejoin)
        elif nxt.role == "primary":
            more, deletes = {}, maps.cuts.clear()
        else:  # fenced: a secondary's reads stay at its cuts while a forced failover promotes it
            more, deletes = {}, []
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
    return nxt


def wait_in_force(cl: Cluster, timeout: float) -> None:
    """Until every live server enforces the role (TableError OperationTimedOut after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        with cl.map.lock:
            waiting = cl.map.geo.waiting(cl.registry.servers.values())
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise TableError("OperationTimedOut", f"servers {', '.join(waiting)} have not confirmed the geo role")
        time.sleep(0.05)


def promote_at_cuts(cl: Cluster, ctl: Controller, fence: Any = None) -> dict[str, Any]:
    """A forced failover's promotion of this secondary: fenced first (its appliers' writes refused by every
    server, so nothing moves under what follows), then every range of every table sealed at its table's cut
    (``source_seal``: what was applied past it goes back), a table without a cut (its first copy was under way)
    emptied, and then the primary, at those cuts (kept with the role: the old source's loss ledger starts
    there). With ``fence`` (the old source's admin connection document) the coordinator fences the old source
    as soon as it answers (:func:`fence_old`)."""
    with cl.map.lock:
        geo = cl.map.geo
        if geo.role != "secondary" and not (geo.role == "fenced" and geo.source):  # (fenced: a promotion retried)
            raise TableError("InvalidInput", f"this cluster is {geo.role}: only a secondary is promoted")
    GeoRole().change("primary", fence=fence)  # a bad fence document is refused before anything changes
    take(cl, "fenced")
    wait_in_force(cl, IN_FORCE_TIMEOUT_S)
    with cl.map.lock:
        cuts = {t: c.cut for t, c in cl.map.cuts.cuts.items()}
        tables = cl.map.pmap.user_tables()
    uncopied = [t for t in tables if t.lower() not in cuts]
    restored = _seal(cl, ctl, {t: cuts[t.lower()] for t in tables if t.lower() in cuts})
    for t in uncopied:  # half a copy is no state the source ever had
        ops.delete_table(cl, ctl, t)
        ops.create_table(cl, ctl, t)
    promoted = {t: cuts[t.lower()] for t in tables if t.lower() in cuts}
    take(cl, "primary", promoted=promoted, fence=fence)
    return {**status(cl), "promoted": promoted, "restored": restored, "emptied": uncopied}


def _seal(cl: Cluster, ctl: Controller, cuts: dict[str, int]) -> int:
    """Seal every range of each table at its cut; how many entities went back. A table with a range that failed
    (it moved or split meanwhile) is sealed again by the map of then: sealing twice changes nothing."""
    todo, restored = set(cuts), 0
    for _ in range(SEAL_ROUNDS):
        calls, names = [], []
        with cl.map.lock:
            for t in sorted(todo):
                for r in cl.map.pmap.ranges_of(t):
                    calls.append((r["primary"] or "", {"op": "source_seal", "range": r["id"], "epoch": r["epoch"],
                                                       "cut": cuts[t]}))
                    names.append(t)
        results = ctl.call_many(calls) if calls else []  # type: ignore[arg-type]
        todo = {t for t, res in zip(names, results, strict=True) if isinstance(res, TableError)}
        restored += sum(int(res["restored"]) for res in results if not isinstance(res, TableError))
        if not todo:
            return restored
        time.sleep(0.2)  # a range moving or splitting: sealed where the map says it is next round
    raise TableError("OperationTimedOut", f"ranges of {', '.join(sorted(todo))} could not be sealed at their cut")


FENCE_EVERY_S = 2.0  # how often the old source is asked to stop while it does not answer


def fence_old(cl: Cluster) -> bool:
    """One attempt at fencing the old source of a forced failover (the loop starts one on a thread of its own
    every :data:`FENCE_EVERY_S` until it lands): asked for its role, then to be fenced expecting the epoch it
    answered, so a request delivered late never lands on a role it took since. Done once it answers a role
    other than primary: from then on it acknowledges nothing, and what it acknowledged after the cuts is its
    loss ledger (``rangetable geo rejoin``). Returns whether it is done."""
    with cl.map.lock:
        target = cl.map.geo.fencing
    if target is None:
        return True
    curve.remember_cluster(target)
    endpoint = str(target["coordinator"])
    try:
        st = call(endpoint, {"op": "geo_role"}, timeout=FENCE_EVERY_S)
        if st["role"] == "primary":
            st = call(endpoint, {"op": "geo_role", "role": "fenced", "expect": st["epoch"]}, timeout=FENCE_EVERY_S)
    except TableError as exc:
        log.info("the old source %s is not fenced yet: %s", endpoint, exc)
        return False
    with cl.map.lock:
        if cl.map.geo.fencing is not target:
            return True  # the role changed meanwhile
        puts = cl.map.geo.fenced_old()
    cl.map.meta_store().commit(puts, [])
    cl.events.record("geo_old_source_fenced", source=endpoint, epoch=st["epoch"])
    return True
