"""Bound versus advertised addresses: the map publishes where processes are reached, not where they listen."""

from __future__ import annotations

from rangetable import TableServiceClient
from tests.cluster import ClusterFactory


def test_cluster_bound_on_all_interfaces_publishes_its_advertised_address(tmp_path, cluster_factory: ClusterFactory) -> None:
    # 127.0.0.2 is another address of this host: every process listens on 0.0.0.0, and the map,
    # cluster.json and every connection between processes use 127.0.0.2.
    with cluster_factory(extra=["--bind-host", "0.0.0.0", "--advertise-host", "127.0.0.2"], data_dir=tmp_path) as c:
        assert c.native.startswith("tcp://127.0.0.2:") and c.coordinator.startswith("tcp://127.0.0.2:")
        assert c.http.startswith("http://127.0.0.2:")
        st = c.status()
        assert sorted(s["endpoint"].rsplit(":", 1)[0] for s in st["servers"]) == ["tcp://127.0.0.2"] * 3
        assert st["pub"].startswith("tcp://127.0.0.2:")
        t = TableServiceClient(c.native).create_table("Hosts")
        t.upsert_entity({"PartitionKey": "p", "RowKey": "r", "n": 1})
        assert t.get_entity("p", "r")["n"] == 1
