"""Failovers between a source cluster and its secondary (issue 35, ``docs/geo.md``, "Failover").

**Planned** (:func:`planned`): the roles swap with nothing lost, in five steps, each a request to one
cluster's coordinator (:mod:`coordinator.geo_roles`), each waited for until in force:

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

**Forced** (:func:`forced`, the source down or cut off): the secondary is promoted at each table's cut at once
(:func:`coordinator.geo_roles.promote_at_cuts`); the RPO is how far the cuts were behind. **Rejoin**
(:func:`rejoin`, once the old source can be reached): it is fenced first — from then on it acknowledges
nothing —, its change feed after each table's cut is read as the **loss ledger** (every write it acknowledged
that the new primary lacks, the outage's included: only committed batches enter a feed), it becomes a secondary
of the new primary and copies every table again; :func:`replay` applies the ledger's lines the operator keeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cli.coordinator_client import call
from rangetable import curve, feed_cursor, feed_page
from rangetable.edm import TICKS_PER_SECOND, now_ticks, ticks_to_iso
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
    return {t: feed_cursor.frontier(feed_cursor.from_wire(call(native, dict(feed_page.request(t, 1, feed_page.NOW)))
                                                          ["cursor"])) for t in tables}


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


def fence(doc: dict[str, Any], wait_s: float, echo: Echo) -> dict[str, Any]:
    """Fence the cluster of ``doc`` (its coordinator and admin key): from the answer on it acknowledges nothing.
    Asked again until it answers, for up to ``wait_s`` seconds; a cluster already fenced, or a secondary (it
    takes no client writes), is left as it is. Each request expects the epoch just read, so a fence that
    arrives late never lands on a role taken since."""
    curve.remember_cluster(doc)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            st = call(doc["coordinator"], {"op": "geo_role"}, timeout=min(5.0, max(0.5, wait_s)))
            if st["role"] != "primary":
                return dict(st)
            call(doc["coordinator"], {"op": "geo_role", "role": "fenced", "expect": st["epoch"]})
            return wait_in_force(doc["coordinator"], int(st["epoch"]) + 1, STEP_TIMEOUT_S)
        except TableError as exc:
            if time.monotonic() > deadline:
                raise
            echo(f"the old source does not answer yet ({exc.error_code}); asking again")
            time.sleep(1.0)


def forced(secondary: dict[str, Any], echo: Echo, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """A forced failover: the secondary of ``secondary`` (its connection document) is promoted at its cuts
    (:func:`coordinator.geo_roles.promote_at_cuts`) without its source; the RPO of each table is how far its cut
    was behind the clock. With ``old`` (the old source's admin connection document) the new primary's
    coordinator fences it as soon as it answers; its loss ledger is read and it rejoins by :func:`rejoin`."""
    curve.remember_cluster(secondary)
    sec = secondary["coordinator"]
    st = call(sec, {"op": "geo_role"})
    if st["role"] != "secondary" and not (st["role"] == "fenced" and st["source"]):  # fenced: a promotion retried
        raise TableError("InvalidInput", f"the cluster to fail over to is {st['role']}, not a secondary")
    t0 = time.time()
    res = dict(call(sec, {"op": "geo_role", "role": "primary", "force": True, "fence": old}, timeout=120.0))
    res.update(wait_in_force(sec, int(res["epoch"]), STEP_TIMEOUT_S))  # its servers take writes now
    now = now_ticks()
    rpo = {t: round((now - c) / TICKS_PER_SECOND, 3) for t, c in res["promoted"].items()}
    for t, c in sorted(res["promoted"].items()):
        echo(f"{t}: promoted at its cut {ticks_to_iso(c)} (RPO {rpo[t]:.3f} s: what the old source acknowledged "
             "after it is in its loss ledger)")
    for t in res["emptied"]:
        echo(f"{t}: had no cut yet (its first copy was under way): emptied")
    echo(f"promoted (geo epoch {res['epoch']}) in {time.time() - t0:.2f} s; {res['restored']} entities went back "
         "to their cut")
    echo(f"the old source {old['coordinator']} is fenced by this cluster as soon as it answers" if old else
         "the old source is not fenced until `rangetable geo rejoin --source OLD` reaches it")
    return {**res, "rpo_s": rpo, "seconds": round(time.time() - t0, 3)}


def read_ledger(old: dict[str, Any], promoted: dict[str, int]) -> list[dict[str, Any]]:
    """What the fenced old source acknowledged after each table's cut: its change feed from there to its end,
    each record a line of the ledger (``{"table", "PartitionKey", "RowKey", "kind", "Timestamp", "entity",
    "before", ...}``, as the change feed's JSON lines)."""
    from rangetable.client.blocking import TableServiceClient

    curve.remember_cluster(old)
    out = []
    with TableServiceClient(old["native"]) as svc:
        for table, at in sorted(promoted.items()):
            t = svc.get_table_client(table)
            try:
                out += [{"table": table, **r.to_json()} for r in t.read_changes(cursor=feed_cursor.encode((at, None)))]
            except TableError as exc:
                if exc.error_code not in ("TableNotFound", "ResourceNotFound"):
                    raise
    return out


def rejoin(primary: dict[str, Any], old: dict[str, Any], register: Callable[[str], dict[str, Any]],
           wait_s: float, echo: Echo) -> dict[str, Any]:
    """After a forced failover to the cluster of ``primary``: fence the old source of ``old`` (both connection
    documents with coordinator and admin key; waiting up to ``wait_s`` for it to answer), read its loss ledger
    (:func:`read_ledger`), and make it a secondary of the new primary that copies only what differs: the keys of
    its ledger, read at the new primary, then the new primary's feed from the cuts. Returns the ledger in
    ``ledger``."""
    curve.remember_cluster(primary)
    st = call(primary["coordinator"], {"op": "geo_role"})
    if st["role"] != "primary" or not st.get("promoted"):
        raise TableError("InvalidInput", "the new primary was not promoted by a forced failover (`geo failover "
                                         "--force`): nothing to rejoin from")
    fenced = fence(old, wait_s, echo)
    echo(f"old source fenced (geo epoch {fenced['epoch']}): it acknowledges nothing from now on")
    ledger = read_ledger(old, st["promoted"])
    per: dict[str, int] = {}
    for r in ledger:
        per[r["table"]] = per.get(r["table"], 0) + 1
    echo(f"loss ledger: {len(ledger)} change(s) the old source acknowledged after the cuts "
         + (", ".join(f"{t} {n}" for t, n in sorted(per.items())) or "(none)"))
    follow = register(f"geo-follower-{st['epoch']}")
    demoted = set_role(old["coordinator"], role="secondary", source=follow, cuts={}, rejoin=st["promoted"])
    echo(f"old source follows the new primary (geo epoch {demoted['epoch']}); it copies what differs from the cuts")
    return {"ledger": ledger, "per_table": per, "follow": follow, "secondary": {"epoch": demoted["epoch"]}}


def replay(native: str, lines: list[dict[str, Any]]) -> int:
    """Apply ledger records at the cluster whose native endpoint is ``native`` (its keys remembered): each
    change's entity put as it was after the change, or deleted; returns how many."""
    from rangetable.rest_json import json_to_typed

    n = 0
    for r in lines:
        if r.get("entity") is not None:
            pk, rk, props = json_to_typed(r["entity"])
            write = {"op": "insert_or_replace", "pk": pk, "rk": rk, "props": props}
        else:
            write = {"op": "delete", "pk": r["PartitionKey"], "rk": r["RowKey"]}
        try:
            call(native, {"op": "write", "table": r["table"], "write": write})
        except TableError as exc:
            if exc.error_code != "ResourceNotFound":  # deleted already
                raise
        n += 1
    return n
