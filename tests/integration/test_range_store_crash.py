"""Acknowledged writes survive a real SIGKILL of the process writing them (WAL before answering)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from partition_server.store.range_store import RangeStore

REPO = Path(__file__).resolve().parents[2]
BATCH = 50

CHILD = r"""
import sys, time
from partition_server.store.range_store import RangeStore
path, sync, n, nb = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
s = RangeStore.open(path, sync=sync)
out = sys.stdout
for i in range(n):
    e = s.write({"op": "insert_or_replace", "pk": f"p{i % 50:02d}", "rk": f"w{i:05d}", "props": {"i": [1, i]}})
    out.write(f"w {e.pk} {e.rk} {e.ts}\n")
    out.flush()
for b in range(nb):
    ops = [{"op": "insert", "pk": f"b{b:03d}", "rk": f"{j:02d}", "props": {"j": [2, j]}} for j in range(BATCH)]
    res = s.batch(ops, request_id=f"batch-{b}")
    out.write(f"b {res[0].pk} {len(res)} {res[0].ts} batch-{b}\n")
    out.flush()
out.write("done\n")
out.flush()
time.sleep(120)
""".replace("BATCH", str(BATCH))


def run_and_kill(path: Path, *, sync: bool, n: int, nb: int, kill_after: int | None) -> list[list[str]]:
    """Run the writer, read its acknowledgements, SIGKILL it after ``kill_after`` lines (or "done")."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), "1" if sync else "0", str(n), str(nb)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    acked: list[list[str]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line == "done\n":
                break
            acked.append(line.split())
            if kill_after is not None and len(acked) >= kill_after:
                break
        else:
            raise AssertionError(f"writer ended early: {proc.stderr.read() if proc.stderr else ''}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def check_acknowledged(path: Path, acked: list[list[str]]) -> None:
    """Every acknowledged write is there; batches are all-or-nothing; Timestamps keep increasing."""
    s = RangeStore.open(path)
    try:
        max_ts = 0
        for rec in acked:
            if rec[0] == "w":
                e = s.get(rec[1], rec[2])
                assert e is not None, rec
                assert e.props == {"i": [1, int(rec[2][1:])]} and e.ts == int(rec[3])
            else:
                got = s.scan(rec[1].encode() + b"\x00", rec[1].encode() + b"\x01")[0]
                assert len(got) == BATCH and {e.ts for e in got} == {int(rec[3])}
                retry = s.batch([{"op": "insert", "pk": rec[1], "rk": "00", "props": {}}], request_id=rec[4])
                assert retry[0].ts == int(rec[3])  # a retry after the crash gets the original answer
            max_ts = max(max_ts, int(rec[3]))
        entities, _ = s.scan(b"b", b"c")
        per_batch: dict[str, int] = {}
        for e in entities:
            per_batch[e.pk] = per_batch.get(e.pk, 0) + 1
        assert all(c == BATCH for c in per_batch.values())  # unacknowledged batches: all or nothing
        assert s.last_ts >= max_ts
        assert s.write({"op": "insert", "pk": "z", "rk": "z", "props": {}}).ts > max_ts
    finally:
        s.close()


@pytest.mark.parametrize(
    "sync, n, nb, kill_after",
    [(False, 2000, 20, None), (False, 2000, 20, 700), (False, 200, 20, 205), (True, 300, 10, None)],
    ids=["after-done", "mid-writes", "mid-batches", "sync"],
)
def test_acknowledged_writes_survive_sigkill(tmp_path, sync, n, nb, kill_after):
    path = tmp_path / "range"
    acked = run_and_kill(path, sync=sync, n=n, nb=nb, kill_after=kill_after)
    assert len(acked) == (kill_after or n + nb)
    check_acknowledged(path, acked)
