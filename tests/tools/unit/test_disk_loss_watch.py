"""The disk-loss drill's measures: per-range 'served again' from a history, and restoration to N in-sync."""

from __future__ import annotations

import threading
from pathlib import Path

from cli.workload.disk_loss_watch import (
    RestoreWatch,
    dir_bytes,
    live_servers,
    new_copies,
    range_of,
    restore_step,
    served_again,
)
from cli.workload.verify.history import Op

ALL3 = ["ps-1", "ps-2", "ps-3"]
RANGES = [{"id": "a", "low": "", "high": "p04", "replicas": ALL3, "insync": ALL3, "path": "ranges/a"},
          {"id": "b", "low": "p04", "high": None, "replicas": ALL3, "insync": ALL3, "path": "ranges/b"}]


def op(i: int, pk: str, kind: str, start: float, end: float | None, outcome: str = "ok") -> Op:
    return Op(id=i, key=(pk, "k0"), kind=kind, value=None if kind in ("read", "delete") else "v", start=start,
              end=end, outcome=outcome)


def test_range_of() -> None:
    assert range_of("p00", RANGES) == "a"
    assert range_of("p04", RANGES) == "b"
    assert range_of("zzz", RANGES) == "b"
    assert range_of("p00", RANGES[1:]) is None


def test_served_again_takes_the_first_read_and_write_invoked_after_the_kill() -> None:
    h = [op(1, "p00", "write", 9.0, 12.5),  # invoked before the kill: not counted
         op(2, "p00", "read", 10.1, 11.2),
         op(3, "p01", "cas", 10.2, 11.9),
         op(4, "p00", "write", 10.3, 11.5),
         op(5, "p05", "read", 10.0, 10.1),
         op(6, "p05", "write", 10.5, None, "unknown"),
         op(7, "p05", "write", 10.6, 13.0, "fail")]
    out = served_again(h, RANGES, 10.0)
    assert out["a"] == {"read": 1.2, "write": 1.5, "served": 1.5}
    assert out["b"] == {"read": 0.1, "write": None, "served": None}


def test_served_again_ignores_fresh_and_unknown_keys() -> None:
    h = [Op(id=1, key="not-a-tuple", kind="read", start=11, end=12, outcome="ok")]
    assert served_again(h, RANGES, 10.0)["a"]["served"] is None


def test_live_servers_drop_the_victims_old_incarnation() -> None:
    servers = [{"id": "ps-1", "alive": True, "incarnation": "old"}, {"id": "ps-2", "alive": True, "incarnation": "x"},
               {"id": "ps-3", "alive": False, "incarnation": "y"}]
    assert live_servers(servers, "ps-1", "old") == {"ps-2"}
    servers[0]["incarnation"] = "new"
    assert live_servers(servers, "ps-1", "old") == {"ps-1", "ps-2"}


def test_restore_counts_only_after_the_lost_copy_left_the_insync_set() -> None:
    live = {"ps-1", "ps-2", "ps-3"}
    rec = {"replicas": ["ps-1", "ps-2", "ps-3"], "insync": ["ps-1", "ps-2", "ps-3"]}
    assert restore_step(rec, live, 3, "ps-1", False) == (False, False)  # not noticed yet
    assert restore_step({**rec, "insync": ["ps-2", "ps-3"]}, live, 3, "ps-1", False) == (True, False)
    assert restore_step({"replicas": ["ps-2", "ps-3", "ps-4"], "insync": ["ps-2", "ps-3", "ps-4"]}, live | {"ps-4"},
                        3, "ps-1", True) == (True, True)
    assert restore_step(rec, live, 3, "ps-1", True) == (True, True)  # the victim rebuilt and back in sync
    assert restore_step(rec, live - {"ps-3"}, 3, "ps-1", True) == (True, False)


def test_new_copies() -> None:
    assert new_copies(["ps-1", "ps-2", "ps-3"], ["ps-2", "ps-3", "ps-4"], "ps-1") == ["ps-4"]
    assert new_copies(["ps-1", "ps-2", "ps-3"], ["ps-2", "ps-3", "ps-1"], "ps-1") == ["ps-1"]


def test_dir_bytes(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 10)
    (tmp_path / "g").write_bytes(b"y" * 5)
    assert dir_bytes(str(tmp_path)) == 15
    assert dir_bytes(str(tmp_path / "missing")) == 0


def test_restore_watch_observes_a_rebuild(tmp_path: Path) -> None:
    (tmp_path / "ps-4" / "ranges" / "a").mkdir(parents=True)
    (tmp_path / "ps-4" / "ranges" / "a" / "sst").write_bytes(b"z" * 1000)
    servers = [{"id": s, "alive": True, "incarnation": "i"} for s in ("ps-1", "ps-2", "ps-3", "ps-4")]
    w = RestoreWatch(lambda: {}, RANGES, 3, "ps-1", "i", 0.0, lambda s: str(tmp_path / s))
    w.observe({"servers": servers, "ranges": RANGES})
    assert not w.lost_seen and not w.restored and w.min_insync["a"] == 2
    w.observe({"servers": servers, "ranges": [{**RANGES[0], "replicas": ["ps-2", "ps-3", "ps-4"], "insync": ["ps-2", "ps-3", "ps-4"]},
                                              {**RANGES[1], "replicas": ["ps-2", "ps-3"], "insync": ["ps-2", "ps-3"]}]})
    assert set(w.lost_seen) == {"a", "b"}
    assert w.restored["a"]["new_copies"] == ["ps-4"] and w.restored["a"]["bytes"] == 1000
    assert "b" not in w.restored


