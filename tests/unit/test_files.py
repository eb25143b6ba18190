"""write_json_atomic: whole files, private ones 0600 even over a wider leftover."""
from __future__ import annotations

import json
import os
import stat

from rangetable.files import write_json_atomic


def test_write_json_atomic(tmp_path) -> None:
    path = str(tmp_path / "doc.json")
    open(path + ".tmp", "w").close()
    os.chmod(path + ".tmp", 0o644)  # a leftover of a crash, readable by others
    write_json_atomic(path, {"a": 1}, private=True, indent=2, sync=True)
    assert json.load(open(path)) == {"a": 1} and not os.path.exists(path + ".tmp")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    write_json_atomic(path, [1, 2])
    assert json.load(open(path)) == [1, 2]
