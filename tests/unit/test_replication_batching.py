"""Batching of replication (issue #20, costs): a follower writes the batches it received in one turn as one
RocksDB WriteBatch that must equal the plain path (one WriteBatch per batch), and two replicators in this
process (real ZeroMQ over 127.0.0.1, no process started) exchange one message per peer per loop turn."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from partition_server.replication.protocol import Following
from partition_server.replication.replicator import Replicator
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import ReplicaLog
from rangetable import protocol
from rangetable.curve import KeyRing
from tests.unit.range_store_helpers import P
from tests.unit.replication_net import Net


def dump(store: RangeStore) -> dict[bytes, bytes]:
    """Every key of the store (entities, meta, request records, position)."""
    return dict(store._db.items())


def test_one_writebatch_for_many_batches_equals_the_plain_path(net: Net) -> None:
    net.hello("b", "c")
    net.write(4)
    net.stores["a"].batch([{"op": "insert", "pk": "q", "rk": str(i), "props": P(i=i)} for i in range(3)])
    net.stores["a"].write({"op": "delete", "pk": "p1", "rk": "00001", "etag": "*"})
    net.write(2)
    batches = net.p.outbox.log.since(0)
    assert len(batches) == 8
    for seq_batch in batches:  # b: the plain path, one batch at a time
        assert net.f["b"].apply(1, [seq_batch]) == seq_batch[0]
    assert net.f["c"].apply(1, batches) == 8  # c: the fast path, all in one WriteBatch
    assert dump(net.stores["b"]) == dump(net.stores["c"]) == dump(net.stores["a"])
    assert net.stores["c"].position() == (1, 8)
    assert [s for s, _ in net.f["c"].log.since(0)] == list(range(1, 9))


def test_a_turns_batches_in_any_order_and_twice_are_applied_in_order_once(net: Net) -> None:
    net.hello("b")
    net.write(10)
    batches = net.p.outbox.log.since(0)
    shuffled = batches[:4] + batches[2:] + batches[6:]
    random.Random(3).shuffle(shuffled)
    f = net.f["b"]
    assert f.apply(1, [b for b in shuffled if b[0] != 7]) == 6  # a gap at 7: nothing past it
    assert net.stores["b"].position() == (1, 6)
    assert f.apply(1, shuffled) == 10
    assert dump(net.stores["b"]) == dump(net.stores["a"])


def test_a_bad_batch_in_a_turn_keeps_the_ones_before_it(net: Net) -> None:
    net.hello("b")
    net.write(4)
    batches = net.p.outbox.log.since(0)
    f = net.f["b"]
    assert f.apply(1, [batches[0], batches[1], (3, b"\xc1"), batches[3]]) == 2
    assert net.stores["b"].position() == (1, 2)
    assert f.apply(1, batches) == 4
    assert dump(net.stores["b"]) == dump(net.stores["a"])


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Replicator, Replicator, dict[str, RangeStore]]]:
    """Replicator ``a`` (primary of ranges r1 and r2) and ``b`` (their follower), bound on 127.0.0.1."""
    keys = KeyRing.create(str(tmp_path / "keys"))
    reps: list[Replicator] = []
    stores: dict[str, RangeStore] = {}
    try:
        for me in ("a", "b"):
            rep = Replicator(zmq.Context.instance(), keys, data_dir=str(tmp_path / me))
            rep.me = me
            rep.bind("tcp://127.0.0.1:*")
            reps.append(rep)
        a, b = reps
        peers = {"a": a.endpoint, "b": b.endpoint}
        for rid in ("r1", "r2"):
            rec = {"id": rid, "epoch": 1, "primary": "a", "peers": peers, "insync": ["a", "b"], "token": "t" + rid,
                   "min_insync": 2}
            for me, rep in (("a", a), ("b", b)):
                stores[me + rid] = RangeStore.open(tmp_path / me / rid)
                rep.attach(rid, rec, stores[me + rid])
        yield a, b, stores
    finally:
        for rep in reps:
            rep.close()
        for st in stores.values():
            st.close()


def _recv(rep: Replicator) -> list[bytes]:
    assert rep.sock is not None and rep.sock.poll(5000), "no message"
    return protocol.recv_frames(rep.sock)


def test_one_message_per_peer_per_turn(pair: tuple[Replicator, Replicator, dict[str, RangeStore]]) -> None:
    a, b, stores = pair
    b.pump()  # b's hellos: where it stands in r1 and r2, in one message
    hello = _recv(a)
    assert len(hello) == 3  # routing id + one ack body per range
    a.on_frames(hello)
    for rid, n in (("r1", 2), ("r2", 3)):
        for i in range(n):
            stores["a" + rid].write({"op": "insert", "pk": "p", "rk": f"{i}", "props": P(i=i)})
        assert a.hold(rid, [rid.encode()])
    assert a.pump() == []
    repl = _recv(b)
    assert len(repl) == 3  # both ranges' batches (2 and 3 of them) in one message
    bodies = [protocol.unpack(f) for f in repl[1:]]
    assert sorted((m["range"], [s for s, _ in m["batches"]]) for m in bodies) == [("r1", [1, 2]), ("r2", [1, 2, 3])]
    b.on_frames(repl)
    assert b.following["r1"].applied == 2 and b.following["r2"].applied == 3
    acks = _recv(a)
    assert len(acks) == 3 and sorted((m["range"], m["seq"]) for m in map(protocol.unpack, acks[1:])) == [
        ("r1", 2), ("r2", 3)]
    a.on_frames(acks)
    assert sorted(a.pump()) == [[b"r1"], [b"r2"]]
    for rid in ("r1", "r2"):
        assert dump(stores["b" + rid]) == dump(stores["a" + rid])


def test_a_bad_body_never_drops_its_neighbours(pair: tuple[Replicator, Replicator, dict[str, RangeStore]]) -> None:
    a, b, stores = pair
    b.pump()
    a.on_frames(_recv(a))
    stores["ar1"].write({"op": "insert", "pk": "p", "rk": "x", "props": P(i=1)})
    a.pump()
    frames = _recv(b)
    forged = protocol.pack({"op": "repl", "range": "r1", "epoch": 1, "from": "a", "token": "wrong",
                            "batches": frames and protocol.unpack(frames[1])["batches"]})
    refused = b.refused
    b.on_frames([frames[0], b"\xc1", forged, frames[1], b"\x93\x01"])
    assert b.refused == refused + 3
    assert b.following["r1"].applied == 1


def test_following_fast_path_without_a_replicator(tmp_path: Path) -> None:
    """Following alone: a store that holds batches 1..n applies n+1.. from one call, position last."""
    net = Net(tmp_path)
    try:
        net.hello("b")
        net.write(3)
        f: Following = net.f["b"]
        assert f.apply(1, net.p.outbox.log.since(0)[:1]) == 1
        assert f.apply(1, net.p.outbox.log.since(0)) == 3
        assert isinstance(f.log, ReplicaLog) and f.log.last_seq == 3
        assert net.stores["b"].position() == (1, 3)
    finally:
        net.close()
