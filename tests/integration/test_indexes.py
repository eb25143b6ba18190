"""Secondary indexes at work on `rangetable up`'s defaults (3 servers, 3 replicas): an index built online over
existing rows becomes ready, then an unchanged Azure SDK query on the indexed property goes through it (the
plan says so), sees every write acknowledged before it (read-your-writes), never returns a row whose value
moved away, pages with continuation tokens, and agrees with the same filter scanning the base table."""

from __future__ import annotations

import time
from typing import Any

import pytest
from azure.data.tables import TableServiceClient as AzureServiceClient

from rangetable import TableServiceClient
from tests.cluster import Cluster


@pytest.fixture(scope="module")
def cluster(cluster_factory: Any) -> Cluster:
    return cluster_factory(extra=["--no-dashboard"])


def _wait_ready(t: Any, name: str, timeout: float = 60.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        d = next(d for d in t.list_indexes() if d["name"] == name)
        if d["state"] == "ready":
            return d
        time.sleep(0.2)
    raise AssertionError(f"index {name} not ready after {timeout} s: {d}")


def _raw_query(c: Cluster, table: str, filt: str, top: int = 1000, nxt: Any = None) -> dict:
    with TableServiceClient.from_cluster(c.data_dir) as svc:
        return svc._transport.request({"op": "query", "table": table, "filter": filt, "top": top, "next": nxt})


def _all_through(c: Cluster, table: str, filt: str) -> tuple[list[tuple[str, str]], list[dict]]:
    """Every row a query returns, page after page, and the plan of each page."""
    rows, plans, tok = [], [], None
    while True:
        pg = _raw_query(c, table, filt, nxt=tok)
        rows += [(e[0], e[1]) for e in pg["entities"]]
        plans.append(pg.get("plan"))
        tok = pg["next"]
        if tok is None:
            return rows, plans


def indexed_table(c: Cluster, table: str, rows: int, partitions: int, qtys: int,
                  include: list[str] | None = None) -> Any:
    """A table of ``rows`` entities (``qty`` of ``qtys`` values, a ``name``) and one without ``qty``, then its
    index ``ByQty`` on ``qty``, ready."""
    svc = TableServiceClient.from_cluster(c.data_dir)
    svc.create_table(table)
    t = svc.get_table_client(table)
    for i in range(rows):
        t.upsert_entity({"PartitionKey": f"p{i % partitions}", "RowKey": f"r{i:04d}", "qty": i % qtys, "name": f"n{i}"})
    t.upsert_entity({"PartitionKey": "p0", "RowKey": "noqty", "name": "sparse"})
    t.create_index("ByQty", "qty", include=include)
    _wait_ready(t, "ByQty")
    return t


def test_built_over_existing_rows_then_kept_by_writes(cluster: Cluster) -> None:
    t = indexed_table(cluster, "Orders", 300, 7, 10)
    filt = "qty eq 3"
    page = _raw_query(cluster, "Orders", filt)
    assert page["plan"]["index"] == "ByQty" and page["plan"]["fallback"] is None
    got = sorted((e[0], e[1]) for e in page["entities"])
    assert got == sorted((f"p{i % 7}", f"r{i:04d}") for i in range(300) if i % 10 == 3)

    # read-your-writes: a row written (or moved) just before the query is (or is not) in its answer
    for n in range(20):
        t.upsert_entity({"PartitionKey": "px", "RowKey": f"new{n}", "qty": 3})
        t.upsert_entity({"PartitionKey": "p3", "RowKey": "r0003", "qty": 3 if n % 2 else 4})
        keys = {(e[0], e[1]) for e in _raw_query(cluster, "Orders", filt)["entities"]}
        assert ("px", f"new{n}") in keys
        assert (("p3", "r0003") in keys) == bool(n % 2)
    t.delete_entity("px", "new0")
    keys = {(e[0], e[1]) for e in _raw_query(cluster, "Orders", filt)["entities"]}
    assert ("px", "new0") not in keys

    # pages and the scan agree; a range query through the index too
    for f in ("qty eq 3", "qty ge 8", "qty lt 2 or qty eq 9", "qty gt 4 and name ne 'n15'"):
        through, tok = [], None
        while True:
            pg = _raw_query(cluster, "Orders", f, top=7, nxt=tok)
            assert pg["plan"]["index"] == "ByQty"
            through += [(e[0], e[1]) for e in pg["entities"]]
            tok = pg["next"]
            if tok is None:
                break
        scanned = [(e["PartitionKey"], e["RowKey"]) for e in t.query_entities(f"({f}) and PartitionKey ge ''")]
        assert sorted(through) == sorted(scanned) and len(through) == len(set(through))


def test_the_azure_sdk_queries_through_the_index_unchanged(cluster: Cluster) -> None:
    svc = TableServiceClient.from_cluster(cluster.data_dir)
    svc.create_table("Sdk")
    t = svc.get_table_client("Sdk")
    for i in range(120):
        t.upsert_entity({"PartitionKey": f"p{i % 5}", "RowKey": f"{i:03d}", "color": ["red", "blue", "green"][i % 3]})
    t.create_index("ByColor", "color")
    _wait_ready(t, "ByColor")
    with AzureServiceClient.from_connection_string(cluster.connection_string) as az:
        at = az.get_table_client("Sdk")
        at.upsert_entity({"PartitionKey": "z", "RowKey": "late", "color": "blue"})
        pages = at.query_entities("color eq @c", parameters={"c": "blue"}, results_per_page=9).by_page()
        rows = [(e["PartitionKey"], e["RowKey"]) for page in pages for e in page]
    want = sorted([(f"p{i % 5}", f"{i:03d}") for i in range(120) if i % 3 == 1] + [("z", "late")])
    assert sorted(rows) == want and len(rows) == len(want)


def test_explain_staleness_and_the_rest_plan_header(cluster: Cluster) -> None:
    import json

    from click.testing import CliRunner

    from cli.main import main
    from tests.rest_helpers import Raw

    svc = TableServiceClient.from_cluster(cluster.data_dir)
    svc.create_table("Shown")
    t = svc.get_table_client("Shown")
    t.upsert_entity({"PartitionKey": "a", "RowKey": "1", "size": 5})
    t.create_index("BySize", "size")
    _wait_ready(t, "BySize")

    def cli(*args: str) -> Any:
        run = CliRunner().invoke(main, [*args, "--data-dir", cluster.data_dir])
        assert run.exit_code == 0, run.output
        return run.output

    shown = json.loads(cli("explain", "Shown", "size gt 3", "--json"))
    assert shown["plan"] == "index" and shown["index"] == "BySize" and shown["scans"] == 1
    assert "index BySize" in cli("explain", "Shown", "size gt 3")
    assert json.loads(cli("explain", "Shown", "PartitionKey eq 'a' and size gt 3", "--json"))["plan"] == "row_range"
    assert "no index constrains it" in cli("explain", "Shown", "other eq 1")
    out = CliRunner().invoke(main, ["query", "Shown", "size eq 5", "--data-dir", cluster.data_dir])
    assert out.exit_code == 0 and "through index BySize" in out.output

    rows = list(t.query_entities("size eq 5", index_staleness=60))
    assert [e["RowKey"] for e in rows] == ["1"]
    raw = Raw(cluster.http)
    try:
        got = raw.get("/Shown()?$filter=size%20eq%205")
        assert got.status == 200 and got.headers.get("x-ms-rangetable-plan", "").startswith("index BySize")
    finally:
        raw.close()


def test_an_index_survives_a_split_a_failover_and_its_applier_s_death_under_writes(cluster: Cluster) -> None:
    """Runs last in this module: it kills a partition server and the HTTP frontend that applies the indexes."""
    import random
    import threading

    c = cluster
    svc = TableServiceClient.from_cluster(c.data_dir)
    svc.create_table("Faulty")
    t = svc.get_table_client("Faulty")
    for i in range(1500):
        t.upsert_entity({"PartitionKey": f"p{i % 8}", "RowKey": f"r{i:05d}", "val": i % 30})
    stop = threading.Event()
    acked: list[tuple[str, str, int | None]] = []

    def write() -> None:
        rng = random.Random(3)
        w = TableServiceClient.from_cluster(c.data_dir).get_table_client("Faulty")
        while not stop.is_set():
            pk, rk = f"p{rng.randrange(8)}", f"r{rng.randrange(1700):05d}"
            try:
                if rng.random() < 0.1:
                    w.delete_entity(pk, rk)
                    acked.append((pk, rk, None))
                else:
                    v = rng.randrange(30)
                    w.upsert_entity({"PartitionKey": pk, "RowKey": rk, "val": v})
                    acked.append((pk, rk, v))
            except Exception:  # a write in doubt during the failover: the final comparison reads the table
                time.sleep(0.05)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        t.create_index("ByVal", "val")
        time.sleep(0.5)
        (rec,) = [x for x in c.status()["ranges"] if x["table"] == "Faulty"]
        halves = c.admin({"op": "split", "range": rec["id"], "key": "p4"}, timeout=60, busy_retry_s=30)
        right = next(x for x in c.status()["ranges"] if x["id"] == halves["right"])
        c.kill(right["primary"])  # a base range fails over
        c.wait(lambda: next(x for x in c.status()["ranges"] if x["id"] == halves["right"])["epoch"] > right["epoch"],
               timeout=30, what="a new primary of the right half")
        c.kill("http-1")  # the applier's process: another one takes the claim once its lease ran out
        time.sleep(3)
        _wait_ready(t, "ByVal", timeout=90)
        time.sleep(1)
    finally:
        stop.set()
        writer.join(30)
    assert len(acked) > 200, len(acked)
    c.wait(lambda: next(d for d in t.list_indexes() if d["name"] == "ByVal").get("holder"), timeout=60,
           what="a live applier again")
    c.wait(lambda: _raw_query(c, "Faulty", "val eq 1")["plan"]["fallback"] is None, timeout=60,
           what="the index caught up")
    mismatches = []
    for v in range(30):
        rows, plans = _all_through(c, "Faulty", f"val eq {v}")
        assert plans[0]["index"] == "ByVal" and plans[0]["fallback"] is None
        got = sorted(rows)
        want = sorted((e["PartitionKey"], e["RowKey"])
                      for e in t.query_entities(f"val eq {v} and PartitionKey ge ''"))
        if got != want:
            mismatches.append((v, len(got), len(want), sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
    assert mismatches == []
