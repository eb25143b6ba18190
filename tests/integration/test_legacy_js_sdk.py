"""The legacy JavaScript SDK (``azure-storage`` 2.10.7, pinned in ``tests/js/package-lock.json``) runs the
25 reference cases (``tests/js/legacy_cases.mjs``) against a real cluster, twice: with a
``TableEndpoint`` connection string and in emulator mode (``UseDevelopmentStorage=true``: the dev
account, its key and path-style URLs, pointed at the cluster's port since the SDK fixes it at 10002).

Where the SDK refuses bad input itself (table names, a 101st batch operation, a write to the secondary)
the case checks that refusal. ``tests/js_cases.py`` installs the packages once (``npm ci``) and skips,
saying why, without node/npm or the registry.
"""

from __future__ import annotations

import pytest

from tests.cluster import ClusterFactory
from tests.js_cases import install, run_cases
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    install()
    with cluster_factory() as c:
        yield c


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["table_endpoint", "emulator"])
def test_legacy_js_sdk_reference_cases(cluster, mode: str):
    run_cases("legacy_cases.mjs", {"RT_TABLE_URL": cluster.http, "RT_ACCOUNT": DEV_ACCOUNT, "RT_KEY": DEV_KEY,
                                   "RT_MODE": mode})
