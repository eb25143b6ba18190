"""Re-replication's pure parts: the coordinator's repair policy, the pinned replica log, and a checkpoint
pulled chunk by chunk (Source and Pull with a real RocksDB store, no sockets)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.replicas.sets import repair
from partition_server.replication.snapshot import CHUNK, Pull, Source
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import PIN_FACTOR, ReplicaLog
from tests.unit.range_store_helpers import P

REC = {"primary": "a", "replicas": ["a", "b", "c"], "insync": ["a", "b", "c"]}
LIVE = {"a": 1, "b": 1, "c": 1, "d": 0, "e": 3}


def test_a_full_healthy_set_needs_nothing() -> None:
    assert repair(REC, 3, {}, 10, LIVE) is None


def test_a_follower_dead_within_the_grace_keeps_its_place() -> None:
    live = {k: v for k, v in LIVE.items() if k != "c"}
    assert repair(REC, 3, {"c": 5.0}, 10, live) is None


def test_a_follower_dead_past_the_grace_is_replaced_by_the_emptiest_live_server() -> None:
    live = {k: v for k, v in LIVE.items() if k != "c"}
    out = repair(REC, 3, {"c": 11.0}, 10, live)
    assert out == {"replicas": ["a", "b", "d"], "insync": ["a", "b"], "added": ["d"]}


def test_a_short_set_is_filled_at_once() -> None:
    rec = {"primary": "a", "replicas": ["a", "b"], "insync": ["a", "b"]}
    assert repair(rec, 3, {}, 10, LIVE) == {"replicas": ["a", "b", "d"], "insync": ["a", "b"], "added": ["d"]}


def test_a_waiting_follower_and_a_short_set() -> None:
    rec = {"primary": "a", "replicas": ["a", "b"], "insync": ["a"]}
    live = {"a": 1, "d": 0}
    assert repair(rec, 3, {"b": 1.0}, 10, live) == {"replicas": ["a", "b", "d"], "insync": ["a"], "added": ["d"]}


def test_no_spare_server_drops_the_lost_one_only() -> None:
    live = {"a": 1, "b": 1}
    assert repair(REC, 3, {"c": 30.0}, 10, live) == {"replicas": ["a", "b"], "insync": ["a", "b"], "added": []}


def test_nothing_to_do_without_spares_and_nothing_lost() -> None:
    rec = {"primary": "a", "replicas": ["a", "b"], "insync": ["a", "b"]}
    assert repair(rec, 3, {}, 10, {"a": 1, "b": 1}) is None


def test_a_headless_range_is_left_to_the_failover() -> None:
    assert repair(REC, 3, {"a": 60.0}, 10, {"b": 1, "c": 1, "d": 0}) is None


def test_zones_are_preferred() -> None:
    live = {"a": 1, "b": 1, "d": 0, "e": 0}
    out = repair(REC, 3, {"c": 99.0}, 10, live, zones={"a": "z1", "b": "z2", "d": "z1", "e": "z3"})
    assert out is not None and out["added"] == ["e"]


def test_a_pinned_log_keeps_the_batches_after_the_pin() -> None:
    log = ReplicaLog(max_batches=3)
    for s in range(1, 4):
        log.append(s, b"x")
    log.pin("snap", 2)
    for s in range(4, 10):
        log.append(s, b"x")
    assert log.reaches(2) and not log.reaches(1)
    log.unpin("snap")
    log.append(10, b"x")
    assert len(log.entries) == 3 and not log.reaches(2)


def test_a_pin_is_dropped_past_its_byte_bound() -> None:
    log = ReplicaLog(max_bytes=100)
    log.pin("snap", 0)
    for s in range(1, PIN_FACTOR * 10 + 5):
        log.append(s, b"0123456789")
    assert not log.pins and log.nbytes <= 100


def _drive(src: Source, pull: Pull, store: RangeStore, rlog: ReplicaLog) -> int:
    """Run the protocol without sockets; returns how many chunks went."""
    now = 0.0
    chunks = 0
    while not pull.done:
        ask = pull.due("f", now)
        assert ask is not None
        if ask["op"] == "snap":
            pull.on_files(src.start("r1", "f", store, rlog), now)
        else:
            pull.on_data(src.chunk("r1", "f", ask["id"], ask["file"], ask["offset"]), now)
            chunks += 1
        now += 100.0  # past any pacing
    return chunks


@pytest.fixture
def primary(tmp_path: Path) -> Iterator[RangeStore]:
    store = RangeStore.open(str(tmp_path / "primary"))
    for i in range(3000):
        store.write({"op": "insert", "pk": "p", "rk": f"{i:05d}", "props": P(pad=os.urandom(600).hex())})
    yield store
    store.close()


def test_a_checkpoint_pulled_in_chunks_opens_with_every_row(primary: RangeStore, tmp_path: Path) -> None:
    rlog = ReplicaLog()
    src = Source(str(tmp_path / "snapshots"))
    target = str(tmp_path / "replica")
    os.makedirs(target)  # a stale copy: deleted
    pull = Pull("r1", {"primary": "a", "epoch": 1, "peers": {"a": "tcp://x"}}, target, 1e9)
    chunks = _drive(src, pull, primary, rlog)
    assert chunks >= 3 and pull.bytes == pull.total > 2 * CHUNK
    assert rlog.pins  # until the follower acknowledges the checkpoint's position
    src.acked("r1", "f", rlog.last_seq)
    assert not rlog.pins and not src.sessions and not os.listdir(src.root)
    copy = RangeStore.open(target, create=False)
    try:
        assert all(copy.get("p", f"{i:05d}") is not None for i in range(3000))
    finally:
        copy.close()


def test_a_bad_chunk_or_a_lost_session_starts_over(primary: RangeStore, tmp_path: Path) -> None:
    src = Source(str(tmp_path / "snapshots"))
    pull = Pull("r1", {"primary": "a", "epoch": 1}, str(tmp_path / "replica"), 1e9)
    pull.on_files(src.start("r1", "f", primary, ReplicaLog()), 0.0)
    ask = pull.due("f", 0.0)
    assert ask is not None
    data = src.chunk("r1", "f", ask["id"], ask["file"], ask["offset"])
    assert not pull.on_data({**data, "crc": data["crc"] ^ 1}, 0.0)
    assert pull.state == "ask" and pull.attempts == 2
    pull.on_files(src.start("r1", "f", primary, ReplicaLog()), 0.0)
    assert not pull.on_data(src.chunk("r1", "f", "nope", "CURRENT", 0) | {"id": pull.sid}, 0.0)
    assert pull.state == "ask"


def test_pulls_are_paced(primary: RangeStore, tmp_path: Path) -> None:
    src = Source(str(tmp_path / "snapshots"))
    pull = Pull("r1", {"primary": "a", "epoch": 1}, str(tmp_path / "replica"), 1e6)  # 1 MB/s
    pull.on_files(src.start("r1", "f", primary, ReplicaLog()), 0.0)
    big = max(range(len(pull.files)), key=lambda i: pull.files[i][1])
    pull.idx = big
    ask = pull.due("f", 10.0)
    assert ask is not None
    pull.on_data(src.chunk("r1", "f", ask["id"], ask["file"], ask["offset"]), 10.0)
    assert pull.due("f", 10.01) is None  # a MiB at 1 MB/s: about a second until the next


def test_a_retarget_to_a_new_primary_starts_over(tmp_path: Path) -> None:
    pull = Pull("r1", {"primary": "a", "epoch": 1}, str(tmp_path / "replica"), 1e9)
    pull.state = "pull"
    pull.retarget({"primary": "a", "epoch": 1, "peers": {"a": "tcp://y"}})
    assert pull.state == "pull"
    pull.retarget({"primary": "b", "epoch": 2})
    assert pull.state == "ask" and pull.primary == "b"
    pull.cancel()
    assert not os.path.exists(pull.tmp)
