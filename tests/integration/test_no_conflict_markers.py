"""No tracked file carries a merge's conflict markers (one reached a commit once)."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("<<<<<<< ", ">>>>>>> ")


def test_no_tracked_file_has_conflict_markers() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for name in files:
        path = ROOT / name
        if path.suffix == ".png" or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        bad += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if line.startswith(MARKERS)]
    assert not bad, f"conflict markers in {bad}"
