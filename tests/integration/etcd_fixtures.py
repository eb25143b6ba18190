"""A real etcd for the tests that need one (``cli/bench/etcd_server.py``), skipped with the reason
printed when the ``etcd`` binary is absent (``apt-get install etcd-server``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cli.bench.etcd_server import LocalEtcd, etcd_missing


@pytest.fixture(scope="module")
def local_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    """One etcd for the module, stopped at its end."""
    why = etcd_missing()
    if why:
        print(f"skipped: {why}")
        pytest.skip(why)
    server = LocalEtcd(str(tmp_path_factory.mktemp("etcd")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def etcd(local_etcd: LocalEtcd) -> str:
    """The ``--meta`` URL (no prefix) of the module's etcd."""
    return local_etcd.url
