"""``rangetable drill geo`` end to end (issue 35, ``docs/geo.md``): two clusters as `rangetable up` starts them, each
in a network namespace of its own, the link between them cut, failovers planned and forced, and the old primary
rejoining, under the checked workload; it must PASS and leave no namespace, link or process behind. (Its FAIL on
purpose, ``--sabotage early-ledger``, is judged by the same checks, unit-tested in test_geo_drill_checks.py.)"""

from __future__ import annotations

import pytest

from cli.drills import netns
from cli.drills.geo import format_report, run_geo_drill
from tests.netns_helpers import leftovers, record_networks

REASON = netns.unavailable_reason()


@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=f"the geo drill cannot run here: {REASON}")
def test_geo_drill_passes_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = record_networks(monkeypatch)
    rep = run_geo_drill(cut_s=3.0, steady_s=2.0)
    assert rep["passed"], format_report(rep)
    names = [p["phase"] for p in rep["phases"]]
    assert names[:2] == ["steady", "link cut 3 s"] and "primary lost: forced failover to b" in names
    lost = next(p for p in rep["phases"] if p["phase"].startswith("primary lost"))
    assert lost["ledger"] == lost["acknowledged_after_cut"] > 0
    assert tokens and leftovers(tokens[0]) == []
