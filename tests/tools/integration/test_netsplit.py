"""``rangetable drill netsplit`` end to end: a replicated cluster across network namespaces with etcd as its
control plane, links cut under load.

Runs the real drill (namespaces, bridge, veth pairs, a 3-member etcd cluster, real processes) with its short
profile when this machine allows network namespaces and has etcd; skips with the reason otherwise. Also:
without root, `ip` or etcd the command exits 2 with a clear message, and a run leaves no namespace, link or
process behind.
"""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from cli.drills import netns, netsplit
from cli.drills.netsplit import run_netsplit
from cli.drills.netsplit_report import PROFILES, fault_problems, format_report
from cli.main import main
from tests.cluster import WORKLOAD_RATE
from tests.netns_helpers import leftovers, record_networks

REASON = netns.unavailable_reason() or (None if shutil.which("etcd") else "the `etcd` binary is not installed")


@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=f"the netsplit drill cannot run here: {REASON}")
def test_netsplit_drill_short_profile_passes_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = record_networks(monkeypatch)
    r = run_netsplit(fault_seconds=4.0, lease_s=3.0, threads=4, seed=7, profile="short", echo=print,
                     rate=WORKLOAD_RATE)
    print(format_report(r))
    assert [f["fault"] for f in r["faults"]] == PROFILES["short"]
    for f in r["faults"]:
        assert fault_problems(f) == [], f
        assert f["lost_writes"] == 0 and f["linearizable"]
    assert r["passed"]
    ps = r["faults"][0]
    assert ps["fence"]["lease_lapsed_after_cut_s"] is not None and ps["fence"]["answered_after_lease"] == 0
    majority = next(f for f in r["faults"] if f["fault"] == "etcd-majority")
    assert not majority["create_table_during_cut"]["ok"]  # no configuration change without an etcd quorum
    assert leftovers(tokens[0]) == []


def test_without_namespaces_exits_2_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netsplit, "unavailable_reason", lambda: "creating network namespaces needs root")
    out = CliRunner().invoke(main, ["drill", "netsplit", "--fault-seconds", "1"])
    assert out.exit_code == 2
    assert "cannot run here: creating network namespaces needs root" in out.output


def test_without_etcd_exits_2_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netsplit, "unavailable_reason", lambda: None)
    monkeypatch.setattr(netsplit.shutil, "which", lambda name: None)
    out = CliRunner().invoke(main, ["drill", "netsplit", "--profile", "short"])
    assert out.exit_code == 2
    assert "cannot run here: the `etcd` binary is not installed" in out.output


def test_json_report_and_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    failed = {"drill": "netsplit", "seed": 1, "lease_s": 3.0, "fault_seconds": 1.0, "hosts": 12,
              "subnet": "10.77.9.0/24", "passed": False,
              "faults": [{"fault": "setup", "target": "cluster", "error": "cluster did not become ready"}]}
    monkeypatch.setattr(netsplit, "run_netsplit", lambda *a, **k: failed)
    out = CliRunner().invoke(main, ["drill", "netsplit", "--json"])
    assert out.exit_code == 1 and json.loads(out.output) == failed
    out = CliRunner().invoke(main, ["drill", "netsplit"])
    assert out.exit_code == 1
    assert out.output.splitlines()[-1] == "FAIL" and "cluster did not become ready" in out.output
