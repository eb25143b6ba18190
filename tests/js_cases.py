"""Running the JavaScript case scripts of ``tests/js`` (``cases.mjs`` for ``@azure/data-tables``,
``legacy_cases.mjs`` for the legacy ``azure-storage``) against a cluster.

``npm ci`` runs once and is cached in ``tests/js/node_modules`` (git-ignored; re-run when
``package-lock.json`` changes). Without node/npm, or when ``npm ci`` cannot reach the registry, the
calling test skips and says why; any other failure fails it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parent / "js"
STAMP = JS / "node_modules" / ".package-lock.json"  # written by npm ci, a copy of the lock it installed
NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH",
                  "network", "getaddrinfo", "request to https://")


def installed() -> bool:
    """Whether node_modules holds every package package.json names, installed from the current lock."""
    lock = JS / "package-lock.json"
    if not STAMP.exists() or STAMP.stat().st_mtime < lock.stat().st_mtime:
        return False
    wanted = json.loads((JS / "package.json").read_text())["dependencies"]
    return all((JS / "node_modules" / name / "package.json").exists() for name in wanted)


def install() -> None:
    """``npm ci`` unless node_modules already holds what package-lock.json names; skips when it cannot."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            print(f"skipping the JavaScript SDK cases: {tool} is not installed")
            pytest.skip(f"{tool} is not installed")
    if installed():
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


def run_cases(script: str, env: dict[str, str], timeout: float = 240, cases: int = 25) -> list[dict]:
    """Run ``node <script>`` with ``env`` added, print each case's line, and fail unless all ``cases`` passed."""
    out = subprocess.run(["node", script], cwd=JS, env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=timeout)
    lines = [line for line in out.stdout.splitlines() if line.startswith('{"results"')]
    assert lines, f"{script} printed no results (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    results: list[dict] = json.loads(lines[-1])["results"]
    for r in results:
        print(f"case {r['case']:2} {'ok  ' if r['ok'] else 'FAIL'} {r['ms']:5} ms  {r['name']}")
    print(f"{script}: {sum(r['ok'] for r in results)} of {len(results)} cases passed")
    failed = [f"case {r['case']} ({r['name']}): {r['error']}" for r in results if not r["ok"]]
    assert not failed, "\n".join(failed)
    assert sorted(r["case"] for r in results) == list(range(1, cases + 1))
    assert out.returncode == 0, out.stderr[-2000:]
    return results
