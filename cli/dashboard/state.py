"""What the dashboard knows: the latest coordinator status, recent events and the heatmap history.

:class:`Watch` is fed by the poller (``poll``) and read by the HTTP handlers (``state``,
``heatmap``); one lock guards it. :func:`state_view` is the pure part: it turns a coordinator
``status`` answer into the servers and ranges tables of the page, and the replication panel (ranges
under-replicated or not in sync, rebuilds under way).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from cli.coordinator_client import range_loads
from cli.dashboard.heatmap import History, heatmap, ops_per_second
from rangetable.errors import TableError

log = logging.getLogger("rangetable.dashboard")

MAX_EVENTS = 200  # recent coordinator events kept for the page


def state_view(status: Mapping[str, Any], lease_s: float) -> dict[str, Any]:
    """Servers (alive, lease, load, what each holds as primary and as follower) and ranges (primary, state,
    size, load) of a status answer.

    A server holds its lease when it is alive and its last heartbeat is younger than ``lease_s``
    (the lease is counted from when the heartbeat was sent, so this is a close, slightly generous view).
    """
    loads = range_loads(status)
    want = int(status.get("replicas", 1) or 1)
    ranges = []
    for r in status.get("ranges", []):
        ld = loads.get(r["id"])
        ranges.append({
            "id": r["id"], "table": r["table"], "low": r["low"], "high": r["high"], "primary": r.get("primary"),
            "epoch": r.get("epoch"), "state": r.get("state"), "reported": ld is not None,
            "entities": int((ld or {}).get("entities", 0) or 0), "bytes": int((ld or {}).get("bytes", 0) or 0),
            "feed_bytes": int((ld or {}).get("feed_bytes", 0) or 0),
            "reads_s": float((ld or {}).get("reads_s", 0.0)), "writes_s": float((ld or {}).get("writes_s", 0.0)),
            "busy_s": float((ld or {}).get("busy_s", 0.0)), "ops_s": round(ops_per_second(ld or {}), 1),
            "lat_p99_ms": float((ld or {}).get("lat_p99_ms", 0.0) or 0.0),
            **replica_view(r),
        })
    servers = []
    for s in status.get("servers", []):
        seen = float(s.get("last_seen_s", 0.0))
        holds = s.get("holds") or {}
        servers.append({
            "id": s["id"], "endpoint": s.get("endpoint"), "pid": s.get("pid"), "alive": bool(s.get("alive")),
            "lease": "held" if s.get("alive") and seen <= lease_s else "lapsed", "last_seen_s": seen,
            "pending": s.get("pending", 0),
            "ops_s": round(sum(ops_per_second(ld) for ld in (s.get("load") or {}).values()), 1),
            # what it holds as primary and as follower, as the coordinator decided it (coordinator/map/holdings.py)
            **{role: {k: int((holds.get(role) or {}).get(k, 0) or 0) for k in ("ranges", "entities", "bytes")}
               for role in ("primary", "follower")},
        })
    return {"version": status.get("version"), "tables": list(status.get("tables", [])),
            "servers": servers, "ranges": ranges, "replication": replication_summary(status, ranges, want),
            "geo": status.get("geo")}


def replica_view(r: Mapping[str, Any]) -> dict[str, Any]:
    """A range's replicas for the page, as the coordinator judged them (its status' ``health``,
    :func:`coordinator.replicas.sets.health`): ``copies`` (empty for a range of one copy), ``out_of_sync`` and
    ``under_replicated``."""
    h = r.get("health")
    if not h:
        return {"copies": "", "out_of_sync": [], "under_replicated": False}
    return {k: h[k] for k in ("copies", "out_of_sync", "under_replicated")}


def replication_summary(status: Mapping[str, Any], ranges: list[dict[str, Any]], want: int) -> dict[str, Any]:
    """The cluster's replication at a glance: replicas wanted per range, how many ranges are replicated,
    under-replicated and not in sync, and each rebuild under way with its progress (bytes pulled of the
    checkpoint's total, rate), from the servers' heartbeats."""
    rebuilds = []
    for s in status.get("servers", []):
        for rid, p in sorted((s.get("rebuilding") or {}).items()):
            total, done = int(p.get("total", 0) or 0), int(p.get("bytes", 0) or 0)
            rebuilds.append({"range": rid, "server": s["id"], "primary": p.get("primary"), "bytes": done,
                             "total": total, "mb_s": float(p.get("mb_s", 0.0) or 0.0),
                             "percent": round(100.0 * done / total, 1) if total else 0.0})
    replicated = [r for r in ranges if r["copies"]]
    return {"replicas": want, "replicated": len(replicated),
            "under_replicated": sum(1 for r in replicated if r["under_replicated"]),
            "not_in_sync": sum(1 for r in replicated if r["out_of_sync"]), "rebuilding": rebuilds}


class Watch:
    """The dashboard's memory: bounded history, the latest status and the recent events."""

    def __init__(self, coordinator: str, call: Callable[..., Any], interval_s: float = 1.0,
                 history_s: float = 3600.0, lease_s: float = 2.0) -> None:
        self.coordinator = coordinator
        self.call = call
        self.interval_s = interval_s
        self.lease_s = lease_s
        self.history = History(max_columns=max(1, int(history_s / interval_s)))
        self.events: deque[dict] = deque(maxlen=MAX_EVENTS)
        self.status: dict[str, Any] | None = None
        self.polled_at = 0.0
        self.error = ""
        self.polls = 0
        self.poll_errors = 0
        self.lock = threading.Lock()
        self._since = 0

    def poll(self, now: float | None = None) -> bool:
        """Ask the coordinator for its status and new events once; False (and ``error`` set) when it did not answer."""
        now = time.time() if now is None else now
        try:
            status = self.call(self.coordinator, {"op": "status"}, timeout=max(1.0, self.interval_s * 2))
            events = self.call(self.coordinator, {"op": "events", "since": self._since, "limit": MAX_EVENTS},
                               timeout=max(1.0, self.interval_s * 2))
        except TableError as exc:
            with self.lock:
                self.error = f"{exc.error_code}: {exc.message}"
                self.poll_errors += 1
            return False
        with self.lock:
            self.history.add(now, status.get("ranges", []), range_loads(status))
            for e in events:
                self._since = max(self._since, int(e["seq"]))
                self.events.append(e)
            self.status = status
            self.polled_at = now
            self.error = ""
            self.polls += 1
        return True

    def run(self, stop: threading.Event) -> None:
        """Poll every ``interval_s`` until ``stop`` is set (the poller thread's loop)."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.poll()
            except Exception as exc:  # a malformed answer must not end the poller: show it and go on
                log.exception("poll failed")
                with self.lock:
                    self.error = f"InternalError: {exc!r}"
                    self.poll_errors += 1
            stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def state(self) -> dict[str, Any]:
        """The page's tables: cluster, servers, ranges and the newest events first."""
        with self.lock:
            view = state_view(self.status or {}, self.lease_s)
            return {
                **view, "coordinator": self.coordinator, "polled_at": self.polled_at, "error": self.error,
                "interval_s": self.interval_s, "polls": self.polls,
                "history": {"columns": len(self.history.columns), "max_columns": self.history.columns.maxlen,
                            "approx_bytes": self.history.approx_bytes()},
                "events": list(self.events)[::-1][:50],
            }

    def heatmap(self, window_s: float, width: int, mode: str, now: float | None = None) -> dict[str, Any]:
        """The heatmap of the last ``window_s`` seconds in at most ``width`` buckets."""
        now = time.time() if now is None else now
        with self.lock:
            cols = list(self.history.columns)
            sizes = dict(self.history.sizes)
        return heatmap(cols, sizes, now - window_s, now, width, mode)


def collect(watch: Watch) -> list:
    """The dashboard's Prometheus families: polls, failed polls, and the history's size."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    with watch.lock:
        polls, errors = watch.polls, watch.poll_errors
        columns, size = len(watch.history.columns), watch.history.approx_bytes()
    return [
        CounterMetricFamily("rangetable_dashboard_polls_total", "Coordinator polls answered.", value=polls),
        CounterMetricFamily("rangetable_dashboard_poll_errors_total", "Coordinator polls not answered.", value=errors),
        GaugeMetricFamily("rangetable_dashboard_history_columns", "Heatmap columns kept.", value=columns),
        GaugeMetricFamily("rangetable_dashboard_history_bytes", "Estimated memory of the heatmap history.",
                          value=size),
    ]
