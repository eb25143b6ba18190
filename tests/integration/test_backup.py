"""rangetable backup / restore through real clusters: a backup taken while a writer runs, restored into
a new data root that a new `rangetable up` serves, entity by entity equal (types and Timestamps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from cli.coordinator_client import call
from cli.restore import RestoreError, missing_files, read_manifest, restore
from rangetable.edm import INT32, STRING
from rangetable.errors import TableError
from tests.cluster import ROOT, ClusterFactory
from tests.typed_samples import dump, same_props, typed_props


def rangetable(*args: str) -> subprocess.CompletedProcess:
    """Run the CLI; returns the completed process (output as text)."""
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def put(native: str, table: str, pk: str, rk: str, props: dict) -> int:
    """Upsert one entity; returns its Timestamp."""
    res = call(native, {"op": "write", "table": table, "write": {
        "op": "insert_or_replace", "pk": pk, "rk": rk, "props": props, "if_match": None}}, timeout=30)
    return res[2]


@pytest.mark.slow
def test_backup_under_writes_restores_equal(tmp_path, cluster_factory: ClusterFactory) -> None:
    src = tmp_path / "src"
    with cluster_factory(servers=2, data_dir=src) as c:
        call(c.native, {"op": "create_table", "table": "Typed"})
        call(c.native, {"op": "create_table", "table": "Log"})
        for p in range(6):  # 6 partitions, 40 entities each, every EDM type
            ops = [{"op": "insert_or_replace", "pk": f"p{p}", "rk": f"r{r:03d}", "props": typed_props(p * 40 + r),
                    "if_match": None} for r in range(40)]
            call(c.native, {"op": "batch", "table": "Typed", "ops": ops})
        typed_rid = next(r["id"] for r in c.status()["ranges"] if r["table"] == "Typed")
        split = c.admin({"op": "split", "range": typed_rid, "key": "p3"})
        log_rid = next(r["id"] for r in c.status()["ranges"] if r["table"] == "Log")
        c.admin({"op": "split", "range": log_rid, "key": "m"})
        c.admin({"op": "move", "range": split["right"], "server": "ps-2"})

        # A writer appends to two partitions of Log (one per range) while the backup runs.
        acked: dict[str, list[tuple[str, int]]] = {"a": [], "z": []}
        stop = threading.Event()
        errors: list[Exception] = []

        def writer() -> None:
            n = 0
            try:
                while not stop.is_set():
                    for pk in ("a", "z"):
                        rk = f"w{n:06d}"
                        ts = put(c.native, "Log", pk, rk, {"n": [INT32, n], "who": [STRING, pk]})
                        acked[pk].append((rk, ts))
                    n += 1
            except Exception as exc:  # surfaced by the assertion below
                errors.append(exc)

        t = threading.Thread(target=writer)
        t.start()
        c.wait(lambda: len(acked["z"]) >= 50, what="the writer to get going")
        before = {pk: len(v) for pk, v in acked.items()}
        out = rangetable("backup", "--to", str(tmp_path / "bk"), "--data-dir", str(src), "--json")
        c.wait(lambda: len(acked["z"]) >= before["z"] + 50, what="writes after the backup")
        stop.set()
        t.join(30)
        assert not errors, errors
        assert out.returncode == 0, out.stderr
        manifest = json.loads(out.stdout)
        assert len(manifest["ranges"]) == 4 and manifest["tables"] == ["Log", "Typed"]
        assert all(r["linked"] > 0 for r in manifest["ranges"]), "checkpoints on one filesystem are hard links"
        source_typed = dump(c.native, "Typed")
        events = call(c.coordinator, {"op": "events", "since": 0})
        assert any(e["kind"] == "backup" for e in events)

    assert len(source_typed) == 240
    res = rangetable("restore", "--from", str(tmp_path / "bk"), "--data-dir", str(tmp_path / "new"))
    assert res.returncode == 0, res.stderr
    assert "restored 4 ranges of 2 tables" in res.stdout
    with cluster_factory(servers=2, data_dir=tmp_path / "new") as r:
        restored_typed = dump(r.native, "Typed")
        assert restored_typed.keys() == source_typed.keys()
        for key, (ts, props) in source_typed.items():
            assert restored_typed[key][0] == ts, key
            assert same_props(restored_typed[key][1], props), (key, restored_typed[key][1], props)
        log = dump(r.native, "Log")
        for pk in ("a", "z"):
            got = sorted((rk, ts) for (p, rk), (ts, _) in log.items() if p == pk)
            # Each range is consistent at its own instant: exactly a prefix of the acknowledged writes,
            # holding every write acknowledged before the backup was asked for and none torn.
            assert got == acked[pk][: len(got)], pk
            assert before[pk] <= len(got) < len(acked[pk]), (pk, before[pk], len(got), len(acked[pk]))
        owners = {x["id"]: x["owner"] for x in r.status()["ranges"]}
        assert owners[split["right"]] == "ps-2"  # ranges go back to the servers that held them
        assert put(r.native, "Log", "a", "after", {}) > max(ts for _, ts in acked["a"][: len(got)])

    # The same backup restored again, onto one server: ps-2's ranges fail over to ps-1 after a lease.
    assert restore(str(tmp_path / "bk"), str(tmp_path / "one"))["ranges"] == 4
    with cluster_factory(servers=1, data_dir=tmp_path / "one") as one:
        assert dump(one.native, "Typed").keys() == source_typed.keys()
        one.wait(lambda: not one.check_map(), timeout=15, what="ps-2's ranges to fail over to ps-1")
        assert {x["owner"] for x in one.status()["ranges"]} == {"ps-1"}


def test_backup_refuses_a_used_directory_and_restore_a_damaged_backup(tmp_path, cluster_factory: ClusterFactory) -> None:
    with cluster_factory(servers=1, data_dir=tmp_path / "src") as c:
        call(c.native, {"op": "create_table", "table": "Tbl"})
        put(c.native, "Tbl", "p", "r", {"x": [INT32, 1]})
        (tmp_path / "used").mkdir()
        (tmp_path / "used" / "file").write_text("mine")
        with pytest.raises(TableError) as e:
            c.admin({"op": "backup", "dir": str(tmp_path / "used")})
        assert e.value.error_code == "InvalidInput"
        assert (tmp_path / "used" / "file").read_text() == "mine"
        with pytest.raises(TableError) as e:
            c.admin({"op": "backup", "dir": "relative/dir"})
        assert e.value.error_code == "InvalidInput"
        (tmp_path / "empty").mkdir()
        c.admin({"op": "backup", "dir": str(tmp_path / "empty")})
    bk = str(tmp_path / "empty")
    manifest = read_manifest(bk)
    assert missing_files(bk, manifest) == []
    with pytest.raises(RestoreError, match="not empty"):
        restore(bk, str(tmp_path / "used"))
    sst = next(f["name"] for f in manifest["ranges"][0]["files"] if f["name"].endswith(".sst"))
    os.unlink(os.path.join(bk, "ranges", manifest["ranges"][0]["id"], sst))
    res = rangetable("restore", "--from", bk, "--data-dir", str(tmp_path / "new"))
    assert res.returncode != 0 and "damaged" in res.stderr and sst in res.stderr
    assert not (tmp_path / "new").exists()
    os.unlink(os.path.join(bk, "backup.json"))
    with pytest.raises(RestoreError, match="incomplete"):
        read_manifest(bk)