def test_restore_watch_sees_a_copy_rebuilt_in_place_while_in_sync(tmp_path: Path) -> None:
    servers = [{"id": s, "alive": True, "incarnation": "i"} for s in ("ps-1", "ps-2", "ps-3")]
    rec = {**RANGES[0], "replicas": ["ps-1", "ps-2", "ps-3"], "insync": ["ps-1", "ps-2", "ps-3"]}
    w = RestoreWatch(lambda: {}, [rec], 3, "ps-1", "i", 0.0, lambda s: str(tmp_path / s))
    (tmp_path / "ps-1" / "ranges" / "a").mkdir(parents=True)
    w.observe({"servers": servers, "ranges": [rec]})  # the old incarnation: its copy counts for nothing
    assert not w.lost_seen and not w.restored
    servers[0]["incarnation"] = "new"
    (tmp_path / "ps-1" / "ranges" / "a").rmdir()
    w.observe({"servers": servers, "ranges": [rec]})  # restarted, in sync, still pulling: no directory yet
    assert not w.lost_seen and not w.restored
    (tmp_path / "ps-1" / "ranges" / "a").mkdir()
    w.observe({"servers": servers, "ranges": [rec]})  # the rebuild renamed its checkpoint into place
    assert "a" in w.lost_seen and w.restored["a"]["new_copies"] == ["ps-1"]


def test_restore_watch_thread_stops_when_asked() -> None:
    calls = threading.Event()

    def status() -> dict:
        calls.set()
        raise RuntimeError("coordinator restarting")

    w = RestoreWatch(status, RANGES, 3, "ps-1", "i", 0.0, lambda s: s)
    w.start()
    assert calls.wait(5)
    w.stop.set()
    w.join(5)
    assert not w.is_alive()


def test_lost_in_events_sees_a_loss_and_repair_between_two_polls() -> None:
    from cli.workload.disk_loss_watch import lost_in_events

    events = [
        {"kind": "promote", "range": "r1", "dropped": ["ps-1"]},
        {"kind": "insync", "range": "r2", "insync": ["ps-2", "ps-3"]},
        {"kind": "rereplicate", "range": "r3", "added": ["ps-1"]},
        {"kind": "insync", "range": "r4", "insync": ["ps-1", "ps-2", "ps-3"]},  # the victim still in sync
        {"kind": "promote", "range": "r5", "dropped": []},
        {"kind": "split", "range": "r6"},
    ]
    assert lost_in_events(events, "ps-1") == {"r1", "r2", "r3"}


def test_restore_watch_follows_a_range_that_split_after_the_kill(tmp_path: Path) -> None:
    """A range split (or merged) while its lost copy was being replaced: restored once every range now over
    its keys has N in-sync replicas on live servers; the victim's old incarnation counts for nothing."""
    servers = [{"id": s, "alive": True, "incarnation": "i"} for s in ("ps-1", "ps-2", "ps-3", "ps-4")]
    w = RestoreWatch(lambda: {}, [RANGES[0]], 3, "ps-1", "i", 0.0, lambda s: str(tmp_path / s))
    left = {"id": "a1", "low": "", "high": "p02", "replicas": ["ps-2", "ps-3", "ps-4"], "insync": ["ps-2", "ps-3", "ps-4"], "path": "ranges/a1"}
    right = {"id": "a2", "low": "p02", "high": "p04", "replicas": ["ps-1", "ps-2", "ps-3"], "insync": ["ps-1", "ps-2", "ps-3"], "path": "ranges/a2"}
    other = {"id": "b", "low": "p04", "high": None, "replicas": ["ps-2"], "insync": ["ps-2"], "path": "ranges/b"}
    w.observe({"servers": servers, "ranges": [left, right, other]})
    assert "a" in w.lost_seen and not w.restored  # a2 still counts the dead copy only
    w.observe({"servers": servers, "ranges": [left, {**right, "replicas": ["ps-2", "ps-3", "ps-4"], "insync": ["ps-2", "ps-3", "ps-4"]}, other]})
    assert w.restored["a"]["new_copies"] == ["ps-4"] and w.restored["a"]["now"] == ["a1", "a2"]


def test_successors_overlap_the_old_span_in_its_table() -> None:
    from cli.workload.disk_loss_watch import successors

    span = {"id": "a", "table": "t", "low": "p02", "high": "p06"}
    now = [{"id": "x", "table": "t", "low": "", "high": "p02"}, {"id": "y", "table": "t", "low": "p01", "high": "p03"},
           {"id": "z", "table": "t", "low": "p05", "high": None}, {"id": "o", "table": "u", "low": "", "high": None}]
    assert [r["id"] for r in successors(span, now)] == ["y", "z"]
    assert [r["id"] for r in successors({**span, "high": None}, now)] == ["y", "z"]
