"""``rangetable backup`` and ``rangetable restore``: an online copy of a running cluster, and a new
data root made from one (see docs/operations.md for what point in time a backup holds)."""

from __future__ import annotations

import json
import os

import click

from cli.coordinator_client import call, human_size
from cli.options import coordinator_endpoint, coordinator_option, data_dir_option, json_option


@click.command("backup")
@click.option("--to", "dest", required=True, type=click.Path(file_okay=False),
              help="New (or empty) directory for the backup; on the data root's filesystem SST files are hard "
                   "links, elsewhere copies.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait for the backup to finish.")
@data_dir_option
@coordinator_option
@json_option
def backup_cmd(dest: str, timeout: float, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Back up a running cluster: every range checkpointed while it serves, plus the partition map.

    Each range is consistent at its own instant (between two of its acknowledged writes); no split,
    move or merge runs during the backup. Restore with `rangetable restore --from DIR --data-dir NEW`.
    """
    dest = os.path.abspath(dest)
    m = call(coordinator_endpoint(data_dir, coordinator), {"op": "backup", "dir": dest}, timeout=timeout)
    if as_json:
        click.echo(json.dumps(m, indent=2))
        return
    files = [f for r in m["ranges"] for f in r["files"]] + m["coordinator"]["files"]
    linked = sum(r["linked"] for r in m["ranges"]) + m["coordinator"]["linked"]
    slowest = max((r["ms"] for r in m["ranges"]), default=0.0)
    click.echo(f"backup in {dest}: {len(m['tables'])} tables, {len(m['ranges'])} ranges, "
               f"{human_size(m['bytes'])} in {len(files)} files "
               f"({linked} hard-linked) in {m['seconds']:.2f} s")
    click.echo(f"map version {m['map_version']}; each range checkpointed at its own instant, "
               f"the slowest in {slowest:.1f} ms")


@click.command("restore")
@click.option("--from", "src", required=True, type=click.Path(exists=True, file_okay=False),
              help="A directory written by `rangetable backup`.")
@data_dir_option
@json_option
def restore_cmd(src: str, data_dir: str, as_json: bool) -> None:
    """Make a new data root from a backup; then `rangetable up --data-dir NEW` serves it.

    The data root must not exist or be empty. SST files are hard-linked from the backup (copied across
    filesystems), everything else copied, so the backup stays usable for another restore.
    """
    from cli.restore import RestoreError, restore

    try:
        res = restore(os.path.abspath(src), os.path.abspath(data_dir))
    except RestoreError as exc:
        raise click.ClickException(f"InvalidInput: {exc}") from None
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    click.echo(f"restored {res['ranges']} ranges of {len(res['tables'])} tables "
               f"into {res['data_dir']}: {res['linked']} files hard-linked, {res['copied']} copied, "
               f"in {res['seconds']:.2f} s")
    click.echo(f"start it with: rangetable up --data-dir {data_dir}")
