"""``rangetable geo``: a secondary cluster that follows another (issue 35, ``docs/geo.md``).

``geo status`` shows, per table of the secondary, the cut its reads are answered at, how far that is behind the
source (the RPO a failover at this moment would have) and which frontend applies it; ``geo failover --planned``
swaps the roles of a secondary and its source (:mod:`cli.geo_failover`).
"""

from __future__ import annotations

import json
import os

import click

from cli import geo_failover
from cli.cluster_file import CLUSTER_FILE, SOURCE_FILE
from cli.coordinator_client import call
from cli.geo_failover import CATCH_UP_TIMEOUT_S
from cli.options import coordinator_endpoint, coordinator_option, data_dir_option, emit, json_option
from rangetable.edm import ticks_to_iso
from rangetable.errors import TableError
from rangetable.files import write_json_atomic


@click.group("geo")
def geo_group() -> None:
    """A secondary cluster following another (start one with `rangetable up --secondary-of`)."""


def render(st: dict) -> str:
    """The table ``geo status`` prints."""
    rows = st["tables"]
    role, epoch = st.get("role", "secondary"), st.get("epoch", 0)
    if role == "primary":
        return (f"this cluster is a primary (geo epoch {epoch}): it follows no other (start a secondary with "
                "`rangetable up --secondary-of CLUSTER`)")
    if role == "fenced" and st.get("source"):
        return (f"this cluster is fenced (geo epoch {epoch}): a forced failover is promoting it (it followed "
                f"{st['source']}); `rangetable geo failover --force` again if it stopped")
    if role == "fenced":
        return f"this cluster is fenced (geo epoch {epoch}): it takes no writes while it fails over to its secondary"
    head = f"a secondary of {st.get('source') or '?'} (geo epoch {epoch})"
    if not rows:
        return f"{head}: no tables yet"
    lines = [head, f"{'table':<24} {'cut (reads are as of)':<30} {'lag s':>14} {'applied':>9}  applier"]
    for r in rows:
        cut = "- (copying)" if r["cut"] is None else ticks_to_iso(r["cut"])
        lag = "-" if r["lag_s"] is None else f"{r['lag_s']:.3f}" + (" ALARM" if r.get("alarm") else "")
        applied = "-" if r.get("applied") is None else str(r["applied"])
        lines.append(f"{r['table']:<24} {cut:<30} {lag:>14} {applied:>9}  {r.get('applier') or '-'}")
        if r.get("error"):
            lines.append(f"{'':<24} {r['error']}")
    last = st.get("last_sync")
    lines.append(f"LastSyncTime (every table): {'- (bootstrap)' if last is None else ticks_to_iso(last)}; "
                 f"alarm over {st.get('alarm_s', 0):g} s of lag")
    return "\n".join(lines)


@geo_group.command("status")
@data_dir_option
@coordinator_option
@json_option
def geo_status_cmd(data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Each table's cut, lag behind the source and applier, on a secondary cluster."""
    st = call(coordinator_endpoint(data_dir, coordinator), {"op": "geo_status"})
    emit(st, as_json, render(st))


def _admin_doc(where: str, what: str) -> dict:
    """The connection document of a cluster to change roles at: its data dir or cluster.json, with its coordinator
    and admin key."""
    from rangetable.curve import read_cluster_doc

    path = os.path.join(where, CLUSTER_FILE) if os.path.isdir(where) else where
    try:
        doc = read_cluster_doc(path)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"{what}: {exc}") from None
    if not doc.get("coordinator"):
        raise click.ClickException(f"{what}: {path} names no coordinator (a client key's connection file cannot "
                                   "change a cluster's role: give the cluster's data dir or cluster.json)")
    return doc


def _maybe_admin_doc(path: str) -> dict | None:
    """The admin connection document at ``path`` when it is one (a secondary started with its source's data dir
    or cluster.json keeps it), else None (a client key's file cannot fence the source)."""
    from rangetable.curve import read_cluster_doc

    try:
        doc = read_cluster_doc(path)
    except (OSError, ValueError):
        return None
    return doc if doc.get("coordinator") else None


@geo_group.command("failover")
@click.option("--planned", is_flag=True, help="Drain the source, swap the roles, lose nothing.")
@click.option("--force", is_flag=True, help="Without the source (it is down or cut off): promote this cluster at "
                                            "its cuts; `geo rejoin` lists what the source acknowledged after them.")
@click.option("--source", "source", default=None,
              help="The source cluster's data dir or cluster.json (its coordinator and admin key): drained by "
                   "--planned, fenced as soon as it answers after --force [default: the source this secondary was "
                   "started with, when that is one].")
@click.option("--timeout", default=CATCH_UP_TIMEOUT_S, show_default=True,
              help="Seconds the secondary may take to reach the drained source before the failover is abandoned.")
