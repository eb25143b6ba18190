"""Fixtures shared by the integration tests. For the raw-HTTP REST tests (``test_rest_compat.py``, ``test_rest_client_fixes.py``,
``test_rest_conformance.py``): ``raw``, a signing keep-alive HTTP client on the test module's cluster (each
module starts its own, a module-scoped ``cluster`` fixture; a module may define its own ``table``), and ``table``, a table of the test's own made
and dropped through it. For the etcd tests: ``local_etcd`` and ``etcd`` (``tests/integration/etcd_fixtures.py``)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.etcd_fixtures import etcd, local_etcd  # noqa: F401 - fixtures of the etcd tests
from tests.rest_helpers import Raw

_n = itertools.count()


@pytest.fixture(scope="module")
def raw(cluster) -> Iterator[Raw]:  # noqa: ANN001 - the module's cluster fixture
    r = Raw(cluster.http)
    yield r
    r.close()


@pytest.fixture
def table(raw: Raw) -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:8]}{next(_n)}"
    assert raw.post("/Tables", {"TableName": name}).status == 201
    yield name
    raw.request("DELETE", f"/Tables('{name}')")
