"""The JavaScript SDK as a second client: ``@azure/data-tables`` runs the 25 reference cases
(``tests/js/cases.mjs``) against a real cluster, and case 26, rangetable's extension headers.

``tests/js_cases.py`` installs the packages once (``npm ci``) and skips, saying why, without node/npm or
the registry.
"""

from __future__ import annotations

import pytest

from tests.cluster import ClusterFactory
from tests.js_cases import install, run_cases
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY


@pytest.mark.slow
def test_js_sdk_reference_cases(tmp_path, cluster_factory: ClusterFactory):
    install()
    with cluster_factory(data_dir=tmp_path / "data") as c:
        run_cases("cases.mjs", {"RT_TABLE_URL": c.http, "RT_ACCOUNT": DEV_ACCOUNT, "RT_KEY": DEV_KEY}, timeout=180,
                  cases=26)  # the 25 reference cases and the condition/counter headers through customHeaders
