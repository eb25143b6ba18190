"""The faults of ``rangetable drill netsplit``, each under the verifying workload on a fresh table.

Each function takes the running :class:`~cli.drills.netsplit.Drill`, injects one fault, heals it and returns the
fault's row (what :mod:`cli.drills.netsplit_report` judges): a partition server that is primary for some ranges
cut off (its ranges served elsewhere, a probe in its namespace sees it fence itself, it rejoins and catches
up), a follower only cut off, the coordinator leader cut off, one etcd member then a majority of them, a primary
and the etcd leader cut off together (one host that ran both), and a partition server's host lost with its disk.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from cli.coordinator_client import call
from cli.drills.drill_table import Prober, busiest_primary
from cli.drills.netsplit_drill import Drill, FenceProbe
from cli.drills.netsplit_hosts import COORDINATORS, ETCD, PORTS, SERVERS
from cli.drills.netsplit_report import (
    ack_times,
    acked_while_primary,
    fence_summary,
    first_after,
    in_ranges,
    longest_gap,
    outage,
)
from cli.workload.disk_loss_watch import RestoreWatch
from rangetable.errors import TableError


def _rejoined(d: Drill, victim: str, table: str, since: float, timeout: float = 30.0,
              old_incarnation: str | None = None) -> tuple[float | None, float | None]:
    """(seconds from ``since`` until ``victim`` is alive again — in a new incarnation when given —, until it
    is also in the in-sync set of every range of ``table`` that names it a replica), None when not in time."""
    alive = caught = None
    deadline = since + timeout
    while time.monotonic() < deadline and caught is None:
        st = d.status()
        if st is not None:
            s = next((s for s in st["servers"] if s["id"] == victim), None)
            if alive is None and s and s["alive"] and (old_incarnation is None or s.get("incarnation") != old_incarnation):
                alive = round(time.monotonic() - since, 3)
            mine = [r for r in st["ranges"] if r["table"] == table and victim in r.get("replicas", [])]
            if alive is not None and all(victim in r.get("insync", []) for r in mine):
                caught = round(time.monotonic() - since, 3)
        time.sleep(0.1)
    return alive, caught


def _settle_and_finish(d: Drill, kind: str, target: str, ranges: list[dict], client: Any, t_cut: float,
                       t_heal: float) -> tuple[dict, dict, float]:
    """Wait for the map to converge, let the workload run a little longer, verify; (the common row, the raw
    result, the end of the window)."""
    converged = d.converge(t_heal)
    time.sleep(1.5)
    t_end = time.monotonic()
    res = client.finish()
    return d.common(kind, target, ranges, res, t_cut, t_heal, t_end, converged), res, t_end


def _served(prober: Prober, lease_s: float) -> dict[str, float | None]:
    """When the last of the cut server's ranges answered elsewhere, after the cut and after its lease (None: one
    never did while the prober ran)."""
    served = max(prober.served.values()) if prober.served and not prober.pending else None
    return {"served_after_cut_s": served,
            "served_after_lease_s": None if served is None else round(max(0.0, served - lease_s), 3)}


def primary(d: Drill) -> dict:
    """Cut the partition server that is primary of most of the table's ranges; it must fence itself by its
    lease, its ranges must be served elsewhere, and it must rejoin and catch up once healed."""
    table, ranges, client = d.start_table()
    victim = busiest_primary(ranges)
    watched = [r for r in ranges if r["primary"] == victim]
    rng = watched[0]
    pk = (rng["low"] or "a") + "~fence"
    if not in_ranges(pk, [rng]):
        pk = rng["low"]
    probe = FenceProbe(d.net, victim, d.s.host_dir(victim), d.s.child(victim).extra["endpoint"], rng, pk)
    d.clients.append(probe)
    t_cut = d.cut(victim)
    prober = Prober(d.s.natives[0], table, watched, t_cut)
    prober.start()
    primary_until = {r["id"]: t_cut for r in watched}  # range id -> the last time the map named the victim its primary
    while time.monotonic() - t_cut < d.fault_seconds:
        # A map that names the victim was the map at some instant after the question was asked, and the primary
        # changes once: so the victim surely owned the range when the question was asked, not when the answer
        # came (a slow answer would count the new primary's acknowledgements as the cut server's).
        asked = time.monotonic()
        st = d.status(0.5)
        for r in (st or {}).get("ranges", []):
            if r["id"] in primary_until and r["primary"] == victim:
                primary_until[r["id"]] = asked
        time.sleep(0.1)
    rounds = probe.finish()
    t_heal = d.heal(victim)
    rejoined, caught_up = _rejoined(d, victim, table, t_heal)
    prober.stop.set()
    row, res, t_end = _settle_and_finish(d, "primary", victim, ranges, client, t_cut, t_heal)
    served = _served(prober, d.lease_s)
    late = acked_while_primary(res["acks"], watched, primary_until, t_cut + d.lease_s)
    return {**row, "ranges_on_target": len(watched), "fence": fence_summary(rounds, t_cut, d.lease_s),
            "acked_by_cut_server": len(late), **served,
            "target_ranges_gap_s": longest_gap(ack_times(res["acks"], ranges=watched), t_cut, t_end),
            "rejoined_after_heal_s": rejoined, "caught_up_after_heal_s": caught_up}


def follower(d: Drill) -> dict:
    """Cut a partition server that is a follower only (its primaries of the table moved away first): no client
    may see an error, and it must rejoin and catch up once healed."""
    table, ranges, client = d.start_table()
    st = d.status(5.0) or {}
    mine = [r for r in st.get("ranges", []) if r["table"] == table]
    servers = sorted({x for r in mine for x in r.get("replicas", [])})
    count = {s: sum(s in r.get("replicas", []) and s != r["primary"] for r in mine) for s in servers}
    victim = max(sorted(count), key=lambda s: (count[s], -sum(r["primary"] == s for r in mine)))
    for r in mine:
        if r["primary"] == victim:
            to = next(s for s in r.get("insync", []) if s != victim)
            d.until(lambda r=r, to=to: call(d.s.coordinator, {"op": "move", "range": r["id"], "server": to},
                                          timeout=30), f"moving {r['id']}'s primary off {victim}", 60.0)
    ranges = d.table_ranges(table)
    followed = [r for r in ranges if victim in r.get("replicas", [])]
    time.sleep(1.0)
    t_cut = d.cut(victim)
    time.sleep(d.fault_seconds)
    t_heal = d.heal(victim)
    rejoined, caught_up = _rejoined(d, victim, table, t_heal)
    row, _res, _t = _settle_and_finish(d, "follower", victim, ranges, client, t_cut, t_heal)
    return {**row, "ranges_followed": len(followed), "primaries_on_target": sum(r["primary"] == victim for r in ranges),
            "rejoined_after_heal_s": rejoined, "caught_up_after_heal_s": caught_up}


def coordinator(d: Drill) -> dict:
    """Cut the leading coordinator's host: the standby on another host must lead within a lease (and 1 s to take
    over), and no range
    may go unserved longer than 3 s."""
    _table, ranges, client = d.start_table()
    st = d.until(lambda: call(d.s.coordinator, {"op": "status"}, timeout=2), "the coordinator's status")
    eps = {d.s.child(c).extra["endpoint"]: c for c in COORDINATORS}
    leader = eps[st["leader"]]
    other = next(ep for ep, c in eps.items() if c != leader)
    t_cut = d.cut(leader)
    led = None
    while time.monotonic() - t_cut < max(d.fault_seconds, 10.0) and led is None:
        try:
            s2 = call(other, {"op": "status"}, timeout=0.3)
            if s2.get("term", 0) > st["term"]:
                led = round(time.monotonic() - t_cut, 3)
        except TableError:
            time.sleep(0.05)
    time.sleep(max(0.0, d.fault_seconds - (time.monotonic() - t_cut)))
    t_heal = d.heal(leader)
    back = None
    while time.monotonic() - t_heal < 30 and back is None:  # the deposed leader answers again, as a standby
        try:
            call(d.s.child(leader).extra["endpoint"], {"op": "ping"}, timeout=0.3)
            back = round(time.monotonic() - t_heal, 3)
        except TableError as exc:
            if exc.error_code == "NotLeader":
                back = round(time.monotonic() - t_heal, 3)
            else:
                time.sleep(0.1)
    row, _res, _t = _settle_and_finish(d, "coordinator", leader, ranges, client, t_cut, t_heal)
    return {**row, "old_term": st["term"], "standby": eps[other], "standby_led_after_s": led,
            "old_leader_standby_after_heal_s": back}


def _etcd_leader(d: Drill) -> str:
    """The etcd member that leads the etcd cluster now (asked through each member's maintenance status)."""
    from coordinator.etcd.client import EtcdClient

    ids = {}
    leader = None
    for m in ETCD:
        try:
            res = EtcdClient(f"http://{d.net.hosts[m].address}:{PORTS['etcd-client']}", 1.0).call(
                "maintenance/status", {})
        except TableError:
            continue
        ids[res["header"]["member_id"]] = m
        leader = res.get("leader", leader)
    return ids.get(leader, ETCD[0])


def _create_table(d: Drill, name: str, timeout: float) -> dict[str, Any]:
    """Try to create table ``name`` through the first frontend: the outcome, the error code and how long it took."""
    t = time.monotonic()
    try:
        call(d.s.natives[0], {"op": "create_table", "table": name}, timeout=timeout)
        return {"ok": True, "code": None, "after_s": round(time.monotonic() - t, 3)}
    except TableError as exc:
        if exc.error_code == "TableAlreadyExists":  # created; the answer to the first try was lost, a retry saw it
            return {"ok": True, "code": exc.error_code, "after_s": round(time.monotonic() - t, 3)}
        return {"ok": False, "code": exc.error_code, "message": exc.message[:160],
                "after_s": round(time.monotonic() - t, 3)}


def etcd_minority(d: Drill) -> dict:
    """Cut the leading etcd member: nothing a client sees may change, and a table can still be created. The
    coordinator's status is asked every 0.2 s meanwhile, as a dashboard does (asked in the coordinator's loop, it
    waited there behind a commit hung on the cut member, and every partition server's lease lapsed)."""
    _table, ranges, client = d.start_table()
    st = d.status(5.0) or {}
    member = _etcd_leader(d)
    t_cut = d.cut(member)
    watching = threading.Event()

    def watch() -> None:
        while not watching.wait(0.2):
            d.status(1.0)

    watcher = threading.Thread(target=watch, name="status-watch", daemon=True)
    watcher.start()
    time.sleep(min(1.0, d.fault_seconds / 2))
    create = _create_table(d, f"ns{d.seed % 10**6}x{d.n}etcd1", 15.0)
    time.sleep(max(0.0, d.fault_seconds - (time.monotonic() - t_cut)))
    watching.set()
    watcher.join()
    t_heal = d.heal(member)
    row, _res, _t = _settle_and_finish(d, "etcd-minority", member, ranges, client, t_cut, t_heal)
    st2 = d.status(5.0) or {}
    return {**row, "etcd_leader_cut": True, "create_table_during_cut": create,
            "coordinator_term": [st.get("term"), st2.get("term")]}


def etcd_majority(d: Drill) -> dict:
    """Cut two of the three etcd members: configuration changes stop at once; reads and writes go on until a
    partition server's lease would be at risk; everything recovers once healed."""
    _table, ranges, client = d.start_table()
    leader = _etcd_leader(d)
    members = [leader, next(m for m in ETCD if m != leader)]
    t_cut = d.cut(*members)
    time.sleep(0.3)
    create = _create_table(d, f"ns{d.seed % 10**6}x{d.n}etcd2", 10.0)
    time.sleep(max(0.0, max(d.fault_seconds, 2 * d.lease_s + 4.0) - (time.monotonic() - t_cut)))
    t_heal = d.heal(*members)
    after = None
    deadline = t_heal + 30
    while after is None and time.monotonic() < deadline:
        c = _create_table(d, f"ns{d.seed % 10**6}x{d.n}etcd3", 5.0)
        if c["ok"]:
            after = round(time.monotonic() - t_heal, 3)
    row, res, _t = _settle_and_finish(d, "etcd-majority", "+".join(members), ranges, client, t_cut, t_heal)
    times = ack_times(res["acks"])
    went_on, stopped = outage(times, t_cut, t_heal)
    return {**row, "create_table_during_cut": create, "create_table_after_heal_s": after,
            "writes_went_on_s": went_on, "writes_stopped_s": stopped,
            "writes_resumed_after_heal_s": first_after(times, t_heal), "errors_seen": res["client"]["errors"]}


def lease_lapses(d: Drill, since_wall: float) -> dict[str, int]:
    """How many times each partition server's log says its lease lapsed (``lease lapsed: stopped serving``) at or
    after the wall-clock time ``since_wall`` (a log line starts with its local time, as ``rangetable up`` logs)."""
    out: dict[str, int] = {}
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since_wall))
    for sid in SERVERS:
        try:
            with open(d.s.log_path(sid), errors="replace") as f:
                out[sid] = sum("lease lapsed: stopped serving" in line and line[:19] >= since for line in f)
        except OSError:
            out[sid] = 0
    return out


