"""Copy-and-truncate log rotation under a writer that keeps its O_APPEND descriptor."""

from __future__ import annotations

import os

from cli.cluster.log_rotation import rotate_if_large


def test_rotation_keeps_a_bounded_number_of_copies_and_the_writer_goes_on(tmp_path):
    path = str(tmp_path / "ps-1.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # as the supervisor hands it to a child
    try:
        assert not rotate_if_large(path, max_bytes=100)  # empty
        for gen in range(5):
            os.write(fd, f"gen{gen} ".encode() * 40)
            assert rotate_if_large(path, max_bytes=100)
            assert os.path.getsize(path) == 0
        os.write(fd, b"after")
        with open(path, "rb") as f:
            assert f.read() == b"after"  # written at the start of the truncated file, no hole
        names = sorted(os.listdir(tmp_path))
        assert names == ["ps-1.log", "ps-1.log.1", "ps-1.log.2", "ps-1.log.3"]
        with open(path + ".1", "rb") as f:
            assert f.read().startswith(b"gen4 ")
        with open(path + ".3", "rb") as f:
            assert f.read().startswith(b"gen2 ")
        assert not rotate_if_large(path, max_bytes=100)
        assert not rotate_if_large(str(tmp_path / "missing.log"), max_bytes=1)
    finally:
        os.close(fd)
