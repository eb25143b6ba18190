"""The JavaScript SDK as a second client: ``@azure/data-tables`` runs the 25 reference cases
(``tests/js/cases.mjs``) against a real cluster, and case 26, rangetable's extension headers.

``npm ci`` runs once and is cached in ``tests/js/node_modules`` (git-ignored; re-run when
``package-lock.json`` changes). Without node/npm, or when ``npm ci`` cannot reach the registry, the
test skips and says why; any other failure fails it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cluster import ClusterFactory
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY

JS = Path(__file__).resolve().parents[1] / "js"
STAMP = JS / "node_modules" / ".package-lock.json"  # written by npm ci, a copy of the lock it installed
NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH",
                  "network", "getaddrinfo", "request to https://")


def install() -> None:
    """``npm ci`` unless node_modules already holds what package-lock.json names; skips when it cannot."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            print(f"skipping the JavaScript SDK cases: {tool} is not installed")
            pytest.skip(f"{tool} is not installed")
    lock = JS / "package-lock.json"
    if STAMP.exists() and STAMP.stat().st_mtime >= lock.stat().st_mtime \
            and (JS / "node_modules" / "@azure" / "data-tables" / "package.json").exists():
        return
    out = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=JS, capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        text = out.stdout + out.stderr
        if any(marker in text for marker in NETWORK_ERRORS):
            line = next(ln for ln in text.splitlines() if any(m in ln for m in NETWORK_ERRORS))
            reason = f"npm ci could not reach the registry: {line.strip()[:200]}"
            print(f"skipping the JavaScript SDK cases: {reason}")
            pytest.skip(reason)
        raise AssertionError(f"npm ci failed:\n{text[-3000:]}")


@pytest.mark.slow
def test_js_sdk_reference_cases(tmp_path, cluster_factory: ClusterFactory):
    install()
    with cluster_factory(servers=1, data_dir=tmp_path / "data") as c:
        env = {**os.environ, "RT_TABLE_URL": c.http, "RT_ACCOUNT": DEV_ACCOUNT, "RT_KEY": DEV_KEY}
        out = subprocess.run(["node", "cases.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=180)
    lines = [line for line in out.stdout.splitlines() if line.startswith('{"results"')]
    assert lines, f"cases.mjs printed no results (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    results = json.loads(lines[-1])["results"]
    for r in results:
        print(f"case {r['case']:2} {'ok  ' if r['ok'] else 'FAIL'} {r['ms']:5} ms  {r['name']}")
    failed = [f"case {r['case']} ({r['name']}): {r['error']}" for r in results if not r["ok"]]
    assert not failed, "\n".join(failed)
    assert sorted(r["case"] for r in results) == list(range(1, 27))
    assert out.returncode == 0, out.stderr[-2000:]
