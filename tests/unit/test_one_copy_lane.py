"""The suite's one-copy lane (tests/cluster.py): a cluster with ``--replicas 1`` only for a test named ``one_copy``."""

from __future__ import annotations

import pytest

from tests.cluster import ONE_COPY, one_copy_named


@pytest.mark.parametrize("extra", [ONE_COPY, ["--no-dashboard", "--replicas", "1"], ["--replicas=1"]])
def test_a_one_copy_cluster_needs_a_test_named_so(extra: list[str]) -> None:
    with pytest.raises(AssertionError, match="one_copy"):
        one_copy_named(extra, "tests.integration.test_x::test_y (call)")
    one_copy_named(extra, "tests.integration.test_x::test_one_copy_y (call)")
    one_copy_named(extra, "tests.integration.test_one_copy_x::test_y (setup)")


@pytest.mark.parametrize("extra", [[], ["--replicas", "3"], ["--replicas", "2"], ["--replicas=3"], ["--servers", "1"]])
def test_the_default_and_other_replica_counts_need_no_name(extra: list[str]) -> None:
    one_copy_named(extra, "tests.integration.test_x::test_y (call)")
