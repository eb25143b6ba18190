"""How a coordinator that won a term becomes the leader, without letting leases lapse meanwhile.

Loading the map takes time that grows with it (about 1.1 s at 100,000 ranges: reading and decoding
the meta store, building the map; 0.3 s more to copy the store a paused leader still holds). A
partition server's lease lasts 2 s from its heartbeat, and detecting a paused leader already took
0.8 s of that. So the new leader renews leases *first*:

0. :func:`follow` (loop thread, while standby): keep a warm copy of the leader's meta store and
   map (:mod:`coordinator.standby.warm` on RocksDB, :mod:`coordinator.standby.etcd_follower` on etcd).
1. :func:`begin` (loop thread): the term is ours; a beat thread starts, and a loader thread opens
   (or copies) the meta store and takes the warm map when it is exactly the durable store (same
   sequence number; on etcd: the follower has applied the revision at which the term was won), or
   builds the map from the store (cold).
2. While it loads, the loop answers heartbeats with a lease of the new term at once
   (:func:`early_lease`) and holds every other request until the map is there. Granting a lease
   without the map is what the previous leader did with the same map: the server keeps serving what
   it has open, and nothing moves before ``lease + grace`` has passed.
3. :func:`finish` (loop thread, when the loader says ``led``): keep every known server alive for a
   full ``lease + grace`` before judging it, roll back half-done operations, start the controller,
   delete election files and meta-store copies nobody holds any more.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from typing import TYPE_CHECKING, cast

from coordinator import client_keys
from coordinator.control import operations as ops
from coordinator.leadership.etcd_election import META_NAME, EtcdLeadership
from coordinator.leadership.lock_election import BEAT_S, TermRecord, lock_free, meta_dir_for, stale_meta_dirs
from coordinator.map.partition_map import PartitionMap
from coordinator.map.server_info import MAX_EVENTS
from coordinator.map.table_settings import PREFIX as TABLE_SETTINGS
from coordinator.meta.etcd_store import open_etcd_for_term
from coordinator.meta.store import MetaStore, open_for_term
from coordinator.standby.etcd_follower import EtcdFollower
from coordinator.standby.warm import WarmFollower
from rangetable import curve

if TYPE_CHECKING:
    from coordinator.interfaces import TakeoverHost
    from coordinator.meta.store_like import MetaStoreLike
    from rangetable.messages import LeaseAnswer

log = logging.getLogger("rangetable.coordinator")


def follow(co: TakeoverHost, leader: TermRecord | None) -> None:
    """Standby: keep following the meta store the current leader's record names (the RocksDB store on
    the data root, or ``<prefix>/meta/`` in etcd with ``--meta etcd://``); nothing with
    ``--cold-takeover``."""
    if co.cfg.cold_takeover:
        return
    if co.follower is None:
        election = co.election()
        if isinstance(election, EtcdLeadership):
            co.follower = EtcdFollower(",".join(election.client.bases), election.prefix, META_NAME)
        else:
            co.follower = WarmFollower(co.cfg.data_dir)
        co.follower.start()
    co.follower.follow(leader.meta if leader is not None else None)


def begin(co: TakeoverHost, rec: TermRecord) -> None:
    """Lead ``rec.term`` from now on: beat, and load the map in the background."""
    co.term = rec.term
    co.takeover = {"term": rec.term, "won_at": time.monotonic()}
    threading.Thread(target=_beat, args=(co,), name="leader-beat", daemon=True).start()
    threading.Thread(target=_load, args=(co, rec), name="takeover", daemon=True).start()


def early_lease(co: TakeoverHost) -> LeaseAnswer:
    """A heartbeat answer while the map loads: a lease of the new term, nothing else."""
    return {"lease_s": co.cfg.lease_s, "version": -1, "term": co.term}


def _beat(co: TakeoverHost) -> None:
    """Beat for standbys from a thread of its own, so loading a large map or a long request in the
    loop does not look like a pause (SIGSTOP stops this thread too)."""
    election = co.election()
    while not co.stopping:
        try:
            election.beat()
        except OSError:
            log.exception("leader beat failed")
        time.sleep(BEAT_S)


def _load(co: TakeoverHost, rec: TermRecord) -> None:
    election = co.election()
    t0 = time.monotonic()
    meta: MetaStoreLike
    try:
        if isinstance(election, EtcdLeadership):  # --meta etcd://... (etcd_election.leadership_for)
            meta, how = open_etcd_for_term(election, co.fence)
        else:
            meta, how = open_for_term(co.cfg.data_dir, rec.meta, meta_dir_for(rec.term), co.fence)
        if meta.name != rec.meta:
            election.set_meta(meta.name)
        truth = None
        if isinstance(meta, MetaStore) and co.follower is not None:  # the durable items, raw (cheap to read)
            truth = {cast(bytes, k): cast(bytes, v) for k, v in meta.db.items()}
        warm = co.follower.take(rec.meta, how["seq"], truth) if co.follower is not None else None
        co.follower = None
        if warm is not None:
            pmap, events, servers = warm.pmap, warm.events(MAX_EVENTS), warm.servers()
        else:
            items = meta.items()
            pmap = PartitionMap.load(items)
            events = [v for k, v in items if k.startswith(b"event/")][-MAX_EVENTS:]
            servers = {k[len(b"server/"):].decode(): v for k, v in items if k.startswith(b"server/")}
        geo_seed = curve.read_cluster_doc(co.cfg.source) if co.cfg.source else None  # --secondary-of's source
    except Exception:
        log.exception("taking over term %d failed", rec.term)
        co.step_down()
        return
    cl = co.cluster
    with cl.map.lock:
        cl.map.take_over(meta, pmap, meta.items(TABLE_SETTINGS), rec.term, geo_seed)
        cl.events.load(events)
        co.keys_version = client_keys.load(cl.map)[0]
        cl.registry.take_over(servers)
        co.takeover.update({"meta": meta.name, "copied_keys": how["copied"], "meta_ms": how["ms"],
                            "warm": warm is not None, "seq": how["seq"],
                            **({"revision": how["revision"]} if "revision" in how else {}),
                            "load_ms": round((time.monotonic() - t0) * 1000, 1)})
    co.notify([b"led"])


def finish(co: TakeoverHost) -> None:
    """The map is loaded: act as the leader from now on (loop thread)."""
    cl = co.cluster
    election, meta = co.election(), cl.map.meta_store()
    now = time.monotonic()
    # Servers known before keep their ranges for a full lease: a takeover (or a restart) shorter
    # than the lease is invisible to clients; silent ones are then declared dead.
    cl.registry.keep_known(now + co.cfg.startup_grace_s)
    quiet_until = now + co.cfg.lease_s + co.cfg.lease_grace_s  # no balancing move before old leases lapsed
    rolled = ops.recover(cl)
    if rolled:
        log.warning("rolled back uncommitted operations on ranges %s", rolled)
    co.lead(quiet_until)  # the balancer's rounds wait for quiet_until (balancer_loop.py); the controller starts
    co.takeover["takeover_ms"] = round((time.monotonic() - co.takeover.pop("won_at")) * 1000, 1)
    log.info("leading term %d: %s", co.term, co.takeover)
    election.collect()
    if co.cfg.meta:
        return  # the meta store is in etcd: no directories of earlier terms to delete
    for name in stale_meta_dirs(os.listdir(co.cfg.data_dir), meta.name):
        path = os.path.join(co.cfg.data_dir, name)
        if lock_free(os.path.join(path, "LOCK")):
            shutil.rmtree(path, ignore_errors=True)
