"""Bound versus advertised addresses: the map publishes where processes are reached, not where they listen."""

from __future__ import annotations

import pytest

from rangetable import TableServiceClient
from rangetable.addresses import advertised, split_endpoint
from tests.cluster import ClusterFactory


def test_advertised_address_rules() -> None:
    assert advertised("tcp://127.0.0.1:5000") == "tcp://127.0.0.1:5000"
    assert advertised("tcp://0.0.0.0:5000", hostname="ps-b") == "tcp://ps-b:5000"  # wildcard: the host's name
    assert advertised("tcp://0.0.0.0:5000", "tcp://10.0.0.2") == "tcp://10.0.0.2:5000"  # the bound port
    assert advertised("tcp://0.0.0.0:5000", "10.0.0.2") == "tcp://10.0.0.2:5000"
    assert advertised("tcp://0.0.0.0:5000", "tcp://gw.example:30020") == "tcp://gw.example:30020"  # a port mapping
    assert advertised("tcp://[::]:7", "tcp://[fd00::2]") == "tcp://[fd00::2]:7"
    assert advertised("ipc:///run/rt.sock") == "ipc:///run/rt.sock"
    for bad in ("udp://10.0.0.2", "tcp://0.0.0.0", "tcp://*:9", "tcp://fd00::2"):
        with pytest.raises(ValueError):
            advertised("tcp://0.0.0.0:5000", bad)
    assert split_endpoint("tcp://h:1") == ("tcp", "h", "1")
    assert split_endpoint("h") == ("tcp", "h", "")


def test_cluster_bound_on_all_interfaces_publishes_its_advertised_address(tmp_path, cluster_factory: ClusterFactory) -> None:
    # 127.0.0.2 is another address of this host: every process listens on 0.0.0.0, and the map,
    # cluster.json and every connection between processes use 127.0.0.2.
    with cluster_factory(servers=2, extra=["--bind-host", "0.0.0.0", "--advertise-host", "127.0.0.2"], data_dir=tmp_path) as c:
        assert c.native.startswith("tcp://127.0.0.2:") and c.coordinator.startswith("tcp://127.0.0.2:")
        assert c.http.startswith("http://127.0.0.2:")
        st = c.status()
        assert sorted(s["endpoint"].rsplit(":", 1)[0] for s in st["servers"]) == ["tcp://127.0.0.2"] * 2
        assert st["pub"].startswith("tcp://127.0.0.2:")
        t = TableServiceClient(c.native).create_table("Hosts")
        t.upsert_entity({"PartitionKey": "p", "RowKey": "r", "n": 1})
        assert t.get_entity("p", "r")["n"] == 1
