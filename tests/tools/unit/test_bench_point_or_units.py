"""`rangetable bench point-or`: its queries and options (the tests that start no process)."""
from __future__ import annotations

from click.testing import CliRunner

from cli.bench.commands import bench_point_or
from cli.bench.point_or import POINT_KEYS, key_of, point_or_filter, query_keys
from rangetable.filter import parse_filter
from rangetable.planner import plan


def test_each_query_is_an_or_of_200_point_keys_planned_as_point_reads():
    for size, q in ((1000, 0), (1_000_000, 7)):
        keys = query_keys(size, q)
        assert len(set(keys)) == POINT_KEYS and keys == sorted(keys) and 0 <= keys[0] and keys[-1] < size
        p = plan(parse_filter(point_or_filter(keys)))
        assert p.kind == "point" and len(p.scans) == POINT_KEYS
    assert query_keys(1000, 1) != query_keys(1000, 2)  # each query asks for its own keys
    assert key_of(12345) == ("p0000123", "r045")


def test_sizes_must_ascend():
    for bad in ("10,5", "0", "a,b", "10,10"):
        out = CliRunner().invoke(bench_point_or, ["--sizes", bad])
        assert out.exit_code == 2 and "--sizes" in out.output
