"""Coordinators elected through etcd, their meta store in etcd (``--meta etcd://``), on a real etcd.

The tests that start no process; those that do are in tests/integration/test_etcd.py.
"""
from __future__ import annotations

import pytest

from cli.port_reservation import PortReservation
from coordinator.etcd_client import parse_url, prefix_end
from coordinator.etcd_election import EtcdLeadership


def test_urls_and_prefixes() -> None:
    assert parse_url("etcd://127.0.0.1:2379") == ("http://127.0.0.1:2379", "/rangetable")
    assert parse_url("etcd://h:1/a/b/") == ("http://h:1", "/a/b")
    for bad in ("http://h:1", "etcd://h", "h:1"):
        with pytest.raises(ValueError):
            parse_url(bad)
    assert prefix_end(b"a/") == b"a0" and prefix_end(b"a\xff") == b"b"


def test_without_etcd_a_coordinator_stays_standby() -> None:
    ports = PortReservation()
    port = ports.take()
    ports.release()  # nothing listens there
    le = EtcdLeadership(f"etcd://127.0.0.1:{port}", "tcp://a:1", "tcp://a:2")
    assert le.poll() is None and le.term == 0 and le.deposed()
    le.beat()  # no lease: nothing to renew, no error
