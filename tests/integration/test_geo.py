"""A secondary cluster (issue 35, ``docs/geo.md``) on real processes: two clusters as `rangetable up` starts them
(3 servers, 3 replicas each), the second started with ``--secondary-of`` the first. Tables created and deleted at
the source follow; what the unchanged Azure SDK writes at the source is read at the secondary; every read there is
one cut of the source's history (never half a transaction, never a later write without an earlier one); writes
there are refused as Azure's secondary refuses them; Get Service Stats and ``rangetable geo status`` show the cut."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rangetable import TableServiceClient
from rangetable.errors import TableError
from tests.cluster import Cluster
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, Raw, assert_secondary_refuses_writes

tables = pytest.importorskip("azure.data.tables")
from azure.core.credentials import AzureNamedKeyCredential  # noqa: E402
from azure.core.exceptions import HttpResponseError  # noqa: E402

CRED = AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY)


@pytest.fixture(scope="module")
def pair(cluster_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Cluster]]:
    """A source and a secondary following it with a client key of the source (`rangetable keys add`), not its
    admin key: reading its tables and feed is all a secondary does there."""
    source = cluster_factory(extra=["--no-dashboard"])
    key = tmp_path_factory.mktemp("geokey") / "secondary.rangetable.json"
    out = subprocess.run([sys.executable, "-m", "cli.main", "keys", "add", "secondary", "--out", str(key),
                          "--data-dir", str(source.data_dir)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    secondary = cluster_factory(extra=["--no-dashboard", "--secondary-of", str(key)])
    yield source, secondary


def _sdk(c: Cluster) -> Any:
    return tables.TableServiceClient(c.http, credential=CRED)


def _poll(fn: Any, want: Any, timeout: float = 20.0) -> None:
    t0 = time.monotonic()
    got = None
    while time.monotonic() - t0 < timeout:
        try:
            got = fn()
        except (HttpResponseError, TableError) as e:
            got = e
        if got == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"not {want!r} after {timeout} s: {got!r}")


def _names(svc: Any) -> list[str]:
    return sorted(t.name for t in svc.list_tables())


def test_tables_and_entities_follow_and_writes_are_refused(pair: tuple[Cluster, Cluster]) -> None:
    source, secondary = pair
    with _sdk(source) as src, _sdk(secondary) as sec:
        src.create_table("geoorders")
        t = src.get_table_client("geoorders")
        for i in range(30):
            t.upsert_entity({"PartitionKey": f"p{i % 3}", "RowKey": f"{i:03d}", "qty": i})
        t.submit_transaction([("upsert", {"PartitionKey": "tx", "RowKey": r, "v": 1}) for r in "abc"])
        t.delete_entity("p0", "000")
        _poll(lambda: "geoorders" in _names(sec), True)
        s = sec.get_table_client("geoorders")
        want = sorted((e["PartitionKey"], e["RowKey"], e.get("qty"), e.metadata["etag"]) for e in t.list_entities())
        _poll(lambda: sorted((e["PartitionKey"], e["RowKey"], e.get("qty"), e.metadata["etag"])
                             for e in s.list_entities()), want)  # the source's values and ETags
        assert s.get_entity("p1", "001")["qty"] == 1
        assert [e["qty"] for e in s.query_entities("PartitionKey eq 'p2' and qty ge 20")] == [20, 23, 26, 29]

        assert_secondary_refuses_writes(s, "p1", "001")  # on the plain account name too: the cluster is a secondary
        with pytest.raises(HttpResponseError) as ei:
            sec.create_table("mine")
        assert ei.value.status_code == 403
        native = TableServiceClient.from_cluster(secondary.data_dir)
        native_src = TableServiceClient.from_cluster(source.data_dir)
        with pytest.raises(TableError) as te:
            native.get_table_client("geoorders").upsert_entity({"PartitionKey": "p", "RowKey": "r"})
        assert te.value.error_code == "InsufficientAccountPermissions"
        assert native.get_table_client("geoorders").get_entity("p1", "004")["qty"] == 4

        stats = sec.get_service_stats()["geo_replication"]
        assert stats["status"] == "live", stats
        t.upsert_entity({"PartitionKey": "p9", "RowKey": "late", "qty": 99})  # after the table's first copy
        _poll(lambda: s.get_entity("p9", "late")["qty"], 99)
        theirs = {r.cursor: (r.kind, r.entity) for r in native_src.get_table_client("geoorders").read_changes()}
        ours = {r.cursor: (r.kind, r.entity) for r in native.get_table_client("geoorders").read_changes()}
        assert any(e is not None and e["RowKey"] == "late" for _, e in ours.values())  # the secondary's feed, at its cut:
        assert all(theirs[k] == v for k, v in ours.items())  # the source's records, as they were
        raw = Raw(secondary.http)
        try:
            doc = json.loads(raw.get("/geoorders/$geo").body)  # the table's own cut (a REST extension)
            assert doc["TableName"] == "geoorders" and doc["Status"] == "live" and doc["LagSeconds"] < 10, doc
            assert doc["LastSyncTime"].startswith("20")
            assert raw.get("/nosuchtable/$geo").status == 404
        finally:
            raw.close()
        raw = Raw(source.http)
        try:
            assert raw.get("/geoorders/$geo").status == 400  # a primary cluster has no cut
        finally:
            raw.close()

        src.delete_table("geoorders")
        _poll(lambda: "geoorders" in _names(sec), False)


def test_every_read_is_one_cut_of_the_source(pair: tuple[Cluster, Cluster]) -> None:
    """A writer appends rows 0, 1, 2, … one write each, and rewrites a three-row group in one transaction
    each time; every read at the secondary sees a prefix of the rows and a group of one value."""
    source, secondary = pair
    src = TableServiceClient.from_cluster(source.data_dir)
    src.create_table("geocut")
    t = src.get_table_client("geocut")
    stop = threading.Event()
    written = [0]

    def write() -> None:
        i = 0
        while not stop.is_set():
            t.upsert_entity({"PartitionKey": "log", "RowKey": f"{i:06d}", "i": i})
            t.submit_transaction([("upsert", {"PartitionKey": "group", "RowKey": r, "v": i}) for r in "abc"])
            i += 1
            written[0] = i
            time.sleep(0.005)  # a steady stream, not the whole machine: the suite runs beside it

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        sec = TableServiceClient.from_cluster(secondary.data_dir)
        deadline = time.monotonic() + 60
        while "geocut" not in [x.name for x in sec.list_tables()]:
            assert time.monotonic() < deadline, "the table never reached the secondary"
            time.sleep(0.1)
        s = sec.get_table_client("geocut")
        reads = seen = 0
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end:
            rows = list(s.query_entities("PartitionKey eq 'group' or PartitionKey eq 'log'"))
            log = [e["i"] for e in rows if e["PartitionKey"] == "log"]
            group = {e["v"] for e in rows if e["PartitionKey"] == "group"}
            assert log == list(range(len(log))), log[:20]  # a prefix: no later write without the earlier ones
            assert len(group) <= 1, group  # a transaction is all or nothing
            if group and len(rows) < 1000:  # one page, one cut: the group written right after its row, or before
                assert group <= {len(log) - 1, len(log) - 2}, (group, len(log))
            reads += 1
            seen = max(seen, len(log))
            time.sleep(0.02)
        assert reads > 10 and seen > 0, (reads, seen)
    finally:
        stop.set()
        writer.join(10)
    n = written[0]
    _poll(lambda: len(list(s.query_entities("PartitionKey eq 'log'"))) >= n, True, timeout=30)

    out = subprocess.run([sys.executable, "-m", "cli.main", "geo", "status", "--data-dir", str(secondary.data_dir),
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["tables"] if r["table"] == "geocut")
    assert row["cut"] is not None and row["lag_s"] is not None and row["lag_s"] < 10, row
    assert row["applier"], row


def _primary_of(c: Cluster, table: str) -> str:
    return next(r["primary"] for r in c.status()["ranges"] if r["table"] == table)


def _applier(c: Cluster, table: str) -> Any:
    return next(r["applier"] for r in c.admin({"op": "geo_status"})["tables"] if r["table"] == table)


def test_kills_on_either_side_lose_nothing(pair: tuple[Cluster, Cluster]) -> None:
    """Under writes, the secondary's applier process is killed (a new one resumes from the cut once the claim
    lapses), then the primary of the secondary's range (its replicas fail over), then the primary of the
    source's range (the feed survives the failover): at the end the secondary holds exactly what the source
    holds, values and ETags, and the source every write it acknowledged."""
    source, secondary = pair
    src = TableServiceClient.from_cluster(source.data_dir)
    src.create_table("geokill")
    t = src.get_table_client("geokill")
    stop = threading.Event()
    acked: dict[str, int] = {}

    def write() -> None:
        i = 0
        while not stop.is_set():
            key = f"k{i % 40:02d}"
            try:
                t.upsert_entity({"PartitionKey": "p", "RowKey": key, "v": i})
                acked[key] = i
            except TableError:
                pass  # not acknowledged: it may or may not be there
            i += 1
            time.sleep(0.005)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        sec = TableServiceClient.from_cluster(secondary.data_dir)
        _poll(lambda: "geokill" in [x.name for x in sec.list_tables()], True, timeout=30)
        time.sleep(1.0)
        before = _applier(secondary, "geokill")
        assert before is not None
        secondary.kill("http-1")  # the applier: its claim lapses, the restarted process resumes from the cut
        time.sleep(2.0)
        secondary.kill(_primary_of(secondary, "geokill"))  # the secondary's range fails over
        time.sleep(2.0)
        source.kill(_primary_of(source, "geokill"))  # the source's range fails over under the writes
        time.sleep(3.0)
    finally:
        stop.set()
        writer.join(10)
    theirs = {e["RowKey"]: (e["v"], e.metadata["etag"]) for e in t.list_entities()}
    assert all(theirs[k][0] >= v for k, v in acked.items()), "the source lost an acknowledged write"
    s = sec.get_table_client("geokill")
    _poll(lambda: {e["RowKey"]: (e["v"], e.metadata["etag"]) for e in s.list_entities()}, theirs, timeout=90)
    after = _applier(secondary, "geokill")
    assert before and after and after != before  # another process took the claim over


def test_table_settings_follow_and_a_ttl_is_judged_at_the_cut(pair: tuple[Cluster, Cluster]) -> None:
    """The TTL and the change feed's settings of a source table are the secondary table's too (reserved throughput
    is each cluster's own); an entity past the TTL is hidden at the secondary as at the source."""
    source, secondary = pair
    with _sdk(source) as src:
        src.create_table("geosettings")
        src.get_table_client("geosettings").upsert_entity({"PartitionKey": "p", "RowKey": "r", "v": 1})
    source.admin({"op": "set_table", "table": "geosettings", "settings": {"ttl_s": "2s", "feed_before": "on"}})
    want = {"ttl_s": 2, "feed_before_images": True, "feed": "on"}

    def settings() -> dict:
        got = secondary.admin({"op": "get_table", "table": "geosettings"})
        return {k: got[k] for k in want}

    _poll(settings, want, timeout=30)
    with _sdk(secondary) as sec:
        _poll(lambda: [e["RowKey"] for e in sec.get_table_client("geosettings").list_entities()], [], timeout=30)
