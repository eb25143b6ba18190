"""User commands: create, delete, list, set and show tables; put, merge, get and delete entities; query a table."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import click

from cli.coordinator_client import call
from cli.options import data_dir_option, emit, endpoint_option, json_option, native_endpoint
from rangetable.client.wire import with_extension
from rangetable.edm import etag_from_ticks
from rangetable.errors import TableError
from rangetable.index_def import check_def
from rangetable.rest_json import json_to_typed, typed_to_json
from rangetable.table_settings import format_ttl, parse_retention, parse_switch, parse_ttl

if TYPE_CHECKING:
    from rangetable.messages import WriteKind, WriteOp


def _entity_json(wire: list) -> dict:
    pk, rk, ts, props = wire
    return typed_to_json(pk, rk, ts, props, metadata="minimal")


# --- tables --------------------------------------------------------------------------------------


@click.group("table")
def table_group() -> None:
    """Create, delete and list tables."""


TTL_HELP = "Time to live of the table's entities: <n>s, <n>m, <n>h or <n>d ('none' removes it)."


def _settings(ttl: str | None, reads: int | None, writes: int | None, feed: str | None = None,
              feed_retention: str | None = None, feed_before_images: str | None = None) -> dict:
    out: dict = {}
    checks = (("ttl_s", ttl, parse_ttl, "--ttl"), ("feed_retention_s", feed_retention, parse_retention, "--feed-retention"),
              ("feed_off", feed, lambda v: int(not parse_switch(v, "--feed")), "--feed"),
              ("feed_before", feed_before_images, lambda v: int(parse_switch(v, "--feed-before-images")),
               "--feed-before-images"))
    for name, value, parse, hint in checks:
        if value is not None:
            try:
                out[name] = parse(value)
            except TableError as exc:
                raise click.BadParameter(exc.message, param_hint=hint) from None
    if reads is not None:
        out["reads"] = reads
    if writes is not None:
        out["writes"] = writes
    return out


@table_group.command("create")
@click.argument("name")
@click.option("--ttl", default=None, help=TTL_HELP)
@data_dir_option
@endpoint_option
@json_option
def table_create(name: str, ttl: str | None, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Create a table."""
    req: dict = {"op": "create_table", "table": name}
    settings = _settings(ttl, None, None)
    if settings:
        req["settings"] = settings
    call(native_endpoint(data_dir, endpoint), req)
    ttl_text = format_ttl(settings["ttl_s"]) if settings else None
    emit({"table": name, "created": True, "ttl": ttl_text or "none"}, as_json,
         f"created table {name}" + (f" (ttl {ttl_text})" if ttl_text else ""))


@table_group.command("set")
@click.argument("name")
@click.option("--ttl", default=None, help=TTL_HELP)
@click.option("--reads", type=click.IntRange(0), default=None, help="Reserved reads, entities/s (0: none).")
@click.option("--writes", type=click.IntRange(0), default=None, help="Reserved writes, entities/s (0: none).")
@click.option("--feed", default=None, help="The change feed on or off (on by default).")
@click.option("--feed-retention", default=None, help="How long the change feed keeps changes: <n>m, <n>h or <n>d "
                                                     "(default 1d).")
@click.option("--feed-before-images", default=None, help="on: each change also carries the entity before it.")
@data_dir_option
@endpoint_option
@json_option
def table_set(name: str, ttl: str | None, reads: int | None, writes: int | None, feed: str | None,
              feed_retention: str | None, feed_before_images: str | None, data_dir: str,
              endpoint: str | None, as_json: bool) -> None:
    """Change a table's TTL, reserved throughput and change feed (what is not given stays)."""
    settings = _settings(ttl, reads, writes, feed, feed_retention, feed_before_images)
    if not settings:
        raise click.UsageError("give --ttl, --reads, --writes, --feed, --feed-retention or --feed-before-images")
    res = call(native_endpoint(data_dir, endpoint), {"op": "set_table", "table": name, "settings": settings})
    emit(res, as_json, f"table {res['table']}: ttl {res['ttl']}, reads {res['reads'] or 'unreserved'}, "
                       f"writes {res['writes'] or 'unreserved'}, feed {res['feed']} (retention "
                       f"{res['feed_retention']}, before-images {'on' if res['feed_before_images'] else 'off'})")


