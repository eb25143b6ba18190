"""The pure and in-process parts of backup/restore: a partition server's backup checkpoints read out chunk by chunk,
the restore's placement of copies and its refusals (no process started; RocksDB for real)."""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.commands.restore import RestoreError, missing_files, placements, read_manifest, restore
from partition_server.backup_source import IDLE_S, BackupSource
from partition_server.store.range_store import RangeStore
from rangetable import curve
from rangetable.edm import STRING
from rangetable.errors import TableError


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RangeStore]:
    s = RangeStore.open(str(tmp_path / "range"))
    for i in range(2000):
        s.write({"op": "insert", "pk": f"p{i % 7}", "rk": f"{i:05d}",
                 "props": {"pad": [STRING, os.urandom(300).hex()]}})
    yield s
    s.close()


def _read_all(src: BackupSource, rid: str, backup: str, opened: dict, into: Path) -> None:
    into.mkdir()
    for name, size in opened["files"]:
        data, offset = b"", 0
        while offset < size:
            ans = src.chunk(rid, backup, opened["id"], name, offset)
            assert zlib.crc32(ans["data"]) == ans["crc"] and ans["offset"] == offset
            data += ans["data"]
            offset += len(ans["data"])
        (into / name).write_bytes(data)


def test_a_backup_checkpoint_read_in_chunks_is_a_store_with_every_entity(store: RangeStore, tmp_path: Path) -> None:
    src = BackupSource(str(tmp_path / "ps"))
    opened = src.open("r1", "bk1", store)
    assert opened["seq"] == store.position()[1] and opened["bytes"] > 1 << 20
    store.write({"op": "insert", "pk": "late", "rk": "x", "props": {}})  # after the checkpoint: not in it
    _read_all(src, "r1", "bk1", opened, tmp_path / "copy")
    copy = RangeStore.open(str(tmp_path / "copy"), create=False)
    try:
        assert all(copy.get(f"p{i % 7}", f"{i:05d}") is not None for i in range(2000))
        assert copy.get("late", "x") is None
    finally:
        copy.close()
    assert src.close("bk1") == 1
    assert os.listdir(src.source.root) == []
    with pytest.raises(TableError) as e:  # closed: its chunks are gone
        src.chunk("r1", "bk1", opened["id"], opened["files"][0][0], 0)
    assert e.value.error_code == "ResourceNotFound"


def test_backup_checkpoints_expire_when_idle_and_refuse_bad_ids(store: RangeStore, tmp_path: Path) -> None:
    src = BackupSource(str(tmp_path / "ps"))
    for bad in ("", "../x", "."):
        with pytest.raises(TableError) as e:
            src.open("r1", bad, store)
        assert e.value.error_code == "InvalidInput"
    opened = src.open("r1", "bk2", store)
    src.open("r2", "bk2", store)
    assert len(src.source.sessions) == 2
    with pytest.raises(TableError):  # a file the checkpoint does not have
        src.chunk("r1", "bk2", opened["id"], "../../etc/passwd", 0)
    session = src.source.sessions[("r1", "bk2")]
    src.expire(session.used_at + IDLE_S / 2)
    assert len(src.source.sessions) == 2
    src.expire(session.used_at + IDLE_S + 1)
    assert not src.source.sessions and os.listdir(src.source.root) == []


def test_only_the_admin_key_takes_backups() -> None:
    assert curve.may("coordinator", "backup", "admin")
    for role in ("frontend", "partition-server", "coordinator", None):
        assert not curve.may("coordinator", "backup", role)
    assert not curve.may("partition-server", "control", "admin")  # chunks come through the coordinator only


def _manifest(replicas: list[str] | None) -> dict:
    rng = {"id": "r000001", "table": "t", "low": "", "high": None, "files": [{"name": "CURRENT", "size": 0}]}
    if replicas is not None:
        rng["replicas"] = replicas
    return {"format": 2, "coordinator": {"files": []}, "ranges": [rng], "tables": ["t"], "created": 0}


def test_restore_places_a_copy_on_every_replica_or_the_one_copy_layout() -> None:
    assert [d for _, d, _ in placements(_manifest(["ps-1", "ps-2", "ps-3"]))] == [
        "coordinator", "servers/ps-1/ranges/r000001", "servers/ps-2/ranges/r000001", "servers/ps-3/ranges/r000001"]
    assert [d for _, d, _ in placements(_manifest(None))] == ["coordinator", "ranges/r000001"]
    assert [d for _, d, _ in placements(_manifest([]))] == ["coordinator", "ranges/r000001"]
    for bad in (["../evil"], ["a/b"], [".."], [""]):
        with pytest.raises(RestoreError, match="bad server id"):
            placements(_manifest(bad))


def _write_backup(root: Path, manifest: dict, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "backup.json").write_text(json.dumps(manifest))


def test_restore_checks_every_file_before_it_writes(tmp_path: Path) -> None:
    data = b"MANIFEST-000001\n"
    m = _manifest(["ps-1", "ps-2", "ps-3"])
    m["ranges"][0]["files"] = [{"name": "CURRENT", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    bk = tmp_path / "bk"
    _write_backup(bk, m, {"ranges/r000001/CURRENT": b"MANIFEST-000002\n"})  # same size, other bytes
    assert read_manifest(str(bk))["format"] == 2
    assert missing_files(str(bk), m) == [f"{bk}/ranges/r000001/CURRENT does not match its SHA-256 in the manifest "
                                         "(corrupted)"]
    with pytest.raises(RestoreError, match="damaged, nothing was restored"):
        restore(str(bk), str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
    m["ranges"][0]["files"][0]["name"] = "../../x"
    (bk / "backup.json").write_text(json.dumps(m))
    with pytest.raises(RestoreError, match="bad file name"):
        restore(str(bk), str(tmp_path / "new"))
    (bk / "backup.json").write_text(json.dumps({**m, "format": 99}))
    with pytest.raises(RestoreError, match="not a backup manifest"):
        read_manifest(str(bk))
    (bk / "backup.json").write_text('{"format": 2, "ranges": [')  # torn
    with pytest.raises(RestoreError, match="cannot read"):
        read_manifest(str(bk))


def test_a_backup_is_refused_while_a_split_merge_or_move_runs_or_a_primary_is_dead() -> None:
    import threading
    from types import SimpleNamespace

    from coordinator.backup import refuse_busy

    def co(*ranges: dict, dead: tuple[str, ...] = ()) -> SimpleNamespace:
        return SimpleNamespace(map=SimpleNamespace(lock=threading.RLock(),
                                                   pmap=SimpleNamespace(ranges={r["id"]: r for r in ranges})),
                               registry=SimpleNamespace(is_alive=lambda s: s not in dead))

    ok = {"id": "r1", "state": "serving", "primary": "ps-1"}
    refuse_busy(co(ok))  # type: ignore[arg-type]
    for bad, dead, why in [({**ok, "state": "splitting"}, (), "r1 is splitting"),
                           ({**ok, "state": "merging"}, (), "r1 is merging"),
                           ({**ok, "move": {"source": "ps-1", "target": "ps-4"}}, (), "replica move under way"),
                           (ok, ("ps-1",), "no live primary (ps-1 is dead)")]:
        with pytest.raises(TableError) as e:
            refuse_busy(co(bad, dead=dead))  # type: ignore[arg-type]
        assert e.value.error_code == "ServerBusy" and why in e.value.message, e.value
