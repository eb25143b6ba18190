"""Size-bounded process logs: copy-and-truncate rotation, as logrotate's ``copytruncate`` does it.

The supervisor opens each child's log with O_APPEND and hands the descriptor to the child, so the
file can be rotated under a running process: its content is copied to ``log.1`` (older copies move
up to ``log.KEEP``, the oldest goes) and the file is truncated; the child's next write lands at the
new end. Lines written between the copy and the truncation are lost, a window of microseconds. A
process's logs take at most ``(KEEP + 1) * MAX_BYTES`` on disk.
"""

from __future__ import annotations

import os
import shutil

MAX_BYTES = 16 << 20  # rotate a log once it is this large
KEEP = 3  # rotated copies kept (log.1 newest … log.3 oldest)
CHECK_EVERY_S = 10.0  # how often the supervisor looks


def rotate_if_large(path: str, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> bool:
    """Rotate ``path`` if it holds at least ``max_bytes``; True if it did. A missing file is left alone."""
    try:
        if os.path.getsize(path) < max_bytes:
            return False
    except OSError:
        return False
    for i in range(keep - 1, 0, -1):
        older = f"{path}.{i}"
        if os.path.exists(older):
            os.replace(older, f"{path}.{i + 1}")
    shutil.copyfile(path, f"{path}.1")
    os.truncate(path, 0)
    return True
