"""Nearest-rank percentiles used by every printed figure."""

from __future__ import annotations

import pytest

from rangetable.kernel.stats import percentile, percentile_ms


@pytest.mark.parametrize(
    "values, p, expected",
    [
        ([], 0.5, None),
        ([3.0], 0.99, 3.0),
        ([5.0, 1.0, 3.0], 0.0, 1.0),
        ([5.0, 1.0, 3.0], 0.5, 3.0),
        ([5.0, 1.0, 3.0], 1.0, 5.0),
        (list(range(100)), 0.99, 99),
        (list(range(1000)), 0.99, 990),
    ],
)
def test_percentile(values: list, p: float, expected: float | None) -> None:
    assert percentile(values, p) == expected


def test_percentile_ms_scales_rounds_and_defaults() -> None:
    assert percentile_ms([], 0.5) == 0.0
    assert percentile_ms([0.0012345, 0.002], 0.5, 3) == 2.0
    assert percentile_ms([0.0012345], 0.5, 1) == 1.2
