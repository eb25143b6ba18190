"""``rangetable changes TABLE``: a table's change feed, as lines (JSON lines with ``--json``), from the beginning,
now, a time or a cursor, and with ``--follow`` on as changes come (``rangetable/client/changes.py``)."""

from __future__ import annotations

import json
import time
from datetime import datetime

import click

from cli.options import data_dir_option, endpoint_option, json_option, native_endpoint
from rangetable.client import TableServiceClient
from rangetable.client.changes import ChangeRecord
from rangetable.client.consumer_group import ConsumerGroup
from rangetable.edm import ticks_to_datetime
from rangetable.feed_page import DEFAULT_TOP, MAX_TOP, parse_start

RESOLVED_EVERY_S = 1.0  # a following reader prints the resolved time at most this often


def _start(text: str) -> str | datetime:
    """``--from``: beginning, now, or an ISO 8601 time (UTC unless it says otherwise)."""
    try:
        start = parse_start(text)
    except ValueError:
        raise click.BadParameter("beginning, now or an ISO 8601 time such as 2026-11-28T17:00:00Z",
                                 param_hint="--from") from None
    return start if isinstance(start, str) else ticks_to_datetime(start)


def _line(r: ChangeRecord) -> str:
    doc = r.to_json()
    entity = doc["entity"]
    props = {} if entity is None else {k: v for k, v in entity.items() if k not in ("PartitionKey", "RowKey", "Timestamp")}
    return f"{doc['Timestamp']}  {r.kind:<7}  {r.partition_key}/{r.row_key}" + (
        f"  {json.dumps(props)}" if entity is not None else "")


@click.command("changes")
@click.argument("table")
@click.option("--from", "start", default="beginning", show_default=True,
              help="Where to start: beginning (the oldest change kept), now, or a time (ISO 8601).")
@click.option("--cursor", default=None, help="Resume right after this cursor (a record's or the last line's).")
@click.option("--follow", is_flag=True, help="Keep reading as changes come (Ctrl-C stops).")
@click.option("--page-size", type=click.IntRange(1, MAX_TOP), default=DEFAULT_TOP, show_default=True)
@click.option("--group", default=None, help="Read as a member of this consumer group: the group's members share the "
                                            "table's spans, checkpoints kept in the cluster (implies --follow).")
@click.option("--member", default=None, help="This member's name in --group (default: a new one).")
@data_dir_option
@endpoint_option
@json_option
def changes_cmd(table: str, start: str, cursor: str | None, follow: bool, page_size: int, group: str | None,
                member: str | None, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """A table's change feed: every insert, replace, merge, delete and TTL expiry, in order.

    With --json each change is a JSON line (the same as the REST extension's, docs/changes.md), and a line
    {"cursor": C, "resolved": T} says that no change at or before T will ever appear (at the end, and about
    once a second while following). With --group the changes of the spans this member owns are printed (per
    key in order; each span's checkpoint is saved after its page)."""
    if group is not None:
        _group(table, group, member, _start(start), page_size, native_endpoint(data_dir, endpoint), as_json)
        return
    client = TableServiceClient(native_endpoint(data_dir, endpoint)).get_table_client(table)
    count = 0
    last_cursor = cursor
    said = 0.0
    try:
        for page in client.read_changes(start=_start(start), cursor=cursor, follow=follow,
                                        results_per_page=page_size).by_page():
            for r in page.records:
                click.echo(json.dumps(r.to_json()) if as_json else _line(r))
            count += len(page.records)
            last_cursor = page.cursor
            now = time.monotonic()
            if page.resolved is not None and as_json and (not follow or now - said >= RESOLVED_EVERY_S):
                click.echo(json.dumps(page.to_json()))
                said = now
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    click.echo(f"({count} change{'s' if count != 1 else ''}; resume with --cursor {last_cursor})", err=True)


def _group(table: str, group: str, member: str | None, start: str | datetime, page_size: int, endpoint: str,
           as_json: bool) -> None:
    """Follow ``table`` as a member of consumer group ``group`` until Ctrl-C, then leave the group."""
    service = TableServiceClient(endpoint)
    cg = ConsumerGroup(service, table, group, start=start, results_per_page=page_size)
    if member:
        cg.member = member
    count = 0
    try:
        for page in cg.pages():
            for r in page.records:
                click.echo(json.dumps(r.to_json()) if as_json else _line(r))
            count += len(page.records)
    except KeyboardInterrupt:
        pass
    finally:
        cg.close()
        service.close()
    click.echo(f"({count} change{'s' if count != 1 else ''} as member {cg.member} of group {group}; "
               "its spans' checkpoints are saved)", err=True)
