"""partition_server/replication/protocol.py without sockets: a Primary on a real RocksDB store and two Followings on
their own stores, with the messages moved by hand (lost, duplicated, reordered) and an explicit clock."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import pytest

from partition_server.replication.protocol import RESEND_S, Following, Primary
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import ReplicaLog, encode_ops
from tests.unit.range_store_helpers import P
from tests.unit.replication_net import PEERS, Net


def dump(store: RangeStore) -> dict[bytes, bytes]:
    """Every key of the store (entities, meta, request records, position)."""
    return dict(store._db.items())


def entities(store: RangeStore) -> list:
    return store.scan(b"", None, limit=1_000_000)[0]


def test_batches_reach_followers_identically(net: Net) -> None:
    net.hello("b", "c")
    net.write(5)
    net.stores["a"].batch([{"op": "insert", "pk": "q", "rk": str(i), "props": P(i=i)} for i in range(3)])
    assert net.p.outbox.seq == 6 and net.p.committed == 0
    net.pump()
    assert net.p.committed == 6
    for s in ("b", "c"):
        assert net.stores[s].position() == (1, 6)
        assert entities(net.stores[s]) == entities(net.stores["a"])
        assert dump(net.stores[s]) == dump(net.stores["a"])


def test_commit_point_is_the_minimum_over_insync_and_joining(tmp_path: Path) -> None:
    net = Net(tmp_path, insync=["a", "b"])
    try:
        net.hello("b", "c")
        net.write(3)
        net.pump(only={"c"})
        assert net.p.committed == 0  # b (in sync) lacks them; c does not count
        net.pump(only={"b"})  # nothing new for b: its messages were sent already and dropped
        assert net.p.committed == 0
        net.deliver(net.sends(RESEND_S + 0.01), only={"b"})
        assert net.p.committed == 3
        assert net.p.caught_up() == ["c"]  # c holds everything: it joins and counts from now on
        net.write(2)
        net.pump(only={"b"})
        assert net.p.committed == 3
        net.deliver(net.sends(RESEND_S + 0.01), only={"c"})
        assert net.p.committed == 5
        net.p.configure(PEERS, ["a", "b"], ["c"])  # the coordinator dropped it meanwhile
        assert net.p.acking() == {"b"}
    finally:
        net.close()


def test_held_replies_go_once_committed_and_in_order(net: Net) -> None:
    net.hello("b", "c")
    assert not net.p.pending()
    net.write()
    net.p.hold([b"1"])
    net.write()
    net.p.hold([b"2"])
    net.p.hold([b"2b"])
    msgs = net.sends()
    assert net.p.releasable() == []
    first = [(s, b[:1]) for s, b in msgs]
    net.deliver(first, only={"b"})
    assert net.p.releasable() == []
    net.deliver(first, only={"c"})
    assert net.p.releasable() == [[b"1"]]
    net.deliver(msgs)
    assert net.p.releasable() == [[b"2"], [b"2b"]]
    assert net.p.releasable() == [] and not net.p.pending()


def test_reordered_duplicated_and_lost_batches_never_corrupt_a_follower(net: Net) -> None:
    net.hello("b", "c")
    net.write(12)
    batches = [b for _, bs in net.sends() if _ == "b" for b in bs]
    singles = [[b] for b in batches] * 2
    random.Random(7).shuffle(singles)
    f = net.f["b"]
    for m in singles:
        if m[0][0] == 9:
            continue  # lost
        before = f.applied
        acked = f.apply(1, m)
        assert acked == f.applied >= before
        assert f.applied < 9 or f.applied == 12
        net.p.on_ack("b", acked, net.t)
    assert 1 <= f.applied <= 8  # never past the gap (batches ahead of a gap are dropped, not kept)
    assert net.stores["b"].position() == (1, f.applied)
    assert len(entities(net.stores["b"])) == f.applied
    assert net.sends(0.01) == []  # nothing again before RESEND_S …
    net.deliver(net.sends(RESEND_S + 0.01))  # … then from what it acknowledged
    assert f.applied == 12 and net.p.committed == 12
    assert dump(net.stores["b"]) == dump(net.stores["a"])


def test_undecodable_batches_are_a_gap_never_half_applied(net: Net) -> None:
    net.hello("b")
    net.write(3)
    (_, good), = [m for m in net.sends() if m[0] == "b"]
    f = net.f["b"]
    assert f.apply(1, [good[0], (2, b"\xc1garbage"), good[2]]) == 1
    assert f.apply(1, [(2, encode_ops([(b"k", b"v")])[:-1])]) == 1
    assert f.apply(1, [(2, b"\x93\x01\x02\x03")]) == 1  # a list, not of [key, value]
    assert net.stores["b"].position() == (1, 1)
    assert f.apply(1, good) == 3
    assert entities(net.stores["b"]) == entities(net.stores["a"])


def test_a_restarted_follower_with_a_shorter_log_gets_the_rest(net: Net) -> None:
    net.hello("b", "c")
    net.write(6)
    net.pump()
    net.stores["b"].close()
    shutil.rmtree(net.tmp / "b")  # its disk is gone: it comes back empty
    net.stores["b"] = net._open("b")
    net.f["b"] = Following("r", 1, net.stores["b"], ReplicaLog(0), "a", "ea", "tok")
    net.hello("b")
    net.pump()
    assert net.f["b"].applied == 6
    assert dump(net.stores["b"]) == dump(net.stores["a"])


def test_a_follower_ahead_of_the_primary_has_diverged(net: Net) -> None:
    net.hello("b", "c")
    net.write(2)
    net.p.on_ack("c", 9, net.t)
    assert net.p.followers["c"].diverged
    assert [s for s, _ in net.sends()] == ["b"]
    rep = net.p.report(net.t, 1.0)
    assert rep["rebuild"] == ["c"] and "c" in rep["lagging"]
    assert net.p.caught_up() == []
    net.p.on_ack("c", 0, net.t)  # rebuilt empty: it is sent everything
    net.pump()
    assert net.f["c"].applied == 2 and not net.p.followers["c"].diverged


def test_a_follower_beyond_the_ring_is_reported_for_rebuild(tmp_path: Path) -> None:
    net = Net(tmp_path, max_batches=3)
    try:
        net.hello("b", "c")
        for _ in range(10):
            net.write()
            net.pump(only={"b"})  # b keeps up; c lost every message
        assert net.f["b"].applied == 10 and not net.p.followers["b"].behind_log
        net.sends(RESEND_S + 0.01)
        assert net.p.followers["c"].behind_log
        rep = net.p.report(net.t, 1.0)
        assert rep["rebuild"] == ["c"] and rep["lagging"] == ["c"]
    finally:
        net.close()


def test_lagging_after_lag_s(net: Net) -> None:
    net.hello("b", "c")
    t0 = time.monotonic()
    net.write()
    net.pump(only={"b"})
    assert net.p.lagging(t0 + 0.5, 1.0) == []
    assert net.p.lagging(t0 + 1.5, 1.0) == ["c"]
    net.deliver(net.sends(RESEND_S + 0.01), only={"c"})
    assert net.p.lagging(t0 + 1.5, 1.0) == []


def test_a_following_refuses_other_epochs_and_sealed_ones(net: Net) -> None:
    net.hello("b")
    net.write()
    (_, batches), = [m for m in net.sends() if m[0] == "b"]
    f = net.f["b"]
    assert f.apply(2, batches) == -1
    assert f.apply(0, batches) == -1
    f.sealed = 2  # the coordinator sealed it for the next epoch
    assert f.apply(1, batches) == -1
    assert f.applied == 0 and net.stores["b"].position() == (0, 0)


def test_after_promotion_the_other_follower_catches_up_from_the_new_primary(net: Net) -> None:
    net.hello("b", "c")
    net.write(10)
    msgs = net.sends()
    net.deliver(msgs, only={"b"})
    net.deliver([(s, b[:6]) for s, b in msgs], only={"c"})
    last_ts = net.stores["a"].last_ts
    net.p.close()
    # b is promoted at epoch 2 (it got furthest); c follows it
    fb = net.f.pop("b")
    net.p = Primary("r", 2, net.stores["b"], fb.log, PEERS, ["b", "c"], "b", 1, "tok2")
    fc = net.f["c"]
    fc.epoch, fc.sealed, fc.primary, fc.primary_endpoint, fc.token = 2, 2, "b", "eb", "tok2"
    net.p.on_ack("c", fc.applied, net.t)
    net.f["b"] = fc  # deliver() looks followers up by name: route b's sends to c only
    net.deliver([(s, b) for s, b in net.sends() if s == "c"])
    assert fc.applied == 10 and net.p.committed == 10
    net.stores["b"].write({"op": "insert", "pk": "z", "rk": "z", "props": P(n=0)})
    assert net.stores["b"].last_ts > last_ts, "a promoted follower reused a Timestamp"
    net.deliver([(s, b) for s, b in net.sends() if s == "c"])
    assert net.p.committed == 11
    assert dump(net.stores["c"]) == dump(net.stores["b"])
    assert entities(net.stores["c"])[:-1] == entities(net.stores["a"])


@pytest.mark.parametrize("seed", range(40))
def test_randomized_loss_duplication_reordering_converge(tmp_path: Path, seed: int) -> None:
    """Writes, batches, acks and hellos over a network that loses, duplicates and reorders — and delivers several
    messages to a follower at once (one drain: their batches in one apply, one WriteBatch, one ack); the commit
    point never passes what an in-sync follower holds, and once quiet every replica equals the primary."""
    rng = random.Random(seed)
    net = Net(tmp_path)
    try:
        net.hello("b", "c")
        wire: list[tuple[str, object]] = []  # ("b"|"c", batches) to a follower, ("ack", (who, seq)) to a primary
        released: list[int] = []
        for step in range(300):
            r = rng.random()
            if r < 0.25:
                net.write(rng.randint(1, 3))
                net.p.hold([str(net.p.outbox.seq).encode()])
            elif r < 0.45:
                wire += net.sends(rng.choice([0.0, 0.05, RESEND_S + 0.01]))
            elif r < 0.55 and wire:
                wire.pop(rng.randrange(len(wire)))  # lost
            elif r < 0.65 and wire:  # one drain read several repl bodies for a follower: one apply, one ack
                dest = rng.choice(["b", "c"])
                mine = [i for i, (d, _) in enumerate(wire) if d == dest]
                take = set(rng.sample(mine, rng.randint(0, len(mine))))
                batches = [b for i in sorted(take, key=lambda _: rng.random()) for b in wire[i][1]]  # type: ignore[union-attr]
                if rng.random() < 0.3:
                    rng.shuffle(batches)
                wire = [m for i, m in enumerate(wire) if i not in take or rng.random() < 0.2]
                if batches:
                    wire.append(("ack", (dest, net.f[dest].apply(1, batches))))
            elif wire:
                i = rng.randrange(len(wire))
                dest, body = wire[i] if rng.random() < 0.2 else wire.pop(i)  # duplicated or delivered
                if dest == "ack":
                    who, seq = body  # type: ignore[misc]
                    net.p.on_ack(who, seq, net.t)
                else:
                    acked = net.f[dest].apply(1, body)  # type: ignore[arg-type]
                    wire.append(("ack", (dest, acked)))
            if rng.random() < 0.05:  # a hello
                s = rng.choice(["b", "c"])
                wire.append(("ack", (s, net.f[s].applied)))
            for fr in net.p.releasable():
                released.append(int(fr[0]))
            assert net.p.committed <= min(net.f["b"].applied, net.f["c"].applied), step
            assert released == sorted(released)
            assert not released or released[-1] <= min(net.f["b"].applied, net.f["c"].applied)
        for _ in range(50):  # quiet network: deliver everything until converged
            net.deliver(net.sends(RESEND_S + 0.01))
        assert net.p.committed == net.p.outbox.seq
        released += [int(fr[0]) for fr in net.p.releasable()]
        assert not net.p.held and released == sorted(released)
        for s in ("b", "c"):
            assert dump(net.stores[s]) == dump(net.stores["a"]), s
    finally:
        net.close()


def test_a_follower_silent_since_the_primary_started_is_reported_lagging(tmp_path) -> None:
    from partition_server.replication.protocol import Primary
    from partition_server.store.range_store import RangeStore
    from partition_server.store.replica_log import ReplicaLog

    store = RangeStore.open(tmp_path / "p")
    try:
        p = Primary("r1", 1, store, ReplicaLog(0), {"b": "tcp://b", "c": "tcp://c"}, ["a", "b", "c"], "a", 2)
        t0 = p.followers["b"].progress_at
        p.on_ack("c", 0, t0 + 0.1)  # c says hello; b never does
        assert p.lagging(t0 + 0.5, 1.0) == []
        assert p.lagging(t0 + 1.5, 1.0) == ["b"]  # no write ever aged, yet b holds up every answer
    finally:
        store.close()


def test_an_insync_follower_that_lost_acknowledged_batches_is_reported(tmp_path) -> None:
    """A follower back from a restart with less than it had acknowledged (its disk was wiped) may not stay
    in the in-sync set, even on a range that takes no writes: every in-sync member holds every committed batch."""
    from partition_server.replication.protocol import Primary
    from partition_server.store.range_store import RangeStore
    from partition_server.store.replica_log import ReplicaLog

    store = RangeStore.open(tmp_path / "p")
    try:
        p = Primary("r1", 1, store, ReplicaLog(0), {"b": "tcp://b"}, ["a", "b"], "a", 2)
        store.write({"op": "insert_or_replace", "pk": "p", "rk": "r", "props": {}})
        t0 = p.followers["b"].progress_at
        p.on_ack("b", 1, t0)
        assert p.committed == 1 and p.lagging(t0 + 5, 1.0) == []
        p.on_ack("b", 0, t0 + 5.1)  # restarted empty: it holds nothing now
        assert p.lagging(t0 + 5.2, 1.0) == ["b"]
        p.configure({"b": "tcp://b"}, ["a"], ["b"])  # the coordinator dropped it
        p.on_ack("b", 1, t0 + 5.3)  # caught up from the log
        assert p.lagging(t0 + 5.4, 1.0) == [] and "b" in p.caught_up()
    finally:
        store.close()


def test_a_configuration_without_a_followers_endpoint_keeps_its_progress(net: Net) -> None:
    """After a takeover the coordinator sends "" for a server it has not heard from yet: the primary keeps the
    follower's progress and endpoint (a reset made its commits wait and the follower was dropped as lagging)."""
    net.hello("b", "c")
    net.write(3)
    net.pump()
    acked = net.p.followers["b"].acked
    assert acked == net.p.outbox.seq == 3 and net.p.committed == acked
    net.p.configure({**PEERS, "b": ""}, ["a", "b", "c"], [])
    assert net.p.followers["b"].acked == acked and net.p.followers["b"].endpoint == "eb"
    assert net.p.lagging(time.monotonic() + 0.5, 1.0) == []
    net.p.configure(PEERS, ["a", "b", "c"], [])  # learned again: nothing starts over
    assert net.p.followers["b"].acked == acked
    net.write()
    net.pump()
    assert net.p.committed == net.p.outbox.seq
    net.p.configure({**PEERS, "b": "eb2"}, ["a", "b", "c"], [])  # it restarted elsewhere: start over with it
    assert net.p.followers["b"].acked == -1 and net.p.followers["b"].endpoint == "eb2"


