"""A table's change feed on `rangetable up`'s defaults (3 servers, 3 replicas): every kind of change in order,
cursors that resume exactly, a resolved time that holds, the REST extension (``GET /{account}/{Table}/$changes``)
under Shared Key and SAS with the native client's cursors, and one reader's cursor carried across a split, a
move, a merge and the failover of a killed primary while a writer goes on — every acknowledged write exactly
once, per-key order kept."""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import os
import random
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.data.tables import EdmType, EntityProperty, TableSasPermissions, generate_table_sas
from azure.data.tables import TableServiceClient as AzureServiceClient
from click.testing import CliRunner

from cli.commands.observe import scrape, total
from cli.coordinator_client import range_loads
from cli.main import main
from rangetable import TableServiceClient
from rangetable.aio import TableServiceClient as AioService
from rangetable.client.consumer_group import ConsumerGroup
from rangetable.errors import TableError
from tests.cluster import Cluster
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY, Raw, Reply


@pytest.fixture(scope="module")
def cluster(cluster_factory: Any) -> Cluster:
    return cluster_factory(extra=["--no-dashboard"], balancer=False)  # one range per table: the test splits it


def _table(c: Cluster, name: str) -> Any:
    TableServiceClient.from_cluster(c.data_dir).create_table(name)
    return TableServiceClient.from_cluster(c.data_dir).get_table_client(name)


def test_every_kind_of_change_in_order_with_cursors_and_resolved_times(cluster: Cluster) -> None:
    t = _table(cluster, "kinds")
    t.create_entity({"PartitionKey": "p", "RowKey": "a", "v": 1})
    t.upsert_entity({"PartitionKey": "p", "RowKey": "a", "v": 2}, mode="replace")
    t.upsert_entity({"PartitionKey": "p", "RowKey": "a", "w": 3}, mode="merge")
    t.submit_transaction([("create", {"PartitionKey": "q", "RowKey": "1"}), ("create", {"PartitionKey": "q", "RowKey": "2"})])
    t.delete_entity("p", "a")
    pages = list(t.read_changes().by_page())
    records = [r for p in pages for r in p]
    assert [(r.partition_key, r.row_key, r.kind) for r in records] == [
        ("p", "a", "insert"), ("p", "a", "replace"), ("p", "a", "merge"), ("q", "1", "insert"), ("q", "2", "insert"),
        ("p", "a", "delete")]
    assert records[2].entity is not None and records[2].entity["v"] == 2 and records[2].entity["w"] == 3
    assert records[3].timestamp == records[4].timestamp  # a transaction: one Timestamp
    assert records[-1].entity is None and pages[-1].resolved is not None
    assert pages[-1].resolved >= records[-1].timestamp
    # resuming from any record's cursor gives exactly what followed it
    for i, r in enumerate(records):
        assert [x.cursor for x in t.read_changes(cursor=r.cursor)] == [x.cursor for x in records[i + 1:]]
    now = list(t.read_changes(start="now").by_page())
    assert now[-1].records == [] and now[-1].resolved is not None
    t.create_entity({"PartitionKey": "p", "RowKey": "z"})
    assert [r.row_key for r in t.read_changes(cursor=now[-1].cursor)] == ["z"]
    # resolved times never move backwards, idle table included
    seen = []
    t0 = time.monotonic()
    for page in t.read_changes(cursor=now[-1].cursor, follow=True, poll_interval=0.05).by_page():
        seen.append((time.monotonic() - t0, page.resolved_ticks))
        if seen[-1][0] > 2.0:
            break
    stamps = [r for _, r in seen]
    assert all(a <= b for a, b in zip(stamps, stamps[1:], strict=False))
    moved = [at for (at, r), (_, prev) in zip(seen[1:], seen, strict=False) if r > prev]
    assert len(moved) >= 2 and all(b - a < 1.0 for a, b in zip([0.0, *moved], moved, strict=False)), seen  # ≥ once a second


