"""Where a drill's or bench's layout puts each range's primary (cli/workload/layout.py)."""

from cli.workload.layout import primary_targets

S = ["ps-1", "ps-2", "ps-3"]


def test_one_copy_ranges_go_round_robin():
    ranges = [{"id": x, "primary": "ps-1"} for x in "abcd"]
    assert primary_targets(ranges, S) == {"a": "ps-1", "b": "ps-2", "c": "ps-3", "d": "ps-1"}


def test_a_replicated_primary_moves_only_to_an_in_sync_replica():
    ranges = [{"id": "a", "primary": "ps-1", "insync": S},
              {"id": "b", "primary": "ps-1", "insync": ["ps-1", "ps-3"]},  # ps-2 lags: not a choice
              {"id": "c", "primary": "ps-1", "insync": S}]
    assert primary_targets(ranges, S) == {"a": "ps-1", "b": "ps-3", "c": "ps-3"}  # b: fewest primaries


def test_a_dead_server_is_never_a_target():
    ranges = [{"id": "a", "primary": "ps-2", "insync": ["ps-2", "ps-4"]}]
    assert primary_targets(ranges, ["ps-1", "ps-2"]) == {"a": "ps-2"}
