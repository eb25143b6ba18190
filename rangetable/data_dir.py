"""The default data root of a local cluster: ``$RANGETABLE_DATA_DIR``, else ``./rangetable-data``.

The one definition every layer uses: the clients' ``from_cluster()`` (blocking and asyncio), the CURVE key
lookup and every CLI command's ``--data-dir`` default.
"""

from __future__ import annotations

import os

DATA_DIR_ENV = "RANGETABLE_DATA_DIR"
FALLBACK_DATA_DIR = "./rangetable-data"


def default_data_dir() -> str:
    """``$RANGETABLE_DATA_DIR`` when set (and not empty), else ``./rangetable-data``; read at each call."""
    return os.environ.get(DATA_DIR_ENV) or FALLBACK_DATA_DIR


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> str:
    """``data_dir`` as a path, or :func:`default_data_dir` when it is None."""
    return default_data_dir() if data_dir is None else os.fspath(data_dir)
