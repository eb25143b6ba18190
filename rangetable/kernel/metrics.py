"""Prometheus metrics: the endpoint every process serves, and the pure helpers its collectors share.

No process updates a Prometheus object on its request path. Each keeps the plain counters it already
has (a partition server's per-range load, a frontend's answers by operation and status). A
collector turns them into metric families when ``/metrics`` is scraped, on the HTTP server's own
thread. Every name starts with ``rangetable_``. Labels are ``table``, ``range`` and ``server``, plus
``frontend``, ``op`` and ``status`` where they apply. The coordinator, partition server and
frontend collectors are in their packages (``*/metrics.py``).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("rangetable.kernel.metrics")

# Request latency buckets (seconds): 50 µs to 2.5 s.
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5)


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``, or a bare port) as (host, port); host defaults to 127.0.0.1.
    Raises ValueError for anything else."""
    host, _, port = bind.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"metrics address must be HOST:PORT, not {bind!r}")
    return host or "127.0.0.1", int(port)


def bucket_counts(samples: Iterable[float], count: int, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> list[float]:
    """Non-cumulative counts per bucket (the last one is +Inf) for ``count`` requests, estimated from
    a sample of their latencies: exact when the sample holds all of them, scaled up otherwise."""
    ordered = sorted(samples)
    if not ordered or count <= 0:
        return [0.0] * (len(buckets) + 1)
    scale = count / len(ordered)
    below = [bisect.bisect_right(ordered, b) for b in buckets]  # samples <= each upper bound
    edges = [0, *below, len(ordered)]
    return [(hi - lo) * scale for lo, hi in zip(edges, edges[1:], strict=False)]


def cumulative(counts: list[float], buckets: tuple[float, ...] = LATENCY_BUCKETS) -> list[tuple[str, float]]:
    """Non-cumulative bucket counts as Prometheus's cumulative ``(le, count)`` pairs ending with +Inf."""
    out: list[tuple[str, float]] = []
    acc = 0.0
    for le, c in zip([*(str(b) for b in buckets), "+Inf"], counts, strict=True):
        acc += c
        out.append((le, round(acc)))
    return out


def snapshot(d: dict) -> dict:
    """A copy of a dict another thread may be changing (retried if it changed size meanwhile)."""
    for _ in range(100):
        try:
            return dict(d)
        except RuntimeError:
            continue
    return {}


class FunctionCollector:
    """A collector whose ``collect`` is a plain function returning metric families."""

    def __init__(self, fn: Callable[[], Iterable[Any]]) -> None:
        self._fn = fn

    def collect(self) -> Iterable[Metric]:
        """The metric families at this scrape."""
        return list(self._fn())

    def describe(self) -> list:
        """Nothing up front (the families vary with the ranges served)."""
        return []


def serve_metrics(bind: str, collect: Callable[[], Iterable[Any]]) -> str:
    """Serve ``/metrics`` at ``bind`` (``HOST:PORT``; port 0 = any) on a daemon thread, with the
    families ``collect`` returns plus the process's own (CPU, memory, open files); returns the URL.

    A port that cannot be bound is logged and the process goes on without metrics: losing them
    must not take a partition server or a frontend down (or into a restart loop).
    """
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.process_collector import ProcessCollector

    host, port = parse_bind(bind)
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(namespace="rangetable", registry=registry)
    registry.register(FunctionCollector(collect))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("metrics: cannot serve on %s: %s; running without metrics", bind, exc)
        return ""
    return f"http://{host}:{server.server_port}/metrics"
