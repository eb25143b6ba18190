"""A retried create_table (the same request id) answers as the first did; another creator still gets
TableAlreadyExists; the creator's id survives a reload of the map and goes with the table."""

from __future__ import annotations

import pytest

from coordinator.map.partition_map import PartitionMap, creator_key, table_key
from rangetable.errors import TableError


def test_the_creating_request_is_known_and_follows_the_table() -> None:
    pm = PartitionMap()
    _rec, (puts, _deletes) = pm.create_table("Orders", "ps-1", rid="r-1")
    assert puts[creator_key("Orders")] == "r-1" and puts[table_key("Orders")] == "Orders"
    assert pm.created_by("orders", "r-1") and not pm.created_by("Orders", "r-2") and not pm.created_by("Orders", None)
    with pytest.raises(TableError) as err:
        pm.create_table("ORDERS", "ps-1", rid="r-2")
    assert err.value.error_code == "TableAlreadyExists"
    reloaded = PartitionMap.load(list(puts.items()))
    assert reloaded.created_by("Orders", "r-1")
    standby = PartitionMap()
    standby.apply(puts, [])
    assert standby.created_by("Orders", "r-1")
    _gone, (_puts, deletes) = pm.delete_table("Orders")
    assert creator_key("Orders") in deletes and not pm.created_by("Orders", "r-1")
    standby.apply({}, deletes)
    assert not standby.created_by("Orders", "r-1")
