"""``rangetable export`` and ``rangetable import``: a table to JSON lines or CSV and back, with progress
bars, resumable (the work is in :mod:`rangetable.client.transfer`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from cli.coordinator_client import call, range_loads
from cli.options import cluster_doc, data_dir_option, endpoint_option, json_option
from rangetable.errors import TableError

progress_option = click.option("--progress/--no-progress", default=None,
                               help="Show a progress bar on stderr [default: when stderr is a terminal].")
format_option = click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default=None,
                             help="File format [default: csv for a .csv file name, else jsonl].")


def _cluster(data_dir: str, endpoint: str | None) -> tuple[str, str | None]:
    """(native endpoint, coordinator endpoint or None) from the flags or cluster.json."""
    if endpoint:
        from cli.cluster_file import read_cluster

        return endpoint, (read_cluster(data_dir) or {}).get("coordinator")
    doc = cluster_doc(data_dir)
    return doc["native"], doc.get("coordinator")


def _estimate(coordinator: str | None, table: str) -> int | None:
    """The table's entity count from the ranges' last load reports (an estimate; None if unknown)."""
    if not coordinator:
        return None
    try:
        st = call(coordinator, {"op": "status"}, timeout=3)
    except TableError:
        return None
    loads = range_loads(st)
    ids = [r["id"] for r in st["ranges"] if r["table"].lower() == table.lower()]
    return sum(int(loads.get(i, {}).get("entities", 0)) for i in ids) or None


@contextmanager
def _bar(show: bool | None, total: int | None, unit: str, desc: str, initial: int = 0) -> Iterator[Any]:
    """A tqdm bar on stderr (a no-op one when hidden)."""
    from tqdm import tqdm

    hide = not (sys.stderr.isatty() if show is None else show)
    scale = unit == "B"
    with tqdm(total=total, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000, desc=desc,
              initial=initial, disable=hide, file=sys.stderr, dynamic_ncols=True) as bar:
        yield bar


def _done_before(path: str, kind: str, key: str, resume: bool) -> int:
    """How far an interrupted export or import got (from its side file), for the bar's start."""
    from rangetable.client.transfer import side_file

    if not resume:
        return 0
    try:
        with open(side_file(path, kind)) as f:
            return int(json.load(f).get(key, 0))
    except (OSError, ValueError, AttributeError):
        return 0  # export_table / import_table report the problem


def _fail(exc: TableError) -> click.ClickException:
    return click.ClickException(f"{exc.error_code}: {exc.message}")


@click.command("export")
@click.argument("table")
@click.option("--to", "path", required=True, type=click.Path(dir_okay=False), help="File to write.")
@format_option
@click.option("--filter", "filter_text", default=None, help="Only entities matching this OData $filter.")
@click.option("--resume", is_flag=True, help="Continue an interrupted export from its last page.")
@click.option("--page-size", default=1000, show_default=True, type=click.IntRange(1, 1000))
@click.option("--max-pages", type=click.IntRange(1), default=None,
              help="Stop after this many pages (continue later with --resume).")
@progress_option
@data_dir_option
@endpoint_option
@json_option
def export_cmd(table: str, path: str, fmt: str | None, filter_text: str | None, resume: bool, page_size: int,
               max_pages: int | None, progress: bool | None, data_dir: str, endpoint: str | None,
               as_json: bool) -> None:
    """Write every entity of TABLE to a file: JSON lines (Azure's JSON with type annotations) or CSV
    with a typed header (`qty:Edm.Int32`). Every EDM type reads back exactly with `rangetable import`.

    After each page the file is on disk and FILE.export-resume.json holds the continuation token: an
    interrupted export goes on with --resume.
    """
    from rangetable.client.transfer import export_table
    from rangetable.client.transfer_format import format_of

    native, coordinator = _cluster(data_dir, endpoint)
    fmt = format_of(path, fmt)
    total = None if filter_text else _estimate(coordinator, table)
    try:
        with _bar(progress, total, "entities", f"export {table}", _done_before(path, "export", "entities", resume)) as bar:
            res = export_table(native, table, path, fmt=fmt, filter_text=filter_text, page=page_size, resume=resume,
                               max_pages=max_pages, on_progress=lambda n, _b: bar.update(n))
    except TableError as exc:
        raise _fail(exc) from None
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    how = "" if not res["resumed_from"] else f" (resumed after {res['resumed_from']:,})"
    click.echo(f"exported {res['entities']:,} entities of {table} to {path} ({fmt}, {res['bytes']:,} bytes, "
               f"{res['pages']} page{'s' if res['pages'] != 1 else ''}){how} in {res['seconds']:.2f} s")
    if not res["complete"]:
        click.echo(f"stopped after {max_pages} pages: continue with `rangetable export {table} --to {path} --resume`")


@click.command("import")
@click.argument("table")
@click.option("--from", "path", required=True, type=click.Path(exists=True, dir_okay=False), help="File to read.")
@format_option
@click.option("--mode", type=click.Choice(["replace", "merge"]), default="replace", show_default=True,
              help="Upsert mode for entities that exist: replace them, or merge properties into them.")
@click.option("--skip", type=click.IntRange(0), default=0, help="Leave out the first N records (lines; CSV: after the header).")
@click.option("--resume", is_flag=True, help="Continue an interrupted import after its last chunk.")
@click.option("--chunk", type=click.IntRange(1), default=5000, show_default=True,
              help="Records parsed and sent per resumable step.")
@click.option("--create/--no-create", default=True, show_default=True, help="Create the table if it is missing.")
@progress_option
@data_dir_option
@endpoint_option
@json_option
def import_cmd(table: str, path: str, fmt: str | None, mode: str, skip: int, resume: bool, chunk: int,
               create: bool, progress: bool | None, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Upsert every entity of a file (as written by `rangetable export`) into TABLE through the bulk
    path: entity group transactions of up to 100, pipelined.

    Each chunk is validated whole before it is sent, so a bad record stops the import with its
    position and nothing of its chunk written; after a fix, --resume goes on from the last chunk done
    (FILE.import-resume.json). Importing a chunk twice changes nothing (upserts).
    """
    from rangetable.client.transfer import import_table
    from rangetable.client.transfer_format import format_of

    native, _ = _cluster(data_dir, endpoint)
    fmt = format_of(path, fmt)
    try:
        with _bar(progress, os.path.getsize(path), "B", f"import {table}",
                  _done_before(path, "import", "offset", resume)) as bar:
            res = import_table(native, table, path, fmt=fmt, mode=mode, skip=skip, resume=resume, chunk=chunk,
                               create=create, on_progress=lambda _n, b: bar.update(b))
    except TableError as exc:
        raise _fail(exc) from None
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    how = "" if not res["resumed_from"] else f" (after record {res['resumed_from']:,})"
    click.echo(f"imported {res['entities']:,} entities into {table} from {path}{how} in {res['seconds']:.2f} s "
               f"({res['rate']:,.0f} entities/s)")
