"""Following etcd, pure parts (coordinator/etcd/watch.py): parsing the watch stream, folding events,
revision bookkeeping, compaction and the takeover check; and the follower's state kept by them."""

from __future__ import annotations

import json

import msgpack
import pytest

from coordinator.etcd.client import b64, unb64
from coordinator.etcd.watch import (
    Position,
    WatchBatch,
    WatchEvent,
    after_cancel,
    fold,
    parse_watch,
    ready,
    watch_request,
)
from coordinator.map.partition_map import PartitionMap
from coordinator.standby.warm import WarmState, decode
from tests.unit.test_warm_standby import _same_map

ROOT = b"/rt/meta/"


def _line(events: list[tuple[str, bytes, bytes | None, int]], **extra: object) -> bytes:
    evs = []
    for kind, key, value, rev in events:
        kv = {"key": b64(key), "mod_revision": str(rev)}
        if value is not None:
            kv["value"] = b64(value)
        evs.append({"kv": kv, **({"type": "DELETE"} if kind == "del" else {})})
    res: dict = {"header": {"revision": "99"}, **extra}
    if evs:
        res["events"] = evs
    return json.dumps({"result": res}).encode() + b"\n"


def test_watch_request_covers_the_prefix_from_a_revision() -> None:
    req = watch_request(b"/rt/", 42)["create_request"]
    assert unb64(req["key"]) == b"/rt/" and unb64(req["range_end"]) == b"/rt0" and req["start_revision"] == "42"


def test_parse_watch_reads_puts_deletes_and_the_control_messages() -> None:
    b = parse_watch(_line([("put", b"/rt/meta/a", b"1", 5), ("del", b"/rt/meta/b", None, 5)]))
    assert b.events == (WatchEvent(b"/rt/meta/a", b"1", 5), WatchEvent(b"/rt/meta/b", None, 5))
    assert not b.created and not b.canceled
    assert parse_watch(_line([], created=True)).created
    c = parse_watch(_line([], canceled=True, compact_revision="17"))
    assert c.canceled and c.compact_revision == 17
    put_empty = parse_watch(json.dumps({"result": {"events": [{"kv": {"key": b64(b"k"), "mod_revision": "3"}}]}}).encode())
    assert put_empty.events == (WatchEvent(b"k", b"", 3),)  # a put of b"" has no "value" field
    for bad in (b'{"error": {"message": "boom"}}', b'{"other": 1}', b"not json"):
        with pytest.raises(ValueError):
            parse_watch(bad)


def test_fold_keeps_meta_keys_the_last_change_wins_and_moves_the_position() -> None:
    evs = (WatchEvent(ROOT + b"a", b"1", 5), WatchEvent(ROOT + b"b", b"2", 5), WatchEvent(ROOT + b"a", None, 6),
           WatchEvent(ROOT + b"c", None, 6), WatchEvent(ROOT + b"c", b"3", 7), WatchEvent(b"/rt/term", b"2", 8))
    puts, dels, pos = fold(evs, ROOT, Position(4))
    assert puts == {b"b": b"2", b"c": b"3"} and dels == [b"a"]
    assert (pos.rev, pos.meta_rev, pos.events) == (8, 7, 6)


def test_fold_skips_what_was_applied_and_a_term_only_batch_moves_rev_alone() -> None:
    puts, dels, pos = fold((WatchEvent(ROOT + b"a", b"1", 5), WatchEvent(ROOT + b"b", b"2", 6)), ROOT, Position(5, 5))
    assert puts == {b"b": b"2"} and dels == [] and (pos.rev, pos.meta_rev) == (6, 6)
    puts, dels, pos = fold((WatchEvent(b"/rt/term", b"3", 9), WatchEvent(b"/rt/leader", b"{}", 9)), ROOT, pos)
    assert (puts, dels) == ({}, []) and (pos.rev, pos.meta_rev, pos.events) == (9, 6, 3)
    assert fold((), ROOT, pos)[2] == pos


def test_a_compaction_past_the_position_reloads_otherwise_reconnect() -> None:
    assert after_cancel(WatchBatch(canceled=True, compact_revision=20), Position(10)) == "reload"
    assert after_cancel(WatchBatch(canceled=True, compact_revision=11), Position(10)) == "reconnect"
    assert after_cancel(WatchBatch(canceled=True), Position(10)) == "reconnect"


def test_ready_only_at_the_won_revision_with_no_meta_change_after_it() -> None:
    assert not ready(Position(9, 8), 10)  # the win not seen yet
    assert ready(Position(10, 8), 10)
    assert ready(Position(12, 10), 10)  # later events outside meta (a lease, the leader key) do not matter
    assert not ready(Position(12, 11), 10)  # a meta write after the win: not the store as of the win
    assert not ready(Position(10, 0), 0)  # no win revision known: cold
    assert ready(Position(15, 0), 10)  # a snapshot read after the win


def _events(writes: tuple[dict, list], rev: int) -> tuple[WatchEvent, ...]:
    puts, deletes = writes
    return (tuple(WatchEvent(ROOT + k, None, rev) for k in deletes)
            + tuple(WatchEvent(ROOT + k, msgpack.packb(v, use_bin_type=True), rev) for k, v in puts.items()))


def test_state_kept_by_folding_equals_a_cold_load() -> None:
    pm = PartitionMap()
    _, (puts, _) = pm.create_table("t", "s1")
    state = WarmState.build("etcd", 3, decode({k: msgpack.packb(v, use_bin_type=True) for k, v in puts.items()}))
    pos = Position(3)
    r = pm.ranges_of("t")[0]
    halves = [pm.new_range("t", "", "m", "s1", 2), pm.new_range("t", "m", None, "s2", 2)]
    evs = _events(pm.replace([r], halves), 4) + _events(pm.update(pm.ranges_of("t")[1], state="moving"), 5)
    evs += (WatchEvent(b"/rt/term", b"2", 6),)
    for batch in (evs[:3], evs[3:]):  # two watch messages
        p, d, pos = fold(batch, ROOT, pos)
        state.apply(decode(p), d, "etcd", pos.rev)
    assert (pos.rev, pos.meta_rev, state.seq) == (6, 5, 6) and ready(pos, 6)
    _same_map(state.pmap, pm)
    p, d, pos = fold(_events(pm.delete_table("t")[1], 7), ROOT, pos)
    state.apply(decode(p), d, "etcd", pos.rev)
    _same_map(state.pmap, pm)
    assert not any(k.startswith((b"range/", b"table/")) for k in state.items)
