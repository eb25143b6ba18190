"""A planned failover between a source cluster and its secondary (issue 35, ``docs/geo.md``, "Failover").

The roles swap with nothing lost, in five steps, each a request to one cluster's coordinator
(:mod:`coordinator.geo_roles`), each waited for until in force:

1. the source is **fenced**: its partition servers take no write from the moment their next lease says so, and
   the step is done once every live one echoed it (a server that cannot be reached stops serving when its lease
   runs out, before it could be declared dead), so from then on nothing is acknowledged there;
2. the **drain point** of each table is read at the source: the frontier of its change feed now, which every
   change it acknowledged lies at or below (only committed batches enter the feed);
3. the secondary's cut of every table reaches its drain point (its appliers apply the last pages), so it holds
   exactly what the source acknowledged;
4. the secondary becomes the **primary**: its appliers stop (their claims end, and its partition servers refuse
   what a late one still sends), it reads now and takes writes;
5. the old source becomes a **secondary of the new primary at the drain points**: it holds the new primary's
   state there, so its appliers follow the new primary's feed from there, without a copy, under a client key
   registered at the new primary for it.

A source that cannot be fenced, or a secondary that does not catch up in time, ends the failover before step
4 with the source a primary again (writes were refused meanwhile, none lost). The writes refused are those sent
between step 1 and the new primary's frontends hearing step 4: the time the failover prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cli.coordinator_client import call
from rangetable import curve, feed_cursor, feed_page
from rangetable.errors import TableError

Echo = Callable[[str], None]
STEP_TIMEOUT_S = 30.0  # a role change in force, at most
CATCH_UP_TIMEOUT_S = 120.0  # the secondary's cuts at the drain points, at most


def wait_in_force(endpoint: str, epoch: int, timeout: float) -> dict[str, Any]:
    """Poll ``geo_role`` at ``endpoint`` until its role of ``epoch`` or later is in force; TableError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        st = call(endpoint, {"op": "geo_role"})
        if st["epoch"] >= epoch and st["in_force"]:
            return dict(st)
        if time.monotonic() > deadline:
            raise TableError("OperationTimedOut", f"the geo role of epoch {epoch} is not in force after {timeout:g} s: "
                                                  f"servers {', '.join(st['waiting'])} have not confirmed it")
        time.sleep(0.1)


def set_role(endpoint: str, timeout: float = STEP_TIMEOUT_S, **change: Any) -> dict[str, Any]:
    """Ask ``endpoint``'s coordinator to take a role and wait until it is in force."""
    st = call(endpoint, {"op": "geo_role", **change}, timeout=timeout)
    return wait_in_force(endpoint, int(st["epoch"]), timeout)


def drain_points(native: str, tables: list[str]) -> dict[str, int]:
    """Each table's feed frontier now at the source reached through ``native``: every change acknowledged there
    lies at or below it."""
    out = {}
    for t in tables:
        ts, key = feed_cursor.from_wire(call(native, dict(feed_page.request(t, 1, feed_page.NOW)))["cursor"])
        out[t] = ts if key is None else ts - 1
    return out


def wait_caught_up(endpoint: str, points: dict[str, int], timeout: float, echo: Echo) -> float:
    """Poll the secondary's ``geo_status`` until every table's cut is at or past its drain point; the seconds
    waited. TableError after ``timeout``, naming the tables behind."""
    t0 = time.monotonic()
    while True:
        rows = {r["table"].lower(): r["cut"] for r in call(endpoint, {"op": "geo_status"})["tables"]}
        behind = sorted(t for t, at in points.items() if rows.get(t.lower()) is None or rows[t.lower()] < at)
        if not behind:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TableError("OperationTimedOut", f"the secondary has not reached the source's drain point of "
                                                  f"{', '.join(behind)} after {timeout:g} s")
        time.sleep(0.1)


def planned(source: dict[str, Any], secondary: dict[str, Any], register: Callable[[str], dict[str, Any]],
            echo: Echo, catch_up_timeout: float = CATCH_UP_TIMEOUT_S) -> dict[str, Any]:
    """The planned failover of the module docstring, from the connection documents of both clusters (each with
    its coordinator and admin key); ``register(name)`` registers a client key at the secondary and returns its
    connection document (the old source follows with it). Returns what happened, timed, and in ``follow`` that
document."""
    curve.remember_cluster(source)
    curve.remember_cluster(secondary)
    src, sec = source["coordinator"], secondary["coordinator"]
    st = call(sec, {"op": "geo_role"})
    if st["role"] != "secondary":
        raise TableError("InvalidInput", f"the cluster to fail over to is {st['role']}, not a secondary")
    if call(src, {"op": "geo_role"})["role"] != "primary":
        raise TableError("InvalidInput", "the source cluster is not a primary")
    t0 = time.monotonic()
    fenced = set_role(src, role="fenced")
    echo(f"source fenced (geo epoch {fenced['epoch']}): it takes no writes; {time.monotonic() - t0:.2f} s")
    try:
        tables = list(call(src, {"op": "list_tables"})["tables"])
        points = drain_points(source["native"], tables)
        waited = wait_caught_up(sec, points, catch_up_timeout, echo)
    except TableError:
        set_role(src, role="primary")
        echo("failover abandoned: the source is a primary again (it refused writes meanwhile; none was lost)")
        raise
    echo(f"secondary at the source's drain point of {len(points)} table(s) after {waited:.2f} s")
    promoted = set_role(sec, role="primary")
    swapped = time.monotonic() - t0
    echo(f"secondary promoted (geo epoch {promoted['epoch']}): it takes writes; {swapped:.2f} s without writes")
    follow = register(f"geo-follower-{promoted['epoch']}")
    demoted = set_role(src, role="secondary", source=follow, cuts=points)
    echo(f"old source follows the new primary from the drain points (geo epoch {demoted['epoch']})")
    return {"tables": {t: points[t] for t in tables}, "follow": follow, "caught_up_s": round(waited, 3),
            "writes_refused_s": round(swapped, 3), "seconds": round(time.monotonic() - t0, 3),
            "primary": {"coordinator": sec, "epoch": promoted["epoch"]},
            "secondary": {"coordinator": src, "epoch": demoted["epoch"]}}
