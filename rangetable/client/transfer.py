"""``rangetable export`` / ``import``: a table to a file and back, resumable (formats in
:mod:`rangetable.client.transfer_format`).

**Export** pages through the table with the native ``query`` op (continuation tokens, so it crosses
splits and moves) and appends each page to the file. After every page the file is flushed to disk and
a side file ``FILE.export-resume.json`` records the continuation token and the file's length; an
interrupted export continues with ``resume=True`` from that token, after cutting the file back to that
length. A CSV export scans the table once more first, for its typed header. An export is a live scan,
not a snapshot: an entity written meanwhile may be in it in its old or its new state (take a
``rangetable backup`` for one instant per range).

**Import** reads the file in chunks and sends each through the native bulk path
(:func:`rangetable.client.bulk.bulk_upsert`: entity group transactions of up to 100, pipelined). After every
chunk the side file ``FILE.import-resume.json`` records how many records and bytes are done; a chunk
is parsed and validated whole before any of it is sent, so a bad record stops the import with
nothing of its chunk written, and ``resume=True`` goes on from the last chunk done (upserts, so a
chunk sent twice changes nothing).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import TYPE_CHECKING, Any

from rangetable.client.bulk import bulk_upsert
from rangetable.client.transfer_format import (
    Column,
    Typed,
    columns_of,
    csv_header,
    csv_line,
    jsonl_line,
    parse_csv,
    parse_header,
    parse_jsonl,
    records,
)
from rangetable.client.transport import Transport
from rangetable.errors import TableError
from rangetable.files import write_json_atomic

if TYPE_CHECKING:
    from rangetable.messages import QueryAnswer, QueryRequest, WireEntity

PAGE = 1000
CHUNK = 5000
ATTEMPTS = 8

OnProgress = Callable[[int, int], None]  # (entities, bytes) since the last call


def side_file(path: str, kind: str) -> str:
    """The resume file of an export or import (``kind``) of ``path``."""
    return f"{path}.{kind}-resume.json"


def _save(path: str, state: dict[str, Any]) -> None:
    write_json_atomic(path, state)


def _load_state(path: str, kind: str, expect: dict[str, Any], resume: bool) -> dict[str, Any] | None:
    """The saved state when resuming (checked against ``expect``); refuses to start over a pending one."""
    side = side_file(path, kind)
    exists = os.path.exists(side)
    if not resume:
        if exists:
            raise TableError("InvalidInput", f"an interrupted {kind} of {path} can be resumed (--resume), "
                                             f"or remove {side} to start over")
        return None
    if not exists:
        raise TableError("InvalidInput", f"nothing to resume: {side} does not exist")
    with open(side) as f:
        state = json.load(f)
    for k, v in expect.items():
        if state.get(k) != v:
            raise TableError("InvalidInput", f"{side} is for {k}={state.get(k)!r}, not {v!r}")
    return state


def _query(conn: Transport, body: QueryRequest) -> QueryAnswer:
    """One query page, retried with back-off on retriable errors (a range moving or splitting)."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return conn.request(body)
        except TableError as exc:
            if not exc.retriable or attempt == ATTEMPTS:
                raise
            time.sleep(min(0.05 * 2**attempt, 2.0))
    raise AssertionError("unreachable")


def _pages(conn: Transport, table: str, filter_text: str | None, page: int,
           token: Any) -> Iterator[tuple[list[WireEntity], Any]]:
    """Yield (entities in wire form, next token) page by page from ``token``."""
    while True:
        res = _query(conn, {"op": "query", "table": table, "filter": filter_text, "top": page, "next": token})
        token = res["next"]
        yield res["entities"], token
        if token is None:
            return


def scan_columns(endpoint: str, table: str, filter_text: str | None = None, page: int = PAGE) -> list[Column]:
    """The typed CSV columns a table's entities need (one scan)."""
    cols: list[Column] = []
    with closing(Transport(endpoint)) as conn:
        for ents, _ in _pages(conn, table, filter_text, page, None):
            cols = columns_of((e[3] for e in ents), cols)
    return cols


