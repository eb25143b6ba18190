"""Fixtures shared by the native client's integration tests (``test_client.py``,
``test_client_transactions.py``): a service client on the test module's cluster and a table of the test's
own. Each of those modules starts its own cluster (a module-scoped ``cluster`` fixture)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest

from rangetable import TableClient, TableServiceClient

_names = itertools.count()


@pytest.fixture(name="service")
def service_fixture(cluster) -> Iterator[TableServiceClient]:
    """A service client on the test module's cluster."""
    with TableServiceClient(cluster.native) as svc:
        yield svc


@pytest.fixture(name="table")
def table_fixture(service: TableServiceClient) -> Iterator[TableClient]:
    """A new table of the test's own, deleted after it."""
    name = f"t{uuid.uuid4().hex[:10]}{next(_names)}"
    client = service.create_table(name)
    yield client
    service.delete_table(name)
