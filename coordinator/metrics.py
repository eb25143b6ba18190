"""The coordinator's Prometheus metrics: the map, the servers, and every change it made.

Read under the map's lock when ``/metrics`` is scraped; the event log keeps only its counts by kind
(:attr:`coordinator.state.events.EventLog.counts`, since the process started) for them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from coordinator.map.holdings import ROLES, holdings, range_reports
from coordinator.replicas.sets import health
from rangetable.messages import is_replicated

if TYPE_CHECKING:
    from coordinator.state.cluster import Cluster


def collect(cl: Cluster, term: int) -> list:
    """The metric families of the coordinator (``term``: the one it leads, 0 on a standby)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    now = time.monotonic()
    with cl.map.lock:
        version = cl.map.pmap.version
        ranges = [(r["table"], r["id"], str(r["primary"]), r["state"], r["epoch"]) for r in cl.map.pmap.ranges.values()]
        tables = list(cl.map.pmap.tables.values())
        servers = [(s.id, s.alive, now - s.last_seen, len(s.ranges), s.pending) for s in cl.registry.servers.values()]
        events = dict(cl.events.counts)
        want = cl.cfg.replicas
        repl = [r for r in cl.map.pmap.ranges.values() if is_replicated(r)]
        live = {s.id for s in cl.registry.servers.values() if s.alive}
        healths = [health(r, live, want) for r in repl]
        under = sum(1 for h in healths if h["under_replicated"])
        unsynced = sum(1 for h in healths if h["out_of_sync"])
        rebuilding = sum(1 for s in cl.registry.servers.values() for rep in s.repl.values() if rep.get("rebuilding"))
        moving = sum(1 for r in repl if r.get("move"))
        reports = range_reports(cl.map.pmap.ranges.values(), cl.registry.servers)
        held = holdings(cl.map.pmap.ranges.values(), reports, cl.registry.servers)
        geo = [(r["table"], r["lag_s"], r["alarm"]) for r in cl.map.cuts.status(cl.map.pmap.user_tables(), now)
               if r["lag_s"] is not None] if cl.map.cuts.cuts else []
        feeds: dict[str, list[int]] = {}
        for r in cl.map.pmap.ranges.values():
            rep = reports.get(r["id"]) or {}
            f = feeds.setdefault(r["table"], [0, 0])
            f[0] += int(rep.get("feed_records", 0) or 0)
            f[1] += int(rep.get("feed_bytes", 0) or 0)
    fams: list = []
    if geo:  # a secondary cluster (docs/geo.md)
        lag = GaugeMetricFamily("rangetable_geo_lag_seconds", "How far each table of a secondary cluster is behind "
                                "its source: now less its cut (the RPO of a failover now).", labels=["table"])
        alarm = GaugeMetricFamily("rangetable_geo_lag_alarm", "1 while a table's lag is over --geo-lag-alarm-s.",
                                  labels=["table"])
        for table, seconds, on in geo:
            lag.add_metric([table], seconds)
            alarm.add_metric([table], 1 if on else 0)
        fams += [lag, alarm]
    g = GaugeMetricFamily("rangetable_coordinator_term", "The term this coordinator leads (0: a standby).")
    g.add_metric([], term)
    fams.append(g)
    g = GaugeMetricFamily("rangetable_map_version", "Version of the partition map (grows on every change).")
    g.add_metric([], version)
    fams.append(g)
    g = GaugeMetricFamily("rangetable_tables", "Tables in the catalog.")
    g.add_metric([], len(tables))
    fams.append(g)
    per_table = GaugeMetricFamily("rangetable_table_ranges", "Ranges of each table.", labels=["table"])
    counts: dict[str, int] = dict.fromkeys(tables, 0)
    for table, *_ in ranges:
        counts[table] = counts.get(table, 0) + 1
    for table, n in sorted(counts.items()):
        per_table.add_metric([table], n)
    fams.append(per_table)
    for i, (what, text) in enumerate((("records", "Changes the table's change feed holds (each replica holds them all; "
                                                "summed over the table's ranges, as their primaries last reported)."),
                                     ("bytes", "Bytes of the table's change feed on each replica (keys and values; "
                                               "summed over its ranges)."))):
        g = GaugeMetricFamily(f"rangetable_table_feed_{what}", text, labels=["table"])
        for table, f in sorted(feeds.items()):
            g.add_metric([table], f[i])
        fams.append(g)
    rng = GaugeMetricFamily("rangetable_range_epoch", "Each range of the map with its primary and state (value: its epoch).",
                            labels=["table", "range", "server", "state"])
    for table, rid, primary, state, epoch in sorted(ranges, key=lambda r: r[1]):
        rng.add_metric([table, rid, primary, state], epoch)
    fams.append(rng)
    alive = GaugeMetricFamily("rangetable_server_alive", "1 for a live partition server, 0 for one declared dead.",
                              labels=["server"])
    seen = GaugeMetricFamily("rangetable_server_heartbeat_age_seconds", "Seconds since the server's last heartbeat.",
                             labels=["server"])
    reported = GaugeMetricFamily("rangetable_server_reported_ranges", "Ranges the server reported open in its last heartbeat.",
                                 labels=["server"])
    for sid, is_alive, age, n, _pending in sorted(servers):
        alive.add_metric([sid], 1.0 if is_alive else 0.0)
        seen.add_metric([sid], round(age, 3))
        reported.add_metric([sid], n)
    fams += [alive, seen, reported]
    for what, text in (("ranges", "Ranges the server holds a replica of, by role (primary or follower)."),
                       ("entities", "Entities in the ranges the server holds, by role (exact, as each range's "
                        "primary last reported them)."),
                       ("bytes", "Bytes of entity data (keys and stored values) in the ranges the server holds, "
                        "by role.")):
        g = GaugeMetricFamily(f"rangetable_server_held_{what}", text, labels=["server", "role"])
        for sid, roles in sorted(held.items()):
            for role in ROLES:
                g.add_metric([sid, role], roles[role][what])
        fams.append(g)
    ops = CounterMetricFamily("rangetable_coordinator_events_total",
                              "Splits, merges, moves, failovers, dead servers, hot-key warnings and backups since the "
                              "coordinator started, by kind.", labels=["kind"])
    for kind in sorted({"split", "merge", "move", "failover", "server_dead", *events}):
        ops.add_metric([kind], events.get(kind, 0))
    fams.append(ops)
    for name, text, value in (
            ("rangetable_ranges_under_replicated", "Replicated ranges with fewer than --replicas replicas, or one on a "
             "server not alive.", under),
            ("rangetable_ranges_not_in_sync", "Replicated ranges with a replica outside the in-sync set (lagging "
             "or being rebuilt).", unsynced),
            ("rangetable_replicas_rebuilding", "Replicas being rebuilt from their primary's checkpoint.", rebuilding),
            ("rangetable_replica_moves", "Replica moves under way (a replica added, the old one not yet dropped).",
             moving)):
        g = GaugeMetricFamily(name, text)
        g.add_metric([], value)
        fams.append(g)
    return fams