def primary_and_etcd(d: Drill) -> dict:
    """Cut at once the partition server that is primary of most of the table's ranges and the leading etcd member
    (one host that ran both): every commit of the failover waits for etcd to elect a new leader, and the cut
    server's ranges must still be served elsewhere, as in ``primary``; no other server may lose its lease (the
    coordinator's loop must not wait for those commits: it answers the heartbeats)."""
    table, ranges, client = d.start_table()
    victim = busiest_primary(ranges)
    watched = [r for r in ranges if r["primary"] == victim]
    member = _etcd_leader(d)
    wall = time.time()
    t_cut = d.cut(victim, member)
    prober = Prober(d.s.natives[0], table, watched, t_cut)
    prober.start()
    time.sleep(d.fault_seconds)
    t_heal = d.heal(victim, member)
    rejoined, caught_up = _rejoined(d, victim, table, t_heal)
    prober.stop.set()
    row, res, t_end = _settle_and_finish(d, "primary-and-etcd", f"{victim}+{member}", ranges, client, t_cut, t_heal)
    lapses = lease_lapses(d, wall)
    return {**row, "ranges_on_target": len(watched), **_served(prober, d.lease_s),
            "others_lease_lapses": {s: n for s, n in lapses.items() if s != victim and n},
            "rejoined_after_heal_s": rejoined, "caught_up_after_heal_s": caught_up}


