"""A replica refuses a configuration older than one it has adopted (found by the replicated chaos drill: a
coordinator that lost the map change of a leadership transfer at epoch 14 told the old primary, by then a
follower at epoch 14, to be primary again at epoch 13 — two primaries, requests held forever)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from coordinator.control.operations import replica_ahead
from coordinator.replicas.sets import next_epoch
from partition_server.ranges import RangeSet
from partition_server.replication.replicator import Replicator
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import encode_ops
from rangetable.curve import KeyRing
from rangetable.errors import TableError

PEERS = {"a": "tcp://127.0.0.1:1", "b": "tcp://127.0.0.1:2"}


def _record(epoch: int, primary: str) -> dict:
    return {"id": "r", "epoch": epoch, "primary": primary, "peers": PEERS, "replicas": ["a", "b"], "insync": ["a", "b"],
            "token": "t"}


@pytest.fixture
def replicator(tmp_path: Path) -> Iterator[Replicator]:
    rep = Replicator(zmq.Context.instance(), KeyRing.create(str(tmp_path / "keys")), data_dir=str(tmp_path))
    rep.me = "b"
    yield rep
    rep.close()


def _batch(n: int) -> bytes:
    return encode_ops([(f"p\x00{n:05d}".encode(), b"v")])


def test_a_follower_at_epoch_14_refuses_to_lead_at_13(replicator: Replicator, tmp_path: Path) -> None:
    store = RangeStore.open(tmp_path / "b")
    try:
        assert replicator.attach("r", _record(14, "a"), store) == "following"
        with pytest.raises(TableError) as exc:
            replicator.attach("r", _record(13, "b"), store)
        assert exc.value.error_code == "NotPrimary" and "stale configuration of r: epoch 13 is below epoch 14" in str(exc.value)
        assert "r" not in replicator.primaries and replicator.following["r"].epoch == 14
        assert replicator.attach("r", _record(14, "a"), store) == "following"  # the same configuration again
        assert replicator.attach("r", _record(15, "b"), store) == "serving"  # a later one
        with pytest.raises(TableError):
            replicator.attach("r", _record(14, "a"), store)  # a primary at 15 does not step back to 14
        assert replicator.primaries["r"].epoch == 15
    finally:
        replicator.close()
        store.close()


def test_the_epoch_of_the_last_batch_held_survives_a_restart(replicator: Replicator, tmp_path: Path) -> None:
    store = RangeStore.open(tmp_path / "b")
    try:
        replicator.attach("r", _record(14, "a"), store)
        f = replicator.following["r"]
        assert f.apply(14, [(1, _batch(1)), (2, _batch(2))]) == 2
        replicator.detach("r")  # as after a restart: nothing adopted in memory, the store remembers
        assert store.position() == (14, 2)
        with pytest.raises(TableError):
            replicator.attach("r", _record(13, "b"), store)
        assert replicator.attach("r", _record(14, "b"), store) == "serving"
    finally:
        replicator.close()
        store.close()


def test_a_promotion_goes_past_every_epoch_a_sealed_replica_adopted() -> None:
    assert next_epoch(13, []) == 14
    assert next_epoch(13, [13, 12]) == 14
    assert next_epoch(13, [14, 13]) == 15  # the map lost epoch 14: 14 is taken by a live primary
    assert next_epoch(13, iter([16])) == 17


def test_a_replica_reported_past_the_map_is_ahead() -> None:
    rec = {"id": "r", "epoch": 13}
    assert replica_ahead(rec, (14, "following"))
    assert replica_ahead(rec, (14, "serving"))
    assert not replica_ahead(rec, (13, "following"))
    assert not replica_ahead(rec, (12, "serving"))  # behind: reload it (the usual case)
    assert not replica_ahead(rec, None)


def _rangeset(tmp_path: Path, rep: Replicator) -> RangeSet:
    rs = RangeSet(str(tmp_path / "ps"))
    rs.repl = rep
    return rs


def _primary_record(**extra: object) -> dict:
    return {**_record(7, "b"), "table": "t", "low": "", "high": None, "path": "ranges/r", **extra}


def test_a_primary_is_never_opened_on_an_empty_directory(replicator: Replicator, tmp_path: Path) -> None:
    """The chaos drill's seed 205: a primary killed with its disk, restarted empty, was sent its unchanged
    configuration and served an empty store (1722 acknowledged writes lost)."""
    rs = _rangeset(tmp_path, replicator)
    try:
        with pytest.raises(TableError) as exc:
            rs.load(_primary_record())
        assert exc.value.error_code == "NotPrimary" and "a primary is never opened empty" in str(exc.value)
        assert "r" not in rs.open and "r" not in replicator.primaries
        assert not os.path.exists(tmp_path / "ps" / "ranges" / "r")  # no empty store left behind
        rs.load(_primary_record(create=True))  # a new table's range: every replica starts empty
        assert rs.open["r"].state == "serving" and replicator.primaries["r"].epoch == 7
        rs.load(_primary_record())  # its directory exists from now on: later configurations are fine
    finally:
        for s in rs.open.values():
            s.store.close()
        replicator.close()


def test_a_follower_without_its_directory_is_rebuilt_even_in_sync(replicator: Replicator, tmp_path: Path) -> None:
    rs = _rangeset(tmp_path, replicator)
    try:
        rs.load({**_primary_record(), "primary": "a"})  # in sync ("b" in insync), but its disk is gone
        assert "r" not in rs.open and "r" in replicator.pulls  # pulled from the primary, answers no seal
        with pytest.raises(TableError):
            rs.seal("r", 8, "ranges/r")
        replicator.detach("r")
        rs.load({**_primary_record(create=True), "primary": "a"})  # a new range: starts empty
        assert rs.open["r"].state == "following"
    finally:
        for s in rs.open.values():
            s.store.close()
        replicator.close()


def test_a_peer_without_an_endpoint_is_skipped_not_fatal(replicator: Replicator) -> None:
    """Chaos seed 302: after a coordinator takeover a configuration named a follower whose endpoint the new
    leader did not know yet (""); connecting to it raised ZMQError out of the loop and both partition
    servers exited. Nothing is sent to it until a configuration names it."""
    replicator._send("", {"op": "repl"})
    replicator._send("not an endpoint", {"op": "repl"})
    replicator.flush()
    assert replicator.refused == 1 and not replicator._peers
