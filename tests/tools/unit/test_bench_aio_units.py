"""Unit tests of ``rangetable bench aio``'s pieces: the operation mix and the per-interval tally."""

from __future__ import annotations

import random

from cli.bench.aio import Mix, Tally


def test_mix_reads_and_upserts_existing_keys_in_its_share() -> None:
    mix = Mix(keys=50, partitions=5, read_share=0.25)
    ops = [mix.operation(random.Random(i)) for i in range(2000)]
    assert {(pk, rk) for _, pk, rk, _ in ops} <= {mix.key_of(i) for i in range(50)}
    assert 0.2 < sum(read for read, *_ in ops) / len(ops) < 0.3
    assert all(e["PartitionKey"] == pk and e["RowKey"] == rk for _, pk, rk, e in ops)


def test_tally_times_operations_and_counts_errors_then_starts_afresh() -> None:
    tally = Tally()
    with tally.timing():
        pass
    with tally.timing():
        raise ValueError("counted, not raised")
    latencies, errors = tally.take()
    assert len(latencies) == 1 and latencies[0] >= 0 and errors == 1
    assert tally.take() == ([], 0)
