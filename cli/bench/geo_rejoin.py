"""``rangetable bench geo-rejoin``: what a failback costs — an old primary rejoining by a diff against a full copy
(issue 35, ``docs/geo.md``).

Two clusters as ``rangetable up`` starts them, B a secondary of A, a table of ``rows`` entities at A copied to
B. B's appliers stop (SIGSTOP of its HTTP frontends: the link cut) while ``outage`` entities are written again
at A; B is promoted by ``geo failover --force`` (A, reachable, is fenced by B's coordinator at once), and A
rejoins (``geo rejoin``): timed from the rejoin's start to A's first cut of the table, by the diff (its
ledger's keys read at B, then B's feed from the cut), and then again by a full copy (A made a secondary without
cuts: the table cleared and copied whole). Every entity is compared after each.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from cli import geo_failover
from cli.bench.http import server_pids, start_temp_cluster, stop_temp_cluster
from cli.bench.scale import parallel_load
from cli.coordinator_client import call
from cli.geo_cuts import table_row
from rangetable import TableClient

TABLE = "georejoin"
Echo = Callable[[str], None]


def _wait_cut(doc: dict[str, Any], timeout: float) -> float:
    t0 = time.monotonic()
    while (table_row(doc["coordinator"], TABLE, timeout=10) or {}).get("cut") is None:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"no cut of {TABLE} within {timeout:g} s")
        time.sleep(0.1)
    return time.monotonic() - t0


def _differ(a: dict[str, Any], b: dict[str, Any]) -> int:
    def entities(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
        with TableClient(doc["native"], TABLE) as t:
            return {(e["PartitionKey"], e["RowKey"]): e.metadata["etag"] for e in t.list_entities()}

    ours, theirs = entities(a), entities(b)
    return sum(1 for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))


def run_rejoin_bench(rows: int, outage: int, echo: Echo) -> dict[str, Any]:
    """The bench of the module docstring; its figures."""
    from cli.commands.security import follower_keys

    flags = ["--no-dashboard", "--no-metrics"]
    a_dir, a = start_temp_cluster(extra=flags)
    b_dir = ""
    try:
        call(a["coordinator"], {"op": "create_table", "table": TABLE}, timeout=60)
        took = parallel_load(a["native"], TABLE, 0, rows, 2, window=32)
        echo(f"A: {rows:,} entities loaded in {took:.1f} s")
        b_dir, b = start_temp_cluster(extra=[*flags, "--secondary-of", a_dir])
        echo(f"B: a secondary of A, its first copy in {_wait_cut(b, max(120.0, rows / 1000)):.1f} s")
        appliers = server_pids(b, ("http-frontend",))
        for pid in appliers:
            os.kill(pid, signal.SIGSTOP)
        try:
            took = parallel_load(a["native"], TABLE, 0, outage, 1, window=32)
            echo(f"link cut: {outage:,} entities written again at A in {took:.1f} s, none reaching B")
            forced = geo_failover.forced(b, lambda _m: None, a)
        finally:
            for pid in appliers:
                os.kill(pid, signal.SIGCONT)
        echo(f"B promoted at its cut, RPO {forced['rpo_s'][TABLE]:.1f} s")
        t0 = time.monotonic()
        res = geo_failover.rejoin(b, a, follower_keys(b), 60.0, lambda _m: None)
        diff_s = time.monotonic() - t0 + _wait_cut(a, max(300.0, rows / 500))
        diff_bad = _differ(a, b)
        echo(f"A rejoined by the diff in {diff_s:.1f} s (its ledger: {len(res['ledger']):,} changes); "
             f"{diff_bad} entities differ")
        t0 = time.monotonic()
        geo_failover.set_role(a["coordinator"], role="fenced")
        geo_failover.set_role(a["coordinator"], role="secondary", source=res["follow"], cuts={})
        full_s = time.monotonic() - t0 + _wait_cut(a, max(300.0, rows / 500))
        full_bad = _differ(a, b)
        echo(f"A copied whole in {full_s:.1f} s; {full_bad} entities differ")
        return {"rows": rows, "outage": outage, "ledger": len(res["ledger"]), "diff_s": round(diff_s, 2),
                "full_copy_s": round(full_s, 2), "diff_differ": diff_bad, "full_differ": full_bad}
    finally:
        if b_dir:
            stop_temp_cluster(b_dir)
        stop_temp_cluster(a_dir)


def format_result(res: dict[str, Any]) -> str:
    """The bench's last lines."""
    ratio = res["diff_s"] / res["full_copy_s"] if res["full_copy_s"] else 0.0
    return (f"failback of {res['rows']:,} entities after {res['outage']:,} were written at the isolated old "
            f"primary (ledger {res['ledger']:,}):\n  rejoin by the diff  {res['diff_s']:8.1f} s  "
            f"({res['diff_differ']} entities differ after)\n  a full copy        {res['full_copy_s']:8.1f} s  "
            f"({res['full_differ']} entities differ after)\n  the diff takes {ratio:.0%} of a full copy's time")
