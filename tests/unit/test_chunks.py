"""The one check of a file chunk, for re-replication (partition_server/replication/snapshot.py) and backups
(cli/commands/backup_pull.py)."""

from rangetable.kernel.chunks import chunk_fields, intact


def test_a_whole_chunk_is_its_bytes():
    assert intact(chunk_fields(b"abc"), offset=0, size=3) == b"abc"
    assert intact(chunk_fields(b"abc"), offset=5, size=10) == b"abc"


def test_a_damaged_empty_or_overlong_chunk_is_refused():
    msg = chunk_fields(b"abc")
    assert intact({**msg, "data": b"abd"}, 0, 3) is None  # CRC mismatch
    assert intact(chunk_fields(b""), 0, 3) is None  # empty: no progress
    assert intact(msg, 1, 3) is None  # past the end of the file
