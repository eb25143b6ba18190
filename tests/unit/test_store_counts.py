"""The exact entity counts of a range store (partition_server/store/counts.py): the pure parts, and every
path that changes entities checked against a pass over the store."""

from __future__ import annotations

import random

import pytest
import rocksdict

from partition_server.split_job import SplitJob
from partition_server.store.counts import Counts, count_span, delta, left_share, pack_counts, unpack_counts
from partition_server.store.keys import META_COUNT
from partition_server.store.range_store import RangeStore
from partition_server.store.tee import Ops
from rangetable.keys import META_PREFIX, encode_key
from rangetable.table_settings import ttl_ticks
from tests.unit.range_store_helpers import P, ins, store_fixture  # noqa: F401  (the store fixture)


def truth(store: RangeStore) -> Counts:
    return count_span(store._db)


# --- pure -----------------------------------------------------------------------------------------


def test_counts_pack_plus_and_delta() -> None:
    c = Counts(3, 300)
    assert unpack_counts(pack_counts(c)) == c and unpack_counts(None) is None
    assert c.plus(-1, -100) == Counts(2, 200) and c.plus(-9, -900) == Counts(0, 0)
    held = {b"a\x001": b"xx", b"a\x002": None}
    writes = [(b"a\x001", b"yyyy"), (b"a\x002", b"z"), (b"a\x003", None), (META_PREFIX + b"ts", b"m")]
    # a\x001 replaced (+2 bytes), a\x002 created (+1 entity, 3 + 1 bytes), a\x003 absent and deleted (nothing)
    assert delta(writes, lambda k: held.get(k)) == (1, 2 + 4)
    assert delta([(b"a\x001", None)], held.get) == (-1, -5)


def test_left_share() -> None:
    files = [{"start_key": b"a", "end_key": b"c", "size": 100}, {"start_key": b"d", "end_key": b"f", "size": 100},
             {"start_key": b"g", "end_key": b"k", "size": 200}, {"start_key": META_PREFIX, "end_key": META_PREFIX, "size": 999}]
    assert left_share(files, b"d") == 0.25
    assert left_share(files, b"h") == (200 + 100) / 400  # the file holding the key counts half
    assert left_share([], b"x") == 0.5


# --- the write paths --------------------------------------------------------------------------------


def test_every_kind_of_write_keeps_the_counts_exact(store) -> None:
    rnd = random.Random(7)
    kinds = ["insert", "insert_or_replace", "insert_or_merge", "replace", "merge", "delete"]
    for step in range(600):
        pk = f"p{rnd.randrange(4)}"
        if rnd.random() < 0.3:  # a batch of upserts, some into partitions never written (the probe's path)
            pk = f"b{rnd.randrange(40)}"
            kind = rnd.choice(["insert_or_replace", "insert_or_merge"])
            ops = [{"op": kind, "pk": pk, "rk": str(r), "props": P(v="x" * rnd.randrange(50))}
                   for r in rnd.sample(range(12), 5)]
            store.batch(ops, request_id=f"b{step}" if rnd.random() < 0.5 else None,
                        answer=rnd.choice(["entities", "wire", "timestamp"]))
        else:
            op = {"op": rnd.choice(kinds), "pk": pk, "rk": str(rnd.randrange(6)), "props": P(v="y" * rnd.randrange(80))}
            try:
                store.write(op, request_id=f"w{step}" if rnd.random() < 0.5 else None, wire=rnd.random() < 0.5)
            except Exception:
                pass  # EntityAlreadyExists, ResourceNotFound: nothing written
        if step % 50 == 0:
            assert store.counts() == truth(store), step
    assert store.counts() == truth(store) and store.counts().entities > 0
    assert store.stats()["entities"] == store.counts().entities


def test_a_repeated_request_id_counts_once(store) -> None:
    store.write(ins("p", "1", a="x"), request_id="R")
    store.write(ins("p", "1", a="x"), request_id="R")
    store.batch([ins("q", str(i)) for i in range(3)], request_id="B")
    store.batch([ins("q", str(i)) for i in range(3)], request_id="B")
    assert store.counts().entities == 4 == truth(store).entities


def test_counts_survive_a_reopen_and_an_old_store_is_counted_once(tmp_path) -> None:
    s = RangeStore.open(tmp_path / "r")
    s.batch([ins("p", str(i), a="v") for i in range(30)])
    c = s.counts()
    s._db.delete(META_COUNT)  # as a store written before META_COUNT existed
    s.close()
    s = RangeStore.open(tmp_path / "r")
    assert s.counts() == c == truth(s) and s._db.get(META_COUNT) == pack_counts(c)
    s.close()


