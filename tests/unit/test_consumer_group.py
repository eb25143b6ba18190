"""The pure parts of consumer groups (rangetable/client/consumer_group.py): fair shares and span splits."""

from __future__ import annotations

from rangetable.client.consumer_group import fair_share, split_points


def test_fair_share_rounds_down_and_up() -> None:
    assert fair_share(3, 2) == (1, 2)
    assert fair_share(4, 2) == (2, 2)
    assert fair_share(1, 3) == (0, 1)
    assert fair_share(5, 0) == (5, 5)  # no live member known: one takes all


def test_split_points_are_the_boundaries_strictly_inside() -> None:
    assert split_points("", None, ["", "p4", "p6"]) == ["p4", "p6"]
    assert split_points("p4", None, ["", "p4", "p6"]) == ["p6"]
    assert split_points("", "p4", ["", "p4", "p6"]) == []
    assert split_points("p4", "p9", ["p6", "p6", "p9", "z"]) == ["p6"]
