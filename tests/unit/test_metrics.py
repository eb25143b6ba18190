"""Prometheus metrics: the pure helpers, and a real cluster whose every process serves /metrics with.

The tests that start no process; those that do are in tests/integration/test_metrics.py.
"""
from __future__ import annotations

import pytest

from cli.commands.observe import scrape
from frontend.metrics import MAX_SERIES, Answers
from rangetable import protocol
from rangetable.errors import TableError
from rangetable.kernel.metrics import LATENCY_BUCKETS, bucket_counts, cumulative, parse_bind


def test_bucket_counts_exact_and_scaled() -> None:
    exact = bucket_counts([0.00004, 0.0003, 0.0003, 9.0], 4)
    assert exact[0] == 1 and exact[LATENCY_BUCKETS.index(0.0005)] == 2 and exact[-1] == 1
    assert sum(bucket_counts([0.001] * 10, 1000)) == pytest.approx(1000)  # 10 samples stand for 1000 requests
    assert bucket_counts([], 5) == [0.0] * (len(LATENCY_BUCKETS) + 1)
    pairs = cumulative(exact)
    assert pairs[-1] == ("+Inf", 4) and [c for _, c in pairs] == sorted(c for _, c in pairs)


def test_metrics_endpoint_serves_and_a_taken_port_is_not_fatal() -> None:
    from prometheus_client.core import GaugeMetricFamily

    from rangetable.kernel.metrics import serve_metrics

    def families() -> list:
        g = GaugeMetricFamily("rangetable_test_value", "A test gauge.", labels=["range"])
        g.add_metric(["r1"], 7)
        return [g]

    url = serve_metrics("127.0.0.1:0", families)
    samples = scrape(url)
    assert ("rangetable_test_value", {"range": "r1"}, 7.0) in samples
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert serve_metrics(f"127.0.0.1:{port}", families) == ""  # taken: logged, no exception


def test_parse_bind_and_answers() -> None:
    assert parse_bind("127.0.0.1:9100") == ("127.0.0.1", 9100)
    assert parse_bind(":0") == ("127.0.0.1", 0)
    with pytest.raises(ValueError):
        parse_bind("localhost:http")
    a = Answers()
    a.note_body("get", protocol.ok({"x": 1}))
    a.note_body("get", protocol.error(TableError("ResourceNotFound")))
    a.note_body(None, b"garbage")
    assert a.counts == {("get", "ok"): 1, ("get", "ResourceNotFound"): 1, ("invalid", "unknown"): 1}
    for i in range(2000):  # op names chosen by clients do not grow the series without bound
        a.note(f"op{i}", "InvalidInput")
    assert len(a.counts) <= MAX_SERIES + 1 and a.counts[("other", "InvalidInput")] >= 2000 - MAX_SERIES
