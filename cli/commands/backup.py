"""``rangetable backup`` and ``rangetable restore``: an online copy of a running cluster, and a new
data root made from one (see docs/operations.md for what point in time a backup holds)."""

from __future__ import annotations

import json
import os

import click

from cli.coordinator_client import human_size
from cli.options import coordinator_endpoint, coordinator_option, data_dir_option, json_option


@click.command("backup")
@click.option("--to", "dest", required=True, type=click.Path(file_okay=False),
              help="New (or empty) directory on this machine for the backup; the cluster's hosts never see it.")
@click.option("--timeout", default=600.0, show_default=True,
              help="Seconds to wait for the cluster to checkpoint every range.")
@data_dir_option
@coordinator_option
@json_option
def backup_cmd(dest: str, timeout: float, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Back up a running cluster into DIR on this machine: one copy of every range, plus the map and catalog.

    The coordinator has each range's primary checkpoint it at a committed batch (the range keeps serving),
    then this command pulls the files over the coordinator's CURVE socket with the admin key of cluster.json
    (no other key may), checks each chunk's CRC-32, records each file's SHA-256 and writes DIR/backup.json
    last. Refused with ServerBusy while a split or merge runs or a range has no live primary. Restore with
    `rangetable restore --from DIR --data-dir NEW`.
    """
    from cli.commands.backup_pull import pull_backup

    dest = os.path.abspath(dest)
    m = pull_backup(coordinator_endpoint(data_dir, coordinator), dest, timeout)
    if as_json:
        click.echo(json.dumps(m, indent=2))
        return
    files = sum(len(r["files"]) for r in m["ranges"]) + len(m["coordinator"]["files"])
    slowest = max((r["ms"] for r in m["ranges"]), default=0.0)
    copies = f"{m['replicas']} replicas" if m["replicas"] > 1 else "1 copy"
    click.echo(f"backup in {dest}: {len(m['tables'])} tables, {len(m['ranges'])} ranges (of a cluster keeping "
               f"{copies}), {human_size(m['bytes'])} in {files} files in {m['seconds']:.2f} s")
    click.echo(f"map version {m['map_version']}; every range checkpointed on its primary at a committed batch "
               f"in {m['checkpoint_seconds']:.2f} s (the slowest in {slowest:.1f} ms), pulled in "
               f"{m['pull_seconds']:.2f} s; SHA-256 of every file in {dest}/backup.json")


@click.command("restore")
@click.option("--from", "src", required=True, type=click.Path(exists=True, file_okay=False),
              help="A directory written by `rangetable backup`.")
@click.option("--meta", default="", metavar="etcd://HOST:PORT/PREFIX",
              help="Write the meta store into this empty etcd prefix (for coordinators run with --meta) instead of "
                   "NEW/coordinator.")
@data_dir_option
@json_option
def restore_cmd(src: str, meta: str, data_dir: str, as_json: bool) -> None:
    """Make a new data root from a backup; then `rangetable up --data-dir NEW` serves it.

    Every file is checked against the manifest (size and SHA-256) before anything is written; an incomplete or
    damaged backup, or a data root that is not new or empty, is refused with InvalidInput. A backup of a
    replicated cluster puts each range's copy on every server of its replica set (NEW/servers/<id>/ranges/…),
    so the restored cluster starts at full strength with `rangetable up` (3 servers, 3 replicas; more
    --servers are filled by the balancer); a `--replicas 1` backup gets the one-copy layout (NEW/ranges/…).
    SST files are hard-linked from the backup (copied across filesystems), everything else copied, so the
    backup stays usable for another restore. With --meta the catalog and map go into an empty etcd prefix and
    NEW holds the servers' directories only (NEW/servers/<id>/: each server's --data-dir).
    """
    from cli.commands.restore import RestoreError, restore

    try:
        res = restore(os.path.abspath(src), os.path.abspath(data_dir), meta)
    except RestoreError as exc:
        raise click.ClickException(f"InvalidInput: {exc}") from None
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    layout = (f"{res['copies']} copies on servers {', '.join(res['servers'])}" if res["replicas"] > 1
              else "one copy each")
    click.echo(f"restored {res['ranges']} ranges of {len(res['tables'])} tables ({layout}) "
               f"into {res['data_dir']}: {res['linked']} files hard-linked, {res['copied']} copied, "
               f"checked in {res['verified_seconds']:.2f} s, in {res['seconds']:.2f} s")
    flags = "" if res["replicas"] == 3 else f" --replicas {res['replicas']}"
    if len(res["servers"]) > 3:
        flags += f" --servers {len(res['servers'])}"
    if meta:
        click.echo(f"meta store: {res['etcd_keys']} keys written into {meta}")
        flags += f" --meta {meta}"
    click.echo(f"start it with: rangetable up --data-dir {data_dir}{flags}")
