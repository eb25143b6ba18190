"""A planned failover and back (issue 35, ``docs/geo.md``, "Failover") on real processes: two clusters as
`rangetable up` starts them (3 servers, 3 replicas each), the second started with ``--secondary-of`` the first's
data dir. Under writes of the unchanged Azure SDK, `rangetable geo failover --planned` makes the secondary the
primary: every write the source acknowledged is there with its ETag, the source refuses writes from the moment it
is fenced, and then follows the new primary without a copy; a second failover brings the roles back."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rangetable.edm import ticks_from_etag
from tests.cluster import Cluster
from tests.rest_helpers import DEV_ACCOUNT, DEV_KEY
from tests.tcp_link import Link

tables = pytest.importorskip("azure.data.tables")
from azure.core.credentials import AzureNamedKeyCredential  # noqa: E402
from azure.core.exceptions import HttpResponseError  # noqa: E402

CRED = AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY)
TABLE = "geofail"


@pytest.fixture(scope="module")
def linked(cluster_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Cluster, Any]]:
    """A source and a secondary started with `--secondary-of` a copy of its cluster.json whose native endpoint and
    coordinator are reached through links the test can cut (:class:`tests.tcp_link.Link`), and that file."""
    source = cluster_factory(extra=["--no-dashboard"])
    native, coordinator = Link(source.native), Link(source.coordinator)
    doc = {**source.doc, "native": native.endpoint, "frontends": [native.endpoint],
           "coordinator": coordinator.endpoint}
    doc.pop("data_dir", None)
    path = tmp_path_factory.mktemp("geolink") / "source-over-the-link.json"
    path.write_text(json.dumps(doc))
    try:
        secondary = cluster_factory(extra=["--no-dashboard", "--secondary-of", str(path)])
        yield source, secondary, (native, coordinator, str(path))
    finally:
        native.close()
        coordinator.close()


def _rangetable(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "cli.main", *args, "--json"], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return dict(json.loads(out.stdout))


def _cut(c: Cluster) -> int | None:
    """The table's cut at secondary ``c`` (None before it has one)."""
    rows = [r for r in _rangetable("geo", "status", "--data-dir", c.data_dir)["tables"] if r["table"] == TABLE]
    return rows[0]["cut"] if rows else None


def _entities(c: Cluster) -> dict[str, tuple[Any, str]]:
    with tables.TableClient(c.http, TABLE, credential=CRED) as t:
        return {e["RowKey"]: (e.get("n"), e.metadata["etag"]) for e in t.list_entities()}


class History:
    """Upserts rows ``h<k % 50>`` with ``n = k`` back to back at the table at ``url``, keeping every acknowledged
    write in order: (RowKey, n, its Timestamp in ticks)."""

    def __init__(self, url: str) -> None:
        self.client = tables.TableClient(url, TABLE, credential=CRED)
        self.acked: list[tuple[str, int, int]] = []
        self.refused: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        k = 0
        while not self.stop.is_set():
            k += 1
            row = f"h{k % 50:03d}"
            try:
                got = self.client.upsert_entity({"PartitionKey": "h", "RowKey": row, "n": k})
                self.acked.append((row, k, ticks_from_etag(got["etag"])))
            except HttpResponseError as e:
                self.refused.append(str(getattr(e.error_code, "value", e.error_code)))
                time.sleep(0.02)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.client.close()


def _wait(fn: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    t0 = time.monotonic()
    last: Any = None
    while time.monotonic() - t0 < timeout:
        try:
            last = fn()
            if last:
                return last
        except (HttpResponseError, AssertionError) as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout} s ({last!r})")


def _fail_over(to: Cluster, other: Cluster) -> None:
    """A planned failover to ``to`` under writes at ``other`` (its source): every acknowledged write arrives, the
    old source refuses writes from then on and follows ``to``."""
    history = History(other.http)
    try:
        _wait(lambda: len(history.acked) > 50, what="writes acknowledged at the source")
        res = _rangetable("geo", "failover", "--planned", "--data-dir", to.data_dir, "--source", other.data_dir)
        assert res["primary"]["epoch"] >= 1 and TABLE in res["tables"], res
        n = len(history.refused)
        _wait(lambda: len(history.refused) > n + 3, what="writes refused at the old source")
    finally:
        history.close()
    assert set(history.refused) == {"InsufficientAccountPermissions"}, set(history.refused)
    ours = {r: (v[0], ticks_from_etag(v[1])) for r, v in _entities(to).items()}
    last = {row: (k, ts) for row, k, ts in history.acked}  # each row's last acknowledged write, its ETag's time
    missing = {row: v for row, v in last.items() if ours.get(row) != v}
    assert not missing, f"acknowledged at the old source, not at the new primary: {sorted(missing.items())[:5]}"
    assert _rangetable("geo", "status", "--data-dir", to.data_dir)["role"] == "primary"
    assert _rangetable("geo", "status", "--data-dir", other.data_dir)["role"] == "secondary"
    assert _cut(other) is not None  # at once: it follows from the drain point, without a copy