@data_dir_option
@json_option
def geo_failover_cmd(planned: bool, force: bool, source: str | None, timeout: float, data_dir: str,
                     as_json: bool) -> None:
    """Make this secondary cluster the primary.

    With --planned the source stops taking writes, this cluster applies everything it acknowledged, the roles
    swap, and the old source follows this cluster from there without a copy: nothing is lost, and writes are
    refused for the seconds it prints. With --force (the source is down or cut off) this cluster becomes the
    primary at each table's cut at once; what the source acknowledged after the cuts is lost here until
    `rangetable geo rejoin` fences the source, lists it (the loss ledger) and makes it a secondary."""
    from cli.commands.security import follower_keys

    if planned == force:
        raise click.UsageError("give --planned (drain the source first: nothing lost) or --force (without the "
                               "source: what it acknowledged after the cuts goes to the loss ledger)")
    secondary = _admin_doc(data_dir, "this cluster")
    echo = (lambda _m: None) if as_json else click.echo
    if force:
        kept = os.path.join(data_dir, SOURCE_FILE)
        old = _admin_doc(source, "--source") if source else _maybe_admin_doc(kept)
        try:
            got = geo_failover.forced(secondary, echo, old)
        except TableError as exc:
            raise click.ClickException(f"{exc.error_code}: {exc.message}") from None
        if os.path.exists(kept):  # this cluster follows nobody now
            os.remove(kept)
        emit(got, as_json, "forced failover done: this cluster is the primary; run `rangetable geo rejoin "
                           "--source OLD` once the old source can be reached")
        return
    kept = os.path.join(data_dir, SOURCE_FILE)
    src_doc = _admin_doc(source or kept, "--source")
    try:
        res = geo_failover.planned(src_doc, secondary, follower_keys(secondary), echo, timeout)
    except TableError as exc:
        raise click.ClickException(f"{exc.error_code}: {exc.message}") from None
    if os.path.exists(kept):  # this cluster follows nobody now; the old source's data dir keeps whom it follows
        os.remove(kept)
    src_dir = src_doc.get("data_dir")
    if isinstance(src_dir, str) and os.path.isdir(src_dir):
        write_json_atomic(os.path.join(src_dir, SOURCE_FILE), res.pop("follow"), private=True, indent=2)
    else:
        res.pop("follow")
    emit(res, as_json, f"planned failover done in {res['seconds']:.2f} s: this cluster is the primary (writes "
                       f"refused for {res['writes_refused_s']:.2f} s), its old source follows it")


@geo_group.command("rejoin")
@click.option("--source", "source", required=True,
              help="The old source's data dir or cluster.json (its coordinator and admin key).")
@click.option("--ledger", "ledger_path", default="geo-ledger.jsonl", show_default=True,
              help="Where to write the loss ledger (JSON lines: the old source's changes after the cuts).")
@click.option("--wait", "wait_s", default=60.0, show_default=True,
              help="Seconds to keep asking an old source that does not answer.")
@data_dir_option
@json_option
def geo_rejoin_cmd(source: str, ledger_path: str, wait_s: float, data_dir: str, as_json: bool) -> None:
    """After `geo failover --force` to this cluster: fence the old source, write its loss ledger, make it a
    secondary of this cluster.

    Fencing comes first: from then on the old source acknowledges nothing, so the ledger — its change feed after
    each table's cut — lists every write it acknowledged that this cluster lacks, during the outage included.
    Replay what should be kept with `rangetable geo replay LEDGER`. The old source then follows this cluster,
    copying every table again."""
    from cli.commands.security import follower_keys

    primary = _admin_doc(data_dir, "this cluster")
    old = _admin_doc(source, "--source")
    echo = (lambda _m: None) if as_json else click.echo
    try:
        res = geo_failover.rejoin(primary, old, follower_keys(primary), wait_s, echo)
    except TableError as exc:
        raise click.ClickException(f"{exc.error_code}: {exc.message}") from None
    with open(ledger_path, "w") as f:
        for line in res.pop("ledger"):
            f.write(json.dumps(line) + "\n")
    follow = res.pop("follow")
    old_dir = old.get("data_dir")
    if isinstance(old_dir, str) and os.path.isdir(old_dir):
        write_json_atomic(os.path.join(old_dir, SOURCE_FILE), follow, private=True, indent=2)
    res["ledger_file"] = os.path.abspath(ledger_path)
    emit(res, as_json, f"loss ledger written to {res['ledger_file']}; the old source follows this cluster")


@geo_group.command("replay")
@click.argument("ledger", type=click.Path(exists=True, dir_okay=False))
@data_dir_option
@json_option
def geo_replay_cmd(ledger: str, data_dir: str, as_json: bool) -> None:
    """Apply a loss ledger's changes (or the lines of it kept) to this cluster: each entity put as it was after
    its change, or deleted."""
    from cli.cluster_file import read_cluster

    doc = read_cluster(data_dir) or {}
    if not doc.get("native"):
        raise click.ClickException(f"no cluster.json in {data_dir}")
    with open(ledger) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    try:
        n = geo_failover.replay(doc["native"], lines)
    except TableError as exc:
        raise click.ClickException(f"{exc.error_code}: {exc.message}") from None
    emit({"replayed": n}, as_json, f"replayed {n} change(s)")
