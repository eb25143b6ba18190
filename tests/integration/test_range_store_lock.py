"""A range store's RocksDB LOCK is released by close, for this process and for another one (a subprocess).

Split from tests/unit/test_range_store.py, whose other tests start no process.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from partition_server.store.range_store import RangeStore
from tests.unit.test_range_store import REPO, err, ins


def test_close_releases_lock_in_process_and_for_a_subprocess(tmp_path):
    path = tmp_path / "r"
    s = RangeStore.open(path)
    s.batch([ins("p", str(i)) for i in range(100)])
    s.scan(b"", None, limit=10)
    with pytest.raises(ZeroDivisionError):
        s.scan(b"", None, lambda *a: 1 / 0)
    s.split_key()
    with pytest.raises(Exception, match="lock"):
        RangeStore.open(path)
    s.close()
    s.close()  # idempotent
    assert err(s.get, "p", "1").error_code == "RangeBusy"
    s = RangeStore.open(path)
    s.scan(b"", None, limit=5)
    s.close()
    code = (
        "import sys; from partition_server.store.range_store import RangeStore;"
        "s = RangeStore.open(sys.argv[1]); print(len(s.scan(b'', None)[0])); s.close()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "100"
    assert re.search("LOCK", out.stderr) is None