@table_group.command("show")
@click.argument("name")
@data_dir_option
@endpoint_option
@json_option
def table_show(name: str, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """A table's TTL, reserved throughput and its use (entities/s: used and refused)."""
    res = call(native_endpoint(data_dir, endpoint), {"op": "get_table", "table": name})
    use = res.get("usage", {})
    lines = [f"table {res['table']}", f"ttl       {res['ttl']}",
             f"feed      {res['feed']} (retention {res['feed_retention']}, before-images "
             f"{'on' if res['feed_before_images'] else 'off'})"]
    for kind in ("reads", "writes"):
        lines.append(f"{kind:<9} reserved {res[kind] or '-'}  used {use.get(f'used_{kind}_s', 0):.0f}/s  "
                     f"refused {use.get(f'refused_{kind}_s', 0):.0f}/s")
    if res.get("indexes"):
        lines.append("indexes   " + ", ".join(f"{d['name']} on {','.join(d['on'])} ({d['state']})" for d in res["indexes"]))
    emit(res, as_json, "\n".join(lines))


@table_group.command("delete")
@click.argument("name")
@data_dir_option
@endpoint_option
@json_option
def table_delete(name: str, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Delete a table and all its entities."""
    call(native_endpoint(data_dir, endpoint), {"op": "delete_table", "table": name})
    emit({"table": name, "deleted": True}, as_json, f"deleted table {name}")


@table_group.command("list")
@data_dir_option
@endpoint_option
@json_option
def table_list(data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """List tables."""
    res = call(native_endpoint(data_dir, endpoint), {"op": "list_tables"})
    emit(res["tables"], as_json, "\n".join(res["tables"]) or "(no tables)")


@table_group.group("index")
def index_group() -> None:
    """Declare, list and drop a table's secondary indexes (docs/indexes.md)."""


INDEX_COLUMNS = ("name", "on", "include", "state")


def check_summary(rep: dict[str, Any]) -> str:
    """The last check of an index in a few words (``index list``)."""
    if rep.get("error"):
        return f"failed: {rep['error']}"
    text = f"{rep.get('differences', 0)} differences in {rep.get('entries', 0)} entries"
    if rep.get("repaired"):
        text += f", {rep['repaired']} repaired, {rep.get('remaining', 0)} remaining"
    return text


def index_rows(defs: list[dict[str, Any]]) -> str:
    """Index definitions as a text table: name, on, include, state, then any other field they carry
    (``entries``, ``lag_s``, ``progress``…), in the order first seen; the last check as its summary, a check
    asked for as ``running``."""
    extra: list[str] = []
    for d in defs:
        extra += [k for k in d if k not in INDEX_COLUMNS and k not in ("table", "check", "last_check")
                  and k not in extra]
    checks = any("check" in d or "last_check" in d for d in defs)
    cols = [*INDEX_COLUMNS, *extra, *(["check"] if checks else [])]

    def cell(d: dict[str, Any], c: str) -> str:
        if c == "check":
            return "running" if "check" in d else check_summary(d["last_check"]) if "last_check" in d else "-"
        v = d.get(c, "")
        if c == "include" and v == []:
            return "(keys)"
        return ",".join(map(str, v)) if isinstance(v, list) else str(v)

    rows = [list(cols)] + [[cell(d, c) for c in cols] for d in defs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


@index_group.command("create")
@click.argument("table")
@click.argument("name")
@click.option("--on", "on", required=True, help="The properties the index is keyed on, comma-separated (1 to 4).")
@click.option("--include", default=None, help="Properties the index keeps besides the keys, comma-separated, "
                                              "or 'all' (default: none).")
@data_dir_option
@endpoint_option
@json_option
def index_create(table: str, name: str, on: str, include: str | None, data_dir: str, endpoint: str | None,
                 as_json: bool) -> None:
    """Declare index NAME of TABLE; it answers queries once its build is done (state ready)."""
    try:
        d = check_def(table, name, on, include)
    except TableError as exc:
        raise click.BadParameter(exc.message, param_hint="NAME" if exc.error_code == "InvalidResourceName"
                                 else "--on / --include") from None
    req = {"op": "create_index", "rid": uuid.uuid4().hex, **d.to_wire()}
    del req["state"]
    res = call(native_endpoint(data_dir, endpoint), req)["index"]
    emit(res, as_json, f"created index {res['name']} of {res['table']} on {','.join(res['on'])} "
                       f"({res['state']})")


@index_group.command("list")
@click.argument("table")
@data_dir_option
@endpoint_option
@json_option
def index_list(table: str, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """A table's indexes: what each is keyed on, what it keeps, its state."""
    defs = call(native_endpoint(data_dir, endpoint), {"op": "list_indexes", "table": table})["indexes"]
    emit(defs, as_json, index_rows(defs) if defs else f"(no indexes on {table})")


def check_lines(rep: dict[str, Any]) -> str:
    """A check's report, one line per fact."""
    if rep.get("error"):
        return f"check {rep['id']}: failed: {rep['error']}"
    kinds = ", ".join(f"{k} {len(rep.get(k, []))}{'+' if len(rep.get(k, [])) >= 100 else ''}"
                      for k in ("missing", "extra", "wrong"))
    lines = [f"check        {rep['id']}", f"cursor_ts    {rep['cursor_ts']}", f"ranges       {rep['ranges']}",
             f"base rows    {rep['base_rows']}", f"entries      {rep['entries']}",
             f"in flight    {rep['in_flight']} (changed after the cursor: not compared)",
             f"differences  {rep['differences']}" + (f" ({kinds})" if rep["differences"] else "")]
    for k in ("missing", "extra", "wrong"):
        lines += [f"{k:<12} {json.dumps(key, ensure_ascii=False)}" for key in rep.get(k, [])]
    if rep.get("repaired") or rep.get("remaining"):
        lines += [f"repaired     {rep['repaired']}", f"remaining    {rep['remaining']}"]
    lines.append(f"seconds      {rep['seconds']}")
    return "\n".join(lines)


def run_index_check(endpoint: str, table: str, name: str, repair: bool = False, timeout_s: float = 600.0) -> dict:
    """Ask for a check of an index (``index_check``) and wait for its report (the definition's ``last_check``
    with its id); TimeoutError after ``timeout_s``, TableError(IndexNotFound) when the index is dropped."""
    check_id = call(endpoint, {"op": "index_check", "table": table, "name": name, "repair": repair})["id"]
    end = time.monotonic() + timeout_s
    while True:
        defs = call(endpoint, {"op": "list_indexes", "table": table})["indexes"]
        d = next((d for d in defs if d["name"].lower() == name.lower()), None)
        if d is None:
            raise TableError("IndexNotFound", f"index {name} of {table} was dropped during the check")
        rep = d.get("last_check")
        if rep is not None and rep.get("id") == check_id:
            return dict(rep)
        if time.monotonic() > end:
            raise TimeoutError(f"no report of check {check_id} after {timeout_s:g} s (it still runs)")
        time.sleep(0.2)


@index_group.command("check")
@click.argument("table")
@click.argument("name")
@click.option("--repair", is_flag=True, help="Fix every difference found (the index's applier writes the fixes).")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the check's report.")
@data_dir_option
@endpoint_option
@json_option
def index_check(table: str, name: str, repair: bool, timeout_s: float, data_dir: str, endpoint: str | None,
                as_json: bool) -> None:
    """Compare index NAME of TABLE with the table (per range counts and hashes, then key by key) and report every
    difference; exit 1 when some (after --repair: some left)."""
    try:
        rep = run_index_check(native_endpoint(data_dir, endpoint), table, name, repair, timeout_s)
    except TimeoutError as exc:
        raise click.ClickException(str(exc)) from None
    emit(rep, as_json, check_lines(rep))
    if rep.get("error") or rep.get("remaining", rep.get("differences", 0)):
        raise SystemExit(1)


@index_group.command("drop")
@click.argument("table")
@click.argument("name")
@data_dir_option
@endpoint_option
@json_option
def index_drop(table: str, name: str, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Drop index NAME of TABLE and its entries."""
    call(native_endpoint(data_dir, endpoint), {"op": "drop_index", "table": table, "name": name})
    emit({"table": table, "index": name, "dropped": True}, as_json, f"dropped index {name} of {table}")


# --- entities ------------------------------------------------------------------------------------


@click.group("entity")
def entity_group() -> None:
    """Put, get and delete entities (JSON as in the Azure REST API, @odata.type annotations allowed)."""


def _counters(adds: tuple[str, ...]) -> dict[str, list] | None:
    """``--add NAME=AMOUNT`` options as typed counters (AMOUNT a JSON number, typed as in an entity body:
    an integer is Int32, a decimal Double; ``NAME=5L`` makes it Int64)."""
    if not adds:
        return None
    doc: dict = {}
    for item in adds:
        name, eq, amount = item.partition("=")
        if not eq or not name:
            raise click.ClickException(f"InvalidInput: --add takes NAME=AMOUNT, not {item!r}")
        if amount.endswith("L"):
            doc[name + "@odata.type"] = "Edm.Int64"
            doc[name] = amount[:-1]
            continue
        try:
            doc[name] = json.loads(amount)
        except ValueError:
            raise click.ClickException(f"InvalidInput: the amount of {name!r} is not a number: {amount!r}") from None
    return json_to_typed(doc, pk="", rk="")[2]


def _write(endpoint: str, table: str, op: WriteOp, condition: str | None, expect: str | None,
           adds: tuple[str, ...] = ()) -> Any:
    """Send one write with rangetable's extension (condition, expectation, counters) added."""
    return call(endpoint, {"op": "write", "table": table, "write": with_extension(op, condition, expect, _counters(adds))})


_IF_HELP = "Only write when the current entity satisfies this $filter condition, e.g. \"stock ge 1\"."
_EXPECT_HELP = "Only write when the entity exists / does not exist."
_ADD_HELP = "Add a signed amount to a numeric property atomically (NAME=AMOUNT, repeatable; 5L: Int64)."


def _extension_options(command: Any) -> Any:
    """The ``--if``, ``--expect`` and ``--add`` options of a write command (rangetable's extension)."""
    for option in reversed((click.option("--if", "condition", default=None, help=_IF_HELP),
                            click.option("--expect", type=click.Choice(["exists", "absent"]), default=None,
                                         help=_EXPECT_HELP),
                            click.option("--add", "adds", multiple=True, metavar="NAME=AMOUNT", help=_ADD_HELP))):
        command = option(command)
    return command


@entity_group.command("put")
@click.argument("table")
@click.argument("entity_json")
@click.option("--mode", type=click.Choice(["replace", "merge", "insert"]), default="replace", show_default=True,
              help="replace/merge: upsert; insert: fail if the entity exists.")
@click.option("--if-match", default=None, help="Only update when the entity's ETag matches (or '*').")
@_extension_options
@data_dir_option
@endpoint_option
@json_option
def entity_put(table: str, entity_json: str, mode: str, if_match: str | None, condition: str | None,
               expect: str | None, adds: tuple[str, ...], data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Insert or update an entity given as JSON."""
    try:
        body = json.loads(entity_json)
    except ValueError as exc:
        raise click.ClickException(f"InvalidInput: not JSON: {exc}") from None
    pk, rk, props = json_to_typed(body)
    op: WriteKind
    if mode == "insert":
        op = "insert"
    elif mode == "merge":
        op = "merge" if if_match else "insert_or_merge"
    else:  # replace
        op = "replace" if if_match else "insert_or_replace"
    res = _write(native_endpoint(data_dir, endpoint), table,
                 {"op": op, "pk": pk, "rk": rk, "props": props, "if_match": if_match}, condition, expect, adds)
    etag = etag_from_ticks(res[2])
    out: dict[str, Any] = {"etag": etag}
    text = f"ok  etag {etag}"
    if adds:
        out["counters"] = counted = {k: v for k, v in _entity_json(res).items() if k.split("@")[0] in
                                     {a.partition("=")[0] for a in adds}}
        text += "  " + json.dumps(counted)
    emit(out, as_json, text)


@entity_group.command("merge")
@click.argument("table")
@click.argument("entity_json")
@click.option("--if-match", default=None, help="Only merge when the entity's ETag matches (or '*').")
@_extension_options
@data_dir_option
@endpoint_option
@json_option
@click.pass_context
def entity_merge(ctx: click.Context, table: str, entity_json: str, if_match: str | None, condition: str | None,
                 expect: str | None, adds: tuple[str, ...], data_dir: str, endpoint: str | None,
                 as_json: bool) -> None:
    """Merge properties into an entity (inserting it if absent, unless --if-match is given)."""
    ctx.invoke(entity_put, table=table, entity_json=entity_json, mode="merge", if_match=if_match,
               condition=condition, expect=expect, adds=adds, data_dir=data_dir, endpoint=endpoint,
               as_json=as_json)


@entity_group.command("get")
@click.argument("table")
@click.argument("partition_key")
@click.argument("row_key")
@data_dir_option
@endpoint_option
@json_option
def entity_get(table: str, partition_key: str, row_key: str, data_dir: str, endpoint: str | None,
               as_json: bool) -> None:
    """Print one entity as JSON (with or without --json)."""
    res = call(native_endpoint(data_dir, endpoint), {"op": "get", "table": table, "pk": partition_key, "rk": row_key})
    click.echo(json.dumps(_entity_json(res), indent=2))


@entity_group.command("delete")
@click.argument("table")
@click.argument("partition_key")
@click.argument("row_key")
@click.option("--if-match", default="*", show_default=True, help="ETag the entity must have.")
@click.option("--if", "condition", default=None, help=_IF_HELP)
@data_dir_option
@endpoint_option
@json_option
def entity_delete(table: str, partition_key: str, row_key: str, if_match: str, condition: str | None,
                  data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Delete one entity."""
    _write(native_endpoint(data_dir, endpoint), table,
           {"op": "delete", "pk": partition_key, "rk": row_key, "if_match": if_match}, condition, None)
    emit({"table": table, "PartitionKey": partition_key, "RowKey": row_key, "deleted": True}, as_json, "deleted")


@click.command("query")
@click.argument("table")
@click.argument("filter_text", required=False, default=None, metavar="[FILTER]")
@click.option("--select", default=None, help="Comma-separated properties to return.")
@click.option("--top", type=int, default=None, help="Stop after this many entities.")
@click.option("--page-size", type=int, default=1000, show_default=True)
@click.option("--staleness", type=float, default=None,
              help="Seconds an answer through an index may lag the table (default: it sees every earlier write).")
@data_dir_option
@endpoint_option
@json_option
def query_cmd(table: str, filter_text: str | None, select: str | None, top: int | None, page_size: int,
              staleness: float | None, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """Query a table with an OData $filter, e.g. "PartitionKey eq 'p1' and qty ge 2"."""
    ep = native_endpoint(data_dir, endpoint)
    sel = [s.strip() for s in select.split(",")] if select else None
    token = None
    out: list[dict] = []
    pages = 0
    through: dict | None = None
    while True:
        size = page_size if top is None else min(page_size, top - len(out))
        req: dict[str, Any] = {"op": "query", "table": table, "filter": filter_text, "select": sel, "top": size,
                               "next": token}
        if staleness is not None:
            req["staleness"] = staleness
        res = call(ep, req)
        through = res.get("plan") or through
        pages += 1
        for w in res["entities"]:
            e = _entity_json(w)
            out.append(e)
            if not as_json:
                click.echo(json.dumps(e))
        token = res["next"]
        if token is None or (top is not None and len(out) >= top):
            break
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        how = ""
        if through is not None:
            how = (f", scanned the table: {through['fallback']}" if through.get("fallback") else
                   f", through index {through['index']} (waited {through['fresh_wait_ms']:g} ms for it)")
        click.echo(f"({len(out)} entities, {pages} page{'s' if pages != 1 else ''}{how})", err=True)


@click.command("explain")
@click.argument("table")
@click.argument("filter_text", required=False, default=None, metavar="[FILTER]")
@data_dir_option
@endpoint_option
@json_option
def explain_cmd(table: str, filter_text: str | None, data_dir: str, endpoint: str | None, as_json: bool) -> None:
    """How a query of FILTER would read TABLE: through which index, or which scan of the table."""
    res = call(native_endpoint(data_dir, endpoint), {"op": "explain", "table": table, "filter": filter_text})
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    click.echo(res["describe"])