def test_a_followers_primary_endpoint_survives_a_configuration_that_does_not_know_it(tmp_path: Path) -> None:
    """The follower side of the same takeover: a configuration naming the same primary without its endpoint
    keeps the endpoint the follower acknowledges to; a new primary without one leaves it unknown."""
    import zmq

    from partition_server.replication.replicator import Replicator
    from rangetable import curve

    keys = curve.KeyRing.create(str(tmp_path / "keys"))
    rep = Replicator(zmq.Context.instance(), keys, data_dir=str(tmp_path))
    rep.me = "b"
    store = RangeStore.open(tmp_path / "b")
    try:
        record = {"id": "r", "epoch": 1, "primary": "a", "replicas": ["a", "b", "c"], "insync": ["a", "b", "c"],
                  "peers": PEERS, "token": "tok"}
        assert rep.attach("r", record, store) == "following"
        assert rep.following["r"].primary_endpoint == "ea"
        rep.attach("r", {**record, "peers": {**PEERS, "a": ""}}, store)
        assert rep.following["r"].primary_endpoint == "ea"
        rep.attach("r", {**record, "epoch": 2, "primary": "c", "peers": {**PEERS, "c": ""}}, store)
        assert rep.following["r"].primary_endpoint == ""
        rep.attach("r", {**record, "epoch": 2, "primary": "c"}, store)
        assert rep.following["r"].primary_endpoint == "ec"
    finally:
        rep.close()
        store.close()
