"""What each partition server holds as primary and as follower (coordinator/map/holdings.py), and how
`rangetable ranges` / `status` print it."""

from __future__ import annotations

from types import SimpleNamespace

from cli.commands.map_admin import _held
from coordinator.map.holdings import empty_holds, holdings, range_reports


def test_holdings_by_role() -> None:
    ranges = [
        {"id": "r1", "primary": "ps-1", "replicas": ["ps-1", "ps-2", "ps-3"]},
        {"id": "r2", "primary": "ps-2", "replicas": ["ps-2", "ps-1", "ps-3"]},
        {"id": "r3", "primary": "ps-1"},  # one copy: its primary holds it as primary
        {"id": "r4", "primary": "ps-3", "replicas": ["ps-3", "ps-1"]},  # not reported yet: empty
    ]
    loads = {"r1": {"entities": 1, "bytes": 70}, "r2": {"entities": 2, "bytes": 150}, "r3": {"entities": 5, "bytes": 9}}
    h = holdings(ranges, loads, ["ps-1", "ps-2", "ps-3", "ps-4"])
    assert h["ps-1"] == {"primary": {"ranges": 2, "entities": 6, "bytes": 79},
                         "follower": {"ranges": 2, "entities": 2, "bytes": 150}}
    assert h["ps-2"] == {"primary": {"ranges": 1, "entities": 2, "bytes": 150},
                         "follower": {"ranges": 1, "entities": 1, "bytes": 70}}
    assert h["ps-3"] == {"primary": {"ranges": 1, "entities": 0, "bytes": 0},
                         "follower": {"ranges": 2, "entities": 3, "bytes": 220}}
    assert h["ps-4"] == empty_holds()
    assert holdings([], {}) == {}


def test_range_reports_come_from_the_servers_loads() -> None:
    servers = {"ps-1": SimpleNamespace(load={"r1": {"entities": 1}}), "ps-2": SimpleNamespace(load={"r1": {"bytes": 9}}),
               "ps-3": SimpleNamespace(load=None)}
    ranges = [{"id": "r1", "primary": "ps-1", "replicas": ["ps-1", "ps-2", "ps-3"]}, {"id": "r2", "primary": "ps-3"},
              {"id": "r3", "primary": "ps-9"}]
    assert range_reports(ranges, servers) == {"r1": {"entities": 1}}  # the primary's, not a follower's


def test_cli_prints_the_holds_it_is_given() -> None:
    s = {"ranges": 1, "holds": {"primary": {"ranges": 1, "entities": 1, "bytes": 70},
                                "follower": {"ranges": 2, "entities": 3, "bytes": 2048}}}
    assert _held(s) == "primary of 1 (1 entities, 70 B), follower of 2 (3 entities, 2.0 KiB)"
    assert _held({"ranges": 4}) == "ranges 4"  # `rangetable servers`: no holds in the answer