def host_lost(d: Drill) -> dict:
    """Cut the partition server that is primary of most of the table's ranges, kill it and delete its directory
    (the host is lost with its disk): its replicas must be rebuilt elsewhere; a replacement host (empty
    directory, same name) rejoins once healed."""
    table, ranges, client = d.start_table()
    st = d.status(5.0) or {}
    ranges = [r for r in st.get("ranges", []) if r["table"] == table] or ranges
    victim = busiest_primary(ranges)
    info = next(s for s in st["servers"] if s["id"] == victim)
    n = min(len(r.get("replicas", [])) for r in ranges)
    t_cut = d.cut(victim)
    proc = d.s.child(victim).proc
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    path = d.s.host_dir(victim)
    gone = f"{path}.lost-{time.monotonic_ns()}"
    os.rename(path, gone)
    shutil.rmtree(gone, ignore_errors=True)
    d.say(f"  killed {victim} (pid {info.get('pid')}) and deleted {path}")
    watch = RestoreWatch(lambda: call(d.s.coordinator, {"op": "status"}, timeout=2), ranges, n, victim,
                         str(info.get("incarnation")), t_cut, d.s.host_dir)
    watch.start()
    watch.join(timeout=d.rereplicate_after_s + d.lease_s + 40.0)
    watch.stop.set()
    rebuilt = max((v["t"] for v in watch.restored.values()), default=None) \
        if len(watch.restored) == len(ranges) else None
    os.makedirs(path, exist_ok=True)
    d.s._host(victim)  # a replacement host: the keys copied again, an empty data directory
    t_heal = d.heal(victim)
    rejoined, _ = _rejoined(d, victim, table, t_heal, old_incarnation=str(info.get("incarnation")))
    row, _res, _t = _settle_and_finish(d, "host-lost", victim, ranges, client, t_cut, t_heal)
    return {**row, "replicas": n, "ranges_with_copy": sum(victim in r.get("replicas", []) for r in ranges),
            "rebuilt_after_cut_s": rebuilt, "rereplicate_after_s": d.rereplicate_after_s,
            "rebuilt_on": sorted({s for v in watch.restored.values() for s in v["new_copies"]}),
            "rejoined_after_heal_s": rejoined}


FAULTS: dict[str, Callable[[Drill], dict]] = {"primary": primary, "follower": follower, "coordinator": coordinator,
                                              "etcd-minority": etcd_minority, "etcd-majority": etcd_majority,
                                              "primary-and-etcd": primary_and_etcd, "host-lost": host_lost}