def export_table(endpoint: str, table: str, path: str, *, fmt: str = "jsonl", filter_text: str | None = None,
                 page: int = PAGE, resume: bool = False, max_pages: int | None = None,
                 on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Write a table's entities to ``path``; returns a summary (``complete`` False when ``max_pages``
    stopped it, resumable then). Raises TableError (e.g. TableNotFound, or InvalidInput for a CSV
    entity with a property the header lacks because it was written during the export)."""
    expect = {"table": table, "format": fmt, "filter": filter_text}
    state = _load_state(path, "export", expect, resume)
    side = side_file(path, "export")
    t0 = time.monotonic()
    with closing(Transport(endpoint)) as conn:
        _query(conn, {"op": "query", "table": table, "filter": filter_text, "top": 1})  # TableNotFound early
        if state is None:
            columns = scan_columns(endpoint, table, filter_text, page) if fmt == "csv" else []
            state = {**expect, "next": None, "entities": 0, "pages": 0, "offset": 0, "columns": columns}
            mode = "wb"
        else:
            mode = "r+b"
        columns = [tuple(c) for c in state["columns"]]
        index = {c: i for i, c in enumerate(columns)}
        resumed_from = state["entities"]
        pages = 0
        with open(path, mode) as f:
            f.truncate(state["offset"])  # a page written after the last saved state goes again
            f.seek(state["offset"])
            if fmt == "csv" and state["offset"] == 0:
                f.write(csv_header(columns).encode())
            for ents, token in _pages(conn, table, filter_text, page, state["next"]):
                lines = []
                for pk, rk, ts, props in ents:
                    if fmt == "jsonl":
                        lines.append(jsonl_line(pk, rk, ts, props))
                        continue
                    try:
                        lines.append(csv_line(pk, rk, ts, props, columns, index))
                    except KeyError as exc:
                        raise TableError("InvalidInput", f"entity ({pk!r}, {rk!r}) has property {exc.args[0]}, "
                                         "written after the CSV header was; export again, or use JSON lines") from None
                data = "".join(lines).encode()
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # on disk before the side file says so
                pages += 1
                state.update(next=token, entities=state["entities"] + len(ents), pages=state["pages"] + 1,
                             offset=f.tell())
                if token is not None:
                    _save(side, state)
                if on_progress is not None:
                    on_progress(len(ents), len(data))
                if token is not None and max_pages is not None and pages >= max_pages:
                    break
    complete = state["next"] is None
    if complete and os.path.exists(side):
        os.remove(side)
    return {"table": table, "file": path, "format": fmt, "entities": state["entities"], "pages": state["pages"],
            "bytes": state["offset"], "resumed_from": resumed_from, "complete": complete,
            "seconds": round(time.monotonic() - t0, 3)}


def _chunks(f: Any, fmt: str, columns: list[Column], first: int,
            chunk: int) -> Iterator[tuple[list[Typed], int, int]]:
    """Yield (parsed entities, records consumed, bytes consumed) chunk by chunk; record numbers (in
    error messages) count from ``first`` + 1."""
    n, size, out, count = first, 0, [], 0
    source = records(f) if fmt == "csv" else ((raw.decode("utf-8"), len(raw)) for raw in f)
    for text, nbytes in source:
        n += 1
        count += 1
        size += nbytes
        where = f"{'record' if fmt == 'csv' else 'line'} {n}"
        ent = parse_csv(text, columns, where) if fmt == "csv" else parse_jsonl(text, where)
        if ent is not None:
            out.append(ent)
        if len(out) >= chunk:
            yield out, count, size
            out, count, size = [], 0, 0
    if count:
        yield out, count, size


def import_table(endpoint: str, table: str, path: str, *, fmt: str = "jsonl", mode: str = "replace",
                 skip: int = 0, resume: bool = False, chunk: int = CHUNK, create: bool = True,
                 on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Upsert every entity of ``path`` into ``table`` through the bulk path; returns a summary.

    ``skip`` leaves out the first records (lines; CSV records after the header). Raises TableError
    with the file position of a bad record; the chunks before it are done and ``resume=True`` goes on.
    """
    expect = {"table": table, "format": fmt}
    state = _load_state(path, "import", expect, resume)
    side = side_file(path, "import")
    if create:
        try:
            with closing(Transport(endpoint)) as conn:
                conn.request({"op": "create_table", "table": table})
        except TableError as exc:
            if exc.error_code != "TableAlreadyExists":
                raise
    t0 = time.monotonic()
    entities = retries = 0
    with open(path, "rb") as f:
        columns: list[Column] = []
        header_bytes = 0
        if fmt == "csv":
            head = next(records(f), None)
            if head is None:
                raise TableError("InvalidInput", f"{path} is empty: a CSV file needs its typed header")
            columns, header_bytes = parse_header(head[0]), head[1]
        if state is None:
            state = {**expect, "records": 0, "offset": header_bytes, "entities": 0}
            for _ in range(skip):
                if fmt == "csv":
                    rec = next(records(f), None)
                    size = None if rec is None else rec[1]
                else:
                    line = f.readline()
                    size = len(line) or None
                if size is None:
                    break
                state["records"] += 1
                state["offset"] += size
        resumed_from = state["records"]
        f.seek(state["offset"])
        for ents, count, nbytes in _chunks(f, fmt, columns, state["records"], chunk):
            res = bulk_upsert(endpoint, table, ents, typed=True, mode=mode)
            entities += res.entities
            retries += res.retries
            state.update(records=state["records"] + count, offset=state["offset"] + nbytes,
                         entities=state["entities"] + res.entities)
            _save(side, state)
            if on_progress is not None:
                on_progress(res.entities, nbytes)
    if os.path.exists(side):
        os.remove(side)
    seconds = time.monotonic() - t0
    return {"table": table, "file": path, "format": fmt, "entities": entities, "records": state["records"],
            "resumed_from": resumed_from, "retries": retries, "seconds": round(seconds, 3),
            "rate": round(entities / seconds, 1) if seconds else 0.0}

