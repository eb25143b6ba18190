"""Fixtures shared by the native clients' integration tests (``test_client.py``,
``test_client_transactions.py``): every test runs on both clients, the blocking one and the asyncio one
(``rangetable.aio``, driven through :class:`tests.integration.aio_blocking.Blocking`); ``clients`` makes
clients of the test's flavour, ``service`` is a service client on the test module's cluster and ``table``
a table of the test's own. Each of those modules starts its own cluster (a module-scoped ``cluster``
fixture)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.aio_blocking import Clients, LoopThread

_names = itertools.count()


@pytest.fixture(name="aio_loop", scope="module")
def aio_loop_fixture() -> Iterator[LoopThread]:
    """The event loop the asyncio clients of the module run on."""
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(name="clients", params=["blocking", "asyncio"])
def clients_fixture(request: pytest.FixtureRequest, aio_loop: LoopThread) -> Clients:
    """The constructors of the client under test."""
    return Clients(request.param, aio_loop if request.param == "asyncio" else None)


@pytest.fixture(name="service")
def service_fixture(cluster, clients: Clients) -> Iterator[Any]:
    """A service client on the test module's cluster."""
    with clients.TableServiceClient(cluster.native) as svc:
        yield svc


@pytest.fixture(name="table")
def table_fixture(service: Any) -> Iterator[Any]:
    """A new table of the test's own, deleted after it."""
    name = f"t{uuid.uuid4().hex[:10]}{next(_names)}"
    client = service.create_table(name)
    yield client
    service.delete_table(name)
