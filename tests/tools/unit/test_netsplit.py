"""``rangetable drill netsplit`` end to end: a cluster across network namespaces, links cut under load.

The tests that start no process; those that do are in tests/tools/integration/test_netsplit.py.
"""
from __future__ import annotations

import pytest

from cli.drills import netns


def test_unavailable_reason_names_root_and_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "needs root" in (netns.unavailable_reason() or "")
    monkeypatch.setattr(netns.shutil, "which", lambda _name: None)
    assert "`ip` command" in (netns.unavailable_reason() or "")
