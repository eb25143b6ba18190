"""A frontend's Prometheus metrics: answers by operation and status.

The native frontend counts every answer by protocol op and status (``ok`` or the Azure error code)
in ``rangetable_frontend_requests_total``. The HTTP frontend counts every response by HTTP method
and status code in ``rangetable_http_requests_total``. The request path only bumps a dict entry;
the collector reads it when ``/metrics`` is scraped.
"""

from __future__ import annotations

from typing import Any

from rangetable import protocol
from rangetable.kernel.metrics import snapshot

_OK_PREFIX = b"\x81\xa2ok"  # msgpack of {"ok": …}: a fixmap of one entry whose key is "ok"


MAX_SERIES = 512  # distinct (op, status) pairs; later new ones count as ("other", status)


class Answers:
    """Counts of answers by (operation, status). Clients choose the op names and HTTP methods, so the
    number of pairs is bounded: past :data:`MAX_SERIES` a new op counts as ``other``."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def note(self, op: str, status: str) -> None:
        """Count one answer."""
        key = (op, status)
        counts = self.counts
        n = counts.get(key)
        if n is None and len(counts) >= MAX_SERIES:
            key = ("other", status)
            n = counts.get(key)
        counts[key] = (n or 0) + 1

    def note_body(self, op: Any, body: bytes) -> None:
        """Count one native answer from its encoded body (decoded only when it is an error)."""
        if body.startswith(_OK_PREFIX):
            status = "ok"
        else:
            try:
                reply = protocol.unpack(body)
                status = str(reply["error"]["code"])
            except Exception:
                status = "unknown"
        self.note(op if isinstance(op, str) else "invalid", status)


def collect(frontend_id: str, answers: Answers, name: str, labels: tuple[str, str], doc: str) -> list:
    """One counter family of ``answers`` labelled ``frontend`` plus the two ``labels``."""
    from prometheus_client.core import CounterMetricFamily

    fam = CounterMetricFamily(name, doc, labels=["frontend", *labels])
    for (a, b), n in sorted(snapshot(answers.counts).items()):
        fam.add_metric([frontend_id, a, b], n)
    return [fam]


def collect_native(frontend_id: str, answers: Answers) -> list:
    """The native frontend's families."""
    return collect(frontend_id, answers, "rangetable_frontend_requests_total", ("op", "status"),
                   "Native protocol requests answered, by op and status (ok or the Azure error code).")


def collect_http(frontend_id: str, answers: Answers) -> list:
    """The HTTP frontend's families."""
    return collect(frontend_id, answers, "rangetable_http_requests_total", ("method", "status"),
                   "REST requests answered, by HTTP method and status code.")
