"""``rangetable drill disk-loss`` against a real supervised 3-server cluster with --replicas 3: no acknowledged
write is lost and the history is linearizable after a server is killed and its directory deleted.
Restoration to 3 in-sync replicas is not required here (re-replication is a later step)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from cli.drills.disk_loss import format_report, run_disk_loss_drill
from cli.main import main
from tests.cluster import Cluster, ClusterFactory


@pytest.fixture(scope="module")
def replicated(cluster_factory: ClusterFactory) -> Iterator[Cluster]:
    with cluster_factory(servers=3, extra=["--replicas", "3", "--no-dashboard"]) as c:
        yield c


def test_disk_loss_drill_loses_nothing(replicated: Cluster) -> None:
    r = run_disk_loss_drill(replicated.data_dir, duration=8.0, threads=4, seed=7, restore_timeout=10.0,
                            require_restore=False)
    text = format_report(r)
    print(text)
    assert r["lost_writes"] == 0, r["lost_detail"]
    assert r["duplicate_applications"] == 0
    assert r["linearizable"], r["linearizability_detail"]
    assert r["all_served"], text  # the figure itself (about 1-2 s) is reported, not asserted
    assert r["client"]["ops"] > 500
    assert r["passed"] and text.endswith("PASS")
    if not r["all_restored"]:
        assert "NOT restored to 3 in-sync replicas within 10 s (not required" in text


def test_disk_loss_drill_refuses_an_unreplicated_cluster(cluster_factory: ClusterFactory) -> None:
    with cluster_factory(servers=2, extra=["--no-dashboard"]) as c:
        out = CliRunner().invoke(main, ["drill", "disk-loss", "--duration", "2", "--data-dir", c.data_dir])
    assert out.exit_code != 0
    assert "needs a replicated cluster" in out.output and "loses its ranges' data by design" in out.output
