"""``rangetable drill geo`` end to end (issue 35, ``docs/geo.md``): two clusters as `rangetable up` starts them, each
in a network namespace of its own, the link between them cut, failovers planned and forced, and the old primary
rejoining, under the checked workload; it must PASS and leave no namespace, link or process behind. (Its FAIL on
purpose, ``--sabotage early-ledger``, is judged by the same checks, unit-tested in test_geo_drill_checks.py.)"""

from __future__ import annotations

import subprocess

import pytest

from cli.drills import netns
from cli.drills.geo import format_report, run_geo_drill

REASON = netns.unavailable_reason()


@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=f"the geo drill cannot run here: {REASON}")
def test_geo_drill_passes_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = []
    real = netns.Network.create

    def create(self: netns.Network) -> None:
        tokens.append(self.token)
        real(self)

    monkeypatch.setattr(netns.Network, "create", create)
    rep = run_geo_drill(cut_s=3.0, steady_s=2.0)
    assert rep["passed"], format_report(rep)
    names = [p["phase"] for p in rep["phases"]]
    assert names[:2] == ["steady", "link cut 3 s"] and "primary lost: forced failover to b" in names
    lost = next(p for p in rep["phases"] if p["phase"].startswith("primary lost"))
    assert lost["ledger"] == lost["acknowledged_after_cut"] > 0
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert tokens and not [line for line in (links + spaces).splitlines() if tokens[0] in line]