def test_a_table_with_the_feed_off_says_so_and_one_turned_on_again_reports_the_gap(cluster: Cluster) -> None:
    t = _table(cluster, "switch")
    t.create_entity({"PartitionKey": "p", "RowKey": "a"})
    cursor = list(t.read_changes().by_page())[-1].cursor
    t.set_table_settings(feed="off")
    with pytest.raises(TableError) as e:
        list(t.read_changes())
    assert e.value.error_code == "FeedDisabled"
    t.create_entity({"PartitionKey": "p", "RowKey": "b"})  # while off: not in the feed
    t.set_table_settings(feed="on")
    with pytest.raises(TableError) as e:
        list(t.read_changes(cursor=cursor))
    assert e.value.error_code == "FeedTrimmed" and e.value.status_code == 410
    t.create_entity({"PartitionKey": "p", "RowKey": "c"})
    assert [r.row_key for r in t.read_changes()] == ["c"]
    assert t.get_table_settings()["feed"] == "on"


def _lines(reply: Reply) -> list[dict]:
    assert reply.status == 200, reply
    assert reply.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in reply.body.decode().splitlines()]
    assert set(lines[-1]) == {"cursor", "resolved"} and reply.headers["x-ms-continuation-cursor"] == lines[-1]["cursor"]
    return lines


def _sas(table: str, permission: TableSasPermissions, **kw: Any) -> str:
    return generate_table_sas(AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY), table, permission=permission,
                              expiry=datetime.now(UTC) + timedelta(hours=1), **kw)


