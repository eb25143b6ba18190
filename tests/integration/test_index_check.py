"""`rangetable table index check` on `rangetable up`'s defaults (3 servers, 3 replicas): a right index has no
difference, also while the table is written during the check; an index damaged under the applier's own claim
(an entry deleted, one with a wrong value, one of no row) is reported key by key with exit 1, `--repair` fixes
it, and a check after that finds nothing; `index list` shows the last check."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import main
from frontend.native.asyncio_driver import AioFrontend
from rangetable.config import FrontendConfig
from rangetable.edm import INT32, STRING
from rangetable.index_def import IndexDef
from rangetable.index_keys import entry_key, entry_pk, entry_rk
from tests.cluster import Cluster
from tests.integration.test_indexes import indexed_table

IDX = IndexDef("Stock", "ByQty", ("qty",), ("name",))


@pytest.fixture(scope="module")
def cluster(cluster_factory: Any) -> Cluster:
    return cluster_factory(extra=["--no-dashboard"])


def _check(c: Cluster, *extra: str) -> tuple[int, dict]:
    run = CliRunner().invoke(main, ["table", "index", "check", "Stock", "ByQty", *extra, "--json",
                                    "--data-dir", c.data_dir])
    assert run.exit_code in (0, 1), run.output
    return run.exit_code, json.loads(run.output)


def _damage(c: Cluster, ops: list[list]) -> None:
    """Entries written as the applier writes them: an internal index_write of an in-process frontend, under the
    claim the applier holds (asked for by another holder: refused, with the current number)."""
    peek = c.admin({"op": "index_claim", "table": "Stock", "name": "ByQty", "holder": "test-peek", "ttl_s": 1})
    assert not peek["granted"]

    async def write() -> Any:
        fe = AioFrontend(FrontendConfig(coordinator=c.coordinator, keys_dir=os.path.join(c.data_dir, "keys"),
                                        frontend_id="test"))
        await fe.start()
        try:
            return await fe.request({"op": "index_write", "internal": True, "table": IDX.entries_table,
                                     "claim": peek["claim"], "pos": None, "ops": ops})
        finally:
            await fe.close()

    assert asyncio.run(write())["applied"] >= 1


def _key(pk: str, rk: str, qty: int) -> bytes:
    epk = entry_pk(IDX, {"qty": [INT32, qty]})
    assert epk is not None
    return entry_key(epk, entry_rk(pk, rk))


def test_check_finds_damage_key_by_key_and_repair_fixes_it(cluster: Cluster) -> None:
    t = indexed_table(cluster, "Stock", 200, 5, 7, include=["name"])

    code, rep = _check(cluster)
    assert code == 0 and rep["differences"] == 0 and rep["entries"] == 200 and rep["base_rows"] == 201
    assert rep["missing"] == rep["extra"] == rep["wrong"] == [] and rep["ranges"] >= 1

    # written while the check runs: in flight or applied, never a difference
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            t.upsert_entity({"PartitionKey": "p9", "RowKey": f"c{n % 30:02d}", "qty": n % 3, "name": "c"})
            if n % 4 == 3:
                t.delete_entity("p9", f"c{(n - 2) % 30:02d}")
            n += 1

    th = threading.Thread(target=churn)
    th.start()
    try:
        for _ in range(3):
            code, rep = _check(cluster)
            # the differences themselves in the message (pytest shortens a long dict to its first keys)
            assert code == 0 and rep["differences"] == 0, json.dumps({k: v for k, v in rep.items() if k in (
                "differences", "missing", "extra", "wrong", "cursor_ts", "base_rows", "entries", "in_flight")})
    finally:
        stop.set()
        th.join()
    for e in list(t.query_entities("PartitionKey eq 'p9'")):
        t.delete_entity("p9", e["RowKey"])

    _damage(cluster, [[_key("p1", "r0001", 1), None],  # deleted: missing
                      [_key("p2", "r0002", 2), {"name": [STRING, "wrong"]}],  # a wrong kept value
                      [_key("p3", "gone", 5), {"name": [STRING, "ghost"]}]])  # of no row: extra
    code, rep = _check(cluster)
    assert code == 1 and rep["differences"] == 3, rep
    assert rep["missing"] == [["p1", "r0001"]] and rep["wrong"] == [["p2", "r0002"]]
    assert rep["extra"] == [["p3", "gone"]] and rep["remaining"] == 3 and rep["repaired"] == 0
    text = CliRunner().invoke(main, ["table", "index", "check", "Stock", "ByQty", "--data-dir", cluster.data_dir])
    assert text.exit_code == 1 and "differences  3 (missing 1, extra 1, wrong 1)" in text.output, text.output
    assert 'missing      ["p1", "r0001"]' in text.output

    code, rep = _check(cluster, "--repair")
    assert code == 0 and rep["differences"] == 3 and rep["repaired"] == 3 and rep["remaining"] == 0, rep
    code, rep = _check(cluster)
    assert code == 0 and rep["differences"] == 0 and rep["entries"] == 200, rep
    listed = CliRunner().invoke(main, ["table", "index", "list", "Stock", "--data-dir", cluster.data_dir])
    assert listed.exit_code == 0 and "0 differences in 200 entries" in listed.output, listed.output
    assert t.query_entities("qty eq 2 and RowKey eq 'r0002'").__next__()["name"] == "n2"
