"""CURVE on every ZeroMQ socket: nothing answers a peer without a key, roles are enforced, client.

The tests that start no process; those that do are in tests/integration/test_curve.py.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import zmq

from coordinator.client_keys import validate
from rangetable import curve, protocol
from rangetable.errors import TableError


def test_policy_only_the_coordinator_controls_partition_servers() -> None:
    assert curve.may("partition-server", "control", "coordinator")
    for role in ("frontend", "admin", "partition-server", "client", None):
        assert not curve.may("partition-server", "control", role)
    # every peer the partition server's allow-list admits may send data (so data needs no per-message check)
    assert all(curve.may("partition-server", "data", r) for r in curve.ALLOWED_PEERS["partition-server"])
    assert curve.may("coordinator", "heartbeat", "partition-server")
    assert not curve.may("coordinator", "heartbeat", "frontend")
    assert curve.may("coordinator", "keys_admin", "admin")
    assert not curve.may("coordinator", "keys_admin", "frontend")
    assert curve.may("frontend", "request", "client") and not curve.may("frontend", "request", None)


def test_refusal_log_is_rate_limited() -> None:
    now = [0.0]
    lines: list[str] = []
    log = curve.RefusalLog(every_s=10, clock=lambda: now[0], emit=lines.append)
    assert log.refused("a", "peer 1")
    for _ in range(5):
        assert not log.refused("a", "peer 1")
    assert log.refused("b", "peer 2")  # another kind is logged on its own
    now[0] = 10.5
    assert log.refused("a", "peer 1")
    assert lines == ["refused peer 1", "refused peer 2", "refused peer 1 (5 more refusals of this kind held back)"]


def test_key_ring_files_are_private_and_complete(tmp_path: Path) -> None:
    ring = curve.KeyRing.create(str(tmp_path / "keys"))
    assert stat.S_IMODE(os.stat(tmp_path / "keys").st_mode) == 0o700
    for f in (tmp_path / "keys").iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    again = curve.KeyRing.create(str(tmp_path / "keys"))  # kept, not replaced
    assert again.public("coordinator") == ring.public("coordinator")
    assert ring.role_of(ring.pair("frontend").user_id) == "frontend"
    assert ring.role_of(curve.KeyPair.generate().user_id) is None
    # a host holding only its own secret and the others' public keys
    os.remove(tmp_path / "keys" / "coordinator.key_secret")
    part = curve.KeyRing.load(str(tmp_path / "keys"), own="frontend")
    assert part.public("coordinator") == ring.public("coordinator")
    with pytest.raises(ValueError, match="coordinator.key_secret"):
        curve.KeyRing.load(str(tmp_path / "keys"), own="coordinator")
    with pytest.raises(ValueError, match="rangetable keys init"):
        curve.KeyRing.load(str(tmp_path / "none"))


def test_client_key_registration_is_validated() -> None:
    pub = curve.KeyPair.generate().user_id
    rec = validate({"name": "app-1", "account": "devstoreaccount1", "public": pub}, {}, set())
    assert rec["public"] == pub and rec["account"] == "devstoreaccount1"
    bad = [
        ({"name": "", "account": "devstoreaccount1", "public": pub}, "InvalidInput"),
        ({"name": "a b", "account": "devstoreaccount1", "public": pub}, "InvalidInput"),
        ({"name": "a", "account": "Dev", "public": pub}, "InvalidInput"),
        ({"name": "a", "account": "devstoreaccount1", "public": "short"}, "InvalidInput"),
        ({"name": "app-1", "account": "devstoreaccount1", "public": curve.KeyPair.generate().user_id}, "EntityAlreadyExists"),
        ({"name": "b", "account": "devstoreaccount1", "public": pub}, "EntityAlreadyExists"),
    ]
    for req, code in bad:
        with pytest.raises(TableError) as e:
            validate(req, {"app-1": rec}, set())
        assert e.value.error_code == code, req


def test_request_fields_are_type_checked() -> None:
    req = {"table": "t", "since": 3, "flag": True, "none": None}
    assert protocol.field(req, "table", str) == "t"
    assert protocol.field(req, "since", int, 0) == 3
    assert protocol.field(req, "missing", int, 7) == 7
    assert protocol.field(req, "none", str, None) is None
    for name, kind in (("missing", str), ("table", int), ("flag", int), ("none", str)):
        with pytest.raises(TableError) as e:
            protocol.field(req, name, kind)
        assert e.value.error_code == "InvalidInput" and repr(name) in e.value.message


def test_keys_are_found_by_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ring = curve.KeyRing.create(str(tmp_path / "keys"))
    doc = {"native": "tcp://127.0.0.1:61001", "frontends": ["tcp://127.0.0.1:61001", "tcp://127.0.0.1:61002"],
           "coordinator": "tcp://127.0.0.1:61003", "pub": "tcp://127.0.0.1:61004",
           "curve": ring.connection_info("admin")}
    (tmp_path / "cluster.json").write_text(json.dumps(doc))
    monkeypatch.setenv("RANGETABLE_DATA_DIR", str(tmp_path))  # found through the default data dir
    server, client = curve.keys_for("tcp://127.0.0.1:61002")
    assert server == ring.public("frontend") and client == ring.pair("admin")
    assert curve.keys_for("tcp://127.0.0.1:61004")[0] == ring.public("coordinator")
    assert curve.keys_for("tcp://127.0.0.1:61009") is None
    sock = zmq.Context.instance().socket(zmq.DEALER)
    try:
        with pytest.raises(ValueError, match="no CURVE key known"):
            curve.connect(sock, "tcp://127.0.0.1:61009")
    finally:
        sock.close(0)
