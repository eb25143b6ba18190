"""Fixtures shared by unit test modules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.replication_net import Net


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Net]:
    """Primary ``a`` and followers ``b``, ``c`` of one range on real stores (:class:`Net`), closed afterwards."""
    n = Net(tmp_path)
    yield n
    n.close()
