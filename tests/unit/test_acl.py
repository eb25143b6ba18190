"""Table ACLs and service properties on a real coordinator (coordinator.acl).

The tests that start no process; those that do are in tests/integration/test_acl.py.
"""
from __future__ import annotations

from coordinator.acl import validate_policies


def test_acl_limits_at_the_edge() -> None:
    ok = validate_policies({"x" * 64: {"permission": "raud"}, **{f"p{i}": None for i in range(4)}})
    assert len(ok) == 5 and ok["x" * 64]["permission"] == "raud"
