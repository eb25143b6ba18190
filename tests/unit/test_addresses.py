"""Bound versus advertised addresses: the map publishes where processes are reached, not where they listen.

The tests that start no process; those that do are in tests/integration/test_addresses.py.
"""
from __future__ import annotations

import pytest

from rangetable.kernel.addresses import advertised, split_endpoint


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