def test_the_rest_extension_reads_the_feed_under_shared_key_and_sas(cluster: Cluster, raw: Raw) -> None:
    with AzureServiceClient.from_connection_string(cluster.connection_string) as svc:
        sdk = svc.create_table("restfeed")
        sdk.create_entity({"PartitionKey": "p", "RowKey": "a", "n": 1, "big": EntityProperty(2**40, EdmType.INT64),
                           "when": datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)})
        sdk.upsert_entity({"PartitionKey": "p", "RowKey": "a", "m": "x"}, mode="merge")
        sdk.create_entity({"PartitionKey": "q", "RowKey": "b"})
        sdk.delete_entity("p", "a")
        lines = _lines(raw.get("/restfeed/$changes"))
        records, end = lines[:-1], lines[-1]
        assert [(r["PartitionKey"], r["RowKey"], r["kind"]) for r in records] == [
            ("p", "a", "insert"), ("p", "a", "merge"), ("q", "b", "insert"), ("p", "a", "delete")]
        first = records[0]["entity"]
        assert (first["n"], first["big@odata.type"], first["big"]) == (1, "Edm.Int64", str(2**40))
        assert (first["when@odata.type"], first["when"]) == ("Edm.DateTime", "2020-01-02T03:04:05Z")
        assert records[1]["entity"]["m"] == "x" and records[1]["entity"]["n"] == 1 and records[3]["entity"] is None
        assert end["resolved"] is not None and end["resolved"] >= records[-1]["Timestamp"]
        # the same records, cursors included, as the native client reads them: a cursor moves between interfaces
        native = TableServiceClient.from_cluster(cluster.data_dir).get_table_client("restfeed")
        assert [r.to_json() for r in native.read_changes()] == records
        assert [r.row_key for r in native.read_changes(cursor=records[1]["cursor"])] == ["b", "a"]
        assert [r["RowKey"] for r in _lines(raw.get(f"/restfeed/$changes?cursor={records[1]['cursor']}"))[:-1]] == ["b", "a"]
        # page by page with top: a page that stops short of the live edge has no resolved time
        page = _lines(raw.get("/restfeed/$changes?top=3"))
        assert page[:-1] == records[:3] and page[-1]["resolved"] is None
        assert _lines(raw.get(f"/restfeed/$changes?top=3&cursor={page[-1]['cursor']}"))[:-1] == records[3:]
        # from now: no record, then what was written after
        now = _lines(raw.get("/restfeed/$changes?from=now"))
        assert len(now) == 1 and now[0]["resolved"] is not None
        sdk.create_entity({"PartitionKey": "p", "RowKey": "z"})
        later = _lines(raw.get(f"/restfeed/$changes?cursor={now[0]['cursor']}"))
        assert [r["RowKey"] for r in later[:-1]] == ["z"]
        # from a time: the changes at or after it (quoted: the offset's "+" would be a space)
        at = quote(records[2]["Timestamp"].replace("Z", "+00:00"))
        assert [r["RowKey"] for r in _lines(raw.get(f"/restfeed/$changes?from={at}"))[:-1]] == ["b", "a", "z"]

        # a SAS with read permission, no other credential; one without it, or for another table, is refused
        ok = raw.get(f"/restfeed/$changes?{_sas('restfeed', TableSasPermissions(read=True))}", sign_as=None)
        assert _lines(ok)[:-1] == _lines(raw.get("/restfeed/$changes"))[:-1]
        ranged = raw.get(f"/restfeed/$changes?{_sas('restfeed', TableSasPermissions(read=True), start_pk='q', end_pk='q')}",
                         sign_as=None)
        assert [r["RowKey"] for r in _lines(ranged)[:-1]] == ["b"]  # a key range sees only its keys' records
        add_only = raw.get(f"/restfeed/$changes?{_sas('restfeed', TableSasPermissions(add=True))}", sign_as=None)
        assert (add_only.status, add_only.code) == (403, "AuthorizationPermissionMismatch")
        other = raw.get(f"/restfeed/$changes?{_sas('kinds', TableSasPermissions(read=True))}", sign_as=None)
        assert other.status == 403
        # a request as curl sends it, with no credential at all
        u = urlsplit(cluster.http)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", f"{u.path}/restfeed/$changes", headers={"User-Agent": "curl/8.5.0", "Accept": "*/*"})
        bare = conn.getresponse()
        assert (bare.status, bare.getheader("x-ms-error-code")) == (403, "AuthenticationFailed"), bare.read()
        conn.close()

        # typed errors
        for query in ("from=yesterday", "cursor=nope", "top=0", "top=10001"):
            bad = raw.get(f"/restfeed/$changes?{query}")
            assert (bad.status, bad.code) == (400, "InvalidQueryParameterValue"), (query, bad)
            assert bad.json()["odata.error"]["code"] == "InvalidQueryParameterValue"
        missing = raw.get("/nosuchtable/$changes")
        assert (missing.status, missing.code) == (404, "TableNotFound")
        cursor = _lines(raw.get("/restfeed/$changes"))[-1]["cursor"]
        native.set_table_settings(feed="off")
        off = raw.get("/restfeed/$changes")
        assert (off.status, off.code) == (409, "FeedDisabled")
        sdk.create_entity({"PartitionKey": "p", "RowKey": "while-off"})  # not in the feed: a gap
        native.set_table_settings(feed="on")
        trimmed = raw.get(f"/restfeed/$changes?cursor={cursor}")
        assert (trimmed.status, trimmed.code) == (410, "FeedTrimmed")
        native.close()


class Writer(threading.Thread):
    """Upserts ``n`` = 0, 1, 2 … over 40 keys in 8 partitions and remembers what was acknowledged."""

    def __init__(self, data_dir: str, table: str) -> None:
        super().__init__(daemon=True)
        self.client = TableServiceClient.from_cluster(data_dir).get_table_client(table)
        self.acked: list[tuple[str, str, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            pk, rk = f"p{i % 8}", f"k{i % 40}"
            try:
                self.client.upsert_entity({"PartitionKey": pk, "RowKey": rk, "n": i})
                self.acked.append((pk, rk, i))
            except Exception:  # an unknown outcome: it may or may not be in the feed, once at most
                pass
            i += 1
            time.sleep(0.002)


class Reader(threading.Thread):
    """Follows the feed, starting a new client from its last saved cursor at random points (a reader that
    restarts), and keeps every record and every resolved time it saw, in order."""

    def __init__(self, data_dir: str, table: str) -> None:
        super().__init__(daemon=True)
        self.data_dir = data_dir
        self.table = table
        self.records: list[Any] = []
        self.resolved: list[tuple[int, Any]] = []  # (records seen before it, resolved time)
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.restarts = 0

    def run(self) -> None:
        cursor: str | None = None
        rng = random.Random(7)
        while not self.stop.is_set():
            client = TableServiceClient.from_cluster(self.data_dir).get_table_client(self.table)
            try:
                for page in client.read_changes(cursor=cursor, follow=True).by_page():
                    self.records.extend(page.records)
                    if page.resolved is not None:
                        self.resolved.append((len(self.records), page.resolved))
                    cursor = page.cursor
                    if self.stop.is_set() or rng.random() < 0.05:
                        break
            except TableError as exc:
                self.errors.append(f"{exc.error_code}: {exc.message}")
                time.sleep(0.1)
            self.restarts += 1


def test_one_cursor_across_a_split_a_move_a_merge_and_a_failover(cluster: Cluster) -> None:
    c = cluster
    _table(c, "journey")
    w = Writer(c.data_dir, "journey")
    r = Reader(c.data_dir, "journey")
    w.start()
    r.start()
    time.sleep(1.5)
    (rec,) = [x for x in c.status()["ranges"] if x["table"] == "journey"]
    halves = c.admin({"op": "split", "range": rec["id"], "key": "p4"}, timeout=60)
    time.sleep(1.5)
    right = next(x for x in c.status()["ranges"] if x["id"] == halves["right"])
    target = next(s for s in right["replicas"] if s != right["primary"])
    c.admin({"op": "move", "range": halves["right"], "server": target}, timeout=60)
    time.sleep(1.5)
    c.admin({"op": "merge", "range": halves["left"]}, timeout=60)
    time.sleep(1.5)
    (merged,) = [x for x in c.status()["ranges"] if x["table"] == "journey"]
    c.kill(merged["primary"])
    c.wait(lambda: [x for x in c.status()["ranges"] if x["table"] == "journey"][0]["epoch"] > merged["epoch"],
           timeout=30, what="a new primary of the merged range")
    time.sleep(2)
    w.stop.set()
    w.join(30)
    deadline = time.monotonic() + 30
    last = w.acked[-1]
    while time.monotonic() < deadline and not any(
            (x.partition_key, x.row_key, x.entity and x.entity["n"]) == last for x in r.records):
        time.sleep(0.2)
    r.stop.set()
    r.join(30)
    assert len(w.acked) > 300, len(w.acked)
    seen = [(x.partition_key, x.row_key, x.entity["n"]) for x in r.records]
    lost = set(w.acked) - set(seen)
    twice = len(seen) - len(set(seen))
    assert not lost, f"{len(lost)} acknowledged writes missing from the feed, e.g. {sorted(lost)[:3]}"
    assert twice == 0, f"{twice} records seen twice"
    by_key: dict[tuple[str, str], int] = {}
    for pk, rk, n in seen:
        assert n > by_key.get((pk, rk), -1), f"{pk}/{rk}: {n} after {by_key[(pk, rk)]}"
        by_key[(pk, rk)] = n
    stamps = [x.timestamp for x in r.records]
    assert stamps == sorted(stamps)
    for count, resolved in r.resolved:
        late = [x for x in r.records[count:] if x.timestamp <= resolved]
        assert not late, f"a change at {late[0].timestamp} after resolved {resolved}"
    assert all(a <= b for (_, a), (_, b) in zip(r.resolved, r.resolved[1:], strict=False))
    print(f"feed across split, move, merge, failover: {len(w.acked)} acknowledged, {len(seen)} records, 0 lost, "
          f"0 twice, {len(r.resolved)} resolved times, {r.restarts} reader restarts, errors {r.errors[:3]}")


class Member(threading.Thread):
    """A consumer group member on its own client, keeping what it read (with a global arrival number); ``stop``
    leaves the group (its spans handed over), ``kill`` just stops reading (its claims run out)."""

    arrivals = itertools.count()

    def __init__(self, data_dir: str, table: str, name: str) -> None:
        super().__init__(daemon=True)
        self.group = ConsumerGroup(TableServiceClient.from_cluster(data_dir), table, "g1", member=name, lease_s=2.0,
                                   heartbeat_s=0.3)
        self.got: list[tuple[int, str, str, str, int]] = []  # (arrival, member, pk, rk, n)
        self.leave = threading.Event()
        self.dead = threading.Event()

    def run(self) -> None:
        for page in self.group.pages():
            if self.dead.is_set():
                return
            for r in page.records:
                self.got.append((next(self.arrivals), self.group.member, r.partition_key, r.row_key, r.entity["n"]))
            if self.leave.is_set():
                self.group.close()
                return


def test_a_consumer_group_shares_the_spans_and_hands_them_over(cluster: Cluster) -> None:
    c = cluster
    _table(c, "grouped")
    (rec,) = [x for x in c.status()["ranges"] if x["table"] == "grouped"]
    halves = c.admin({"op": "split", "range": rec["id"], "key": "p4"}, timeout=60)
    w = Writer(c.data_dir, "grouped")
    a, b = Member(c.data_dir, "grouped", "a"), Member(c.data_dir, "grouped", "b")
    w.start()
    a.start()
    b.start()
    c.wait(lambda: len(a.group.owned) == 1 and len(b.group.owned) == 1, timeout=20, what="a and b own a span each")
    time.sleep(1)
    c.admin({"op": "split", "range": halves["right"], "key": "p6"}, timeout=60)  # b's or a's span splits
    c.wait(lambda: len(a.group.owned) + len(b.group.owned) == 3, timeout=20, what="three spans after the split")
    time.sleep(1)
    b.leave.set()  # a graceful leave: a takes b's spans from b's last checkpoint
    b.join(20)
    c.wait(lambda: len(a.group.owned) == 3, timeout=20, what="a owns every span after b left")
    d = Member(c.data_dir, "grouped", "d")
    d.start()
    c.wait(lambda: len(d.group.owned) >= 1, timeout=20, what="d claimed its share")
    time.sleep(1)
    d.dead.set()  # d dies holding claims: they run out and a takes them back
    c.wait(lambda: len(a.group.owned) == 3, timeout=20, what="a owns every span after d died")
    time.sleep(1)
    w.stop.set()
    w.join(30)
    members = (a, b, d)
    c.wait(lambda: set(w.acked) <= {(pk, rk, n) for m in members for _, _, pk, rk, n in m.got}, timeout=30,
           what="every acknowledged write read by some member")
    a.leave.set()
    a.join(20)
    got = sorted(x for m in members for x in m.got)
    seen = [(pk, rk, n) for _, _, pk, rk, n in got]
    first: dict[tuple[str, str], list[int]] = {}
    for pk, rk, n in dict.fromkeys(seen):  # each record at its first arrival
        first.setdefault((pk, rk), []).append(n)
    assert all(ns == sorted(ns) for ns in first.values()), "per-key order broken across members"
    again = len(seen) - len(set(seen))
    print(f"consumer group: {len(w.acked)} acknowledged, {len(set(seen))} distinct records, {again} read again "
          f"(after d died holding claims), a {len(a.got)}, b {len(b.got)}, d {len(d.got)}")


def test_the_cli_prints_changes_as_json_lines_and_resumes_from_a_cursor(cluster: Cluster) -> None:
    t = _table(cluster, "printed")
    t.create_entity({"PartitionKey": "p", "RowKey": "a", "qty": 3})
    t.delete_entity("p", "a")
    run = CliRunner().invoke(main, ["changes", "printed", "--json", "--data-dir", cluster.data_dir])
    assert run.exit_code == 0, run.output + run.stderr
    lines = [json.loads(x) for x in run.stdout.splitlines()]
    assert [(x["kind"], x["RowKey"]) for x in lines[:2]] == [("insert", "a"), ("delete", "a")]
    assert lines[0]["entity"]["qty"] == 3 and lines[1]["entity"] is None
    assert "resolved" in lines[-1] and "resume with --cursor" in run.stderr
    t.create_entity({"PartitionKey": "p", "RowKey": "b"})
    again = CliRunner().invoke(main, ["changes", "printed", "--cursor", lines[-1]["cursor"],
                                                      "--data-dir", cluster.data_dir])
    assert again.exit_code == 0 and again.stdout.count("\n") == 1 and "insert   p/b" in again.stdout
    bad = CliRunner().invoke(main, ["changes", "printed", "--from", "yesterday",
                                                    "--data-dir", cluster.data_dir])
    assert bad.exit_code != 0 and "--from" in bad.stderr


def test_the_feed_size_is_shown_in_ranges_and_metrics(cluster: Cluster) -> None:
    t = _table(cluster, "sized")
    t.upsert_entities([{"PartitionKey": f"p{i % 4}", "RowKey": f"{i:04d}", "v": "x" * 100} for i in range(400)])
    doc = cluster.refresh()
    urls = {p["id"]: p["metrics"] for p in doc["processes"]}

    def shown() -> bool:
        loads = range_loads(cluster.status())
        rids = [r["id"] for r in cluster.status()["ranges"] if r["table"] == "sized"]
        feed = sum(loads.get(rid, {}).get("feed_records", 0) for rid in rids)
        return feed == 400 and total(scrape(urls["coordinator"]), "rangetable_table_feed_records", table="sized") == 400

    cluster.wait(shown, timeout=20, what="the feed's 400 records in the load reports and the coordinator's metrics")
    out = CliRunner().invoke(main, ["ranges", "sized", "--data-dir", cluster.data_dir])
    assert out.exit_code == 0 and " feed " in out.stdout.splitlines()[1]
    assert total(scrape(urls["coordinator"]), "rangetable_table_feed_bytes", table="sized") > 400 * 100


def test_the_asyncio_client_reads_the_same_feed(cluster: Cluster) -> None:
    blocking = _table(cluster, "asyncfed")
    for i in range(5):
        blocking.upsert_entity({"PartitionKey": "p", "RowKey": f"{i}", "n": i})
    want = [r.cursor for r in blocking.read_changes()]

    async def read() -> tuple[list[str], list[Any]]:
        async with AioService(cluster.native) as service:
            table = service.get_table_client("asyncfed")
            cursors = [r.cursor async for r in table.read_changes()]
            pages = [p async for p in table.read_changes(cursor=cursors[1]).by_page()]
            return cursors, pages

    cursors, pages = asyncio.run(read())
    assert cursors == want
    assert [r.cursor for p in pages for r in p] == want[2:] and pages[-1].resolved is not None


def test_a_replica_rebuilt_after_its_disk_was_lost_serves_the_whole_feed(cluster: Cluster) -> None:
    t = _table(cluster, "rebuilt")
    t.upsert_entities([{"PartitionKey": f"p{i % 5}", "RowKey": f"{i:04d}", "n": i} for i in range(300)])
    want = [r.cursor for r in t.read_changes()]
    (rec,) = [x for x in cluster.status()["ranges"] if x["table"] == "rebuilt"]
    victim = next(s for s in rec["replicas"] if s != rec["primary"])
    old = cluster.kill(victim)
    shutil.rmtree(os.path.join(cluster.data_dir, "servers", victim, "ranges", rec["id"]), ignore_errors=True)
    cluster.wait(lambda: cluster.pid(victim) != old, timeout=30, what=f"{victim} restarted by the supervisor")

    def moved() -> bool:  # once the rebuilt copy has caught up, the primary moves to it
        try:
            cluster.admin({"op": "move", "range": rec["id"], "server": victim}, timeout=60)
            return True
        except TableError:
            return False

    cluster.wait(moved, timeout=90, what=f"{victim} rebuilt, in sync and primary")
    (now,) = [x for x in cluster.status()["ranges"] if x["table"] == "rebuilt"]
    assert now["primary"] == victim
    assert [r.cursor for r in t.read_changes()] == want