def _rows(c: Cluster) -> dict[str, int]:
    return {r: v[0] for r, v in _entities(c).items() if r.startswith("h")}


def test_forced_failover_fences_the_old_source_and_lists_every_write_it_acknowledged_after_the_cut(
        linked: tuple[Cluster, Cluster, Any], tmp_path: Any) -> None:
    source, secondary, (native, coordinator, over_link) = linked
    with tables.TableServiceClient(source.http, credential=CRED) as svc:
        svc.create_table(TABLE)
    history = History(source.http)
    try:
        _wait(lambda: len(history.acked) > 100, what="writes acknowledged at the source")
        _wait(lambda: (_cut(secondary) or 0) > history.acked[50][2], what="the secondary following")
        native.cut()  # the link between the clusters: the secondary reads the source, and would fence it, through it
        coordinator.cut()
        n = len(history.acked)
        _wait(lambda: len(history.acked) > n + 100, what="writes acknowledged while cut off")
        res = _rangetable("geo", "failover", "--force", "--data-dir", secondary.data_dir, "--source", over_link)
        n = len(history.acked)
        _wait(lambda: len(history.acked) > n + 30, what="the isolated old source acknowledging on")
        assert _rangetable("geo", "status", "--data-dir", source.data_dir)["role"] == "primary"
        native.heal()
        coordinator.heal()  # the new primary's coordinator fences the old source as soon as it answers
        _wait(lambda: _rangetable("geo", "status", "--data-dir", source.data_dir)["role"] == "fenced",
              what="the old source fenced by the new primary")
        n = len(history.refused)
        _wait(lambda: len(history.refused) > n + 3, what="writes refused at the fenced old source")
        ledger = tmp_path / "ledger.jsonl"
        got = _rangetable("geo", "rejoin", "--data-dir", secondary.data_dir, "--source", source.data_dir,
                          "--ledger", str(ledger))
    finally:
        history.close()
    assert _rangetable("geo", "status", "--data-dir", secondary.data_dir)["fence"]["done"] is True
    cut = res["promoted"][TABLE]
    at_cut: dict[str, int] = {}
    for row, k, ts in history.acked:
        if ts <= cut:
            at_cut[row] = k
    assert _rows(secondary) == at_cut  # the new primary holds the source's state at its cut, nothing after
    after = [(row, k) for row, k, ts in history.acked if ts > cut]
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(r["RowKey"], r["entity"]["n"]) for r in lines] == after, "the ledger is every acknowledged write " \
                                                                      "after the cut, in order"
    assert got["per_table"] == {TABLE: len(after)} and len(after) > 100
    assert _rangetable("geo", "status", "--data-dir", source.data_dir)["role"] == "secondary"
    with tables.TableClient(source.http, TABLE, credential=CRED) as t:
        with pytest.raises(HttpResponseError) as e:
            t.upsert_entity({"PartitionKey": "h", "RowKey": "late", "n": 0})
        assert e.value.status_code == 403  # fenced, then a secondary: it acknowledges nothing more
    _wait(lambda: _entities(source) == _entities(secondary), timeout=60,
          what="the old source copying what differs from the new primary")

    assert _rangetable("geo", "replay", str(ledger), "--data-dir", secondary.data_dir)["replayed"] == len(after)
    last = {row: k for row, k in after}
    assert _rows(secondary) == {**at_cut, **last}


def test_planned_failover_and_back(linked: tuple[Cluster, Cluster, Any]) -> None:
    a, b, _ = linked
    source, secondary = (a, b) if _rangetable("geo", "status", "--data-dir", a.data_dir)["role"] == "primary" \
        else (b, a)  # after the forced failover, the roles are swapped
    _wait(lambda: _cut(secondary), what="the secondary's cut")

    _fail_over(secondary, source)
    with tables.TableClient(secondary.http, TABLE, credential=CRED) as t:  # the new primary
        t.upsert_entity({"PartitionKey": "q", "RowKey": "after", "n": 1})
        want = _entities(secondary)
    _wait(lambda: _entities(source) == want, what="the old source following the new primary")

    _fail_over(source, secondary)  # and back
    with tables.TableClient(source.http, TABLE, credential=CRED) as t:
        t.upsert_entity({"PartitionKey": "q", "RowKey": "back", "n": 2})
        want = _entities(source)
    _wait(lambda: _entities(secondary) == want, what="the first secondary following again")