def test_ttl_reclaim_keeps_the_counts_exact(tmp_path) -> None:
    t = [640_000_000_000_000_000]
    s = RangeStore.open(tmp_path / "r", clock=lambda: t[0])
    s.set_ttl(ttl_ticks(10))
    s.batch([ins("old", str(i)) for i in range(20)])
    t[0] += 5 * 10_000_000
    s.batch([ins("new", str(i)) for i in range(7)])
    t[0] += 6 * 10_000_000  # "old" expired: counted until reclaimed
    assert s.counts().entities == 27
    while s.expire_step()[0]:
        pass
    assert s.counts() == truth(s) and s.counts().entities == 7
    s.close()


def test_a_follower_holds_its_primarys_counts(tmp_path) -> None:
    class Ship:
        def __init__(self) -> None:
            self.batches: list[Ops] = []

        def stamp(self, wb: rocksdict.WriteBatch) -> None:
            pass

        def shipped(self, ops: Ops) -> None:
            self.batches.append(ops)

    primary, follower = RangeStore.open(tmp_path / "p"), RangeStore.open(tmp_path / "f")
    ship = Ship()
    primary.replicate(ship)
    primary.batch([ins("a", str(i), v="x" * i) for i in range(10)])
    primary.write({"op": "delete", "pk": "a", "rk": "3"})
    primary.write({"op": "insert_or_replace", "pk": "a", "rk": "4", "props": P(v="longer value")})
    for seq, ops in enumerate(ship.batches, 1):
        follower.apply_batch(ops, 1, seq)
    assert follower.counts() == primary.counts() == truth(follower) and follower.counts().entities == 9
    follower.reload_meta()  # promoted: its own writes go on from the shipped counts
    follower.write(ins("b", "1"))
    assert follower.counts() == truth(follower)
    primary.close()
    follower.close()


# --- splits and merges ------------------------------------------------------------------------------


def _fill(store: RangeStore, pks: str, n: int) -> None:
    for p in pks:
        store.batch([ins(p, str(i), v="x" * (i % 7)) for i in range(n)])


@pytest.mark.parametrize("compact", [True, False])
def test_split_halves_and_merge_are_exact(tmp_path, store, compact) -> None:
    _fill(store, "abcdef", 20)
    store.write({"op": "delete", "pk": "a", "rk": "0"})  # a tombstone, as RocksDB's estimate counts them
    store.split("c", tmp_path / "L", tmp_path / "R", compact=compact)
    L, R = RangeStore.open(tmp_path / "L"), RangeStore.open(tmp_path / "R")
    assert (L.counts().entities, R.counts().entities) == (39, 80)  # the bug: both halves reported the parent
    assert L.counts() == truth(L) and R.counts() == truth(R)
    assert L.counts().plus(*R.counts()) == store.counts()
    L.write(ins("b", "new"))
    R.write({"op": "delete", "pk": "f", "rk": "1"})
    L.close()
    R.close()
    RangeStore.merge(tmp_path / "L", tmp_path / "R", tmp_path / "M")
    M = RangeStore.open(tmp_path / "M")
    assert M.counts() == truth(M) and M.counts().entities == 119
    M.close()


def test_split_with_given_counts_takes_them(tmp_path, store) -> None:
    _fill(store, "abcd", 10)
    given = (Counts(1, 2), Counts(3, 4))
    store.split("c", tmp_path / "L", tmp_path / "R", compact=False, counts=given)
    L, R = RangeStore.open(tmp_path / "L"), RangeStore.open(tmp_path / "R")
    assert (L.counts(), R.counts()) == given  # a follower trusts its primary's count at the split's batch
    L.close()
    R.close()


@pytest.mark.parametrize("skew", ["left", "right"])
def test_a_split_prepared_while_writes_go_on_is_exact(tmp_path, store, skew) -> None:
    pks = "abcdefgh"
    _fill(store, pks, 30)
    store.flush()
    key = "b" if skew == "left" else "g"  # the smaller side is scanned: either side
    job = SplitJob(store, key, str(tmp_path / "L"), str(tmp_path / "R"))
    rnd = random.Random(3)
    job.start()
    while not job.done.is_set():  # writes, deletes and batches land before, during and after the checkpoint
        p = rnd.choice(pks)
        if rnd.random() < 0.3:
            try:
                store.write({"op": "delete", "pk": p, "rk": str(rnd.randrange(40))})
            except Exception:
                pass
        else:
            store.batch([{"op": "insert_or_replace", "pk": p, "rk": str(rnd.randrange(40)), "props": P(v="z" * rnd.randrange(9))}])
    for i in range(5):  # after the preparation, before the switch-over: replayed by finish
        store.write(ins("h", f"late{i}"))
    L, R = job.finish()
    spk = encode_key(key, "")[:-1]
    assert L.counts() == truth(L) and R.counts() == truth(R)
    assert L.counts() == count_span(store._db, b"", spk) and R.counts() == count_span(store._db, spk)
    L.close()
    R.close()
