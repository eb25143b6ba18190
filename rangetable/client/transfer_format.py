"""The file formats of ``rangetable export`` / ``import``: JSON lines and CSV with a typed header.

Both keep every EDM type exactly (pure functions; the paging and the files are in
:mod:`rangetable.client.transfer`):

* **JSON lines** — one entity per line in Azure's REST JSON with minimal metadata: Int64, DateTime
  (7 fraction digits), Guid, Binary (base64) and non-finite Doubles carry ``Prop@odata.type``;
  String, Int32, finite Double and Boolean are the JSON types they read back as. ``Timestamp`` is
  written for reference and ignored on import (the table assigns a new one, as Azure does).
* **CSV** — RFC 4180. The header names every column with its type: ``PartitionKey,RowKey,Timestamp``
  then ``name:Edm.Type`` (a property stored with two types gets two columns). A cell left empty means
  the entity has no such property; a present empty String or Binary is written as a quoted empty
  field ``""``, so the two stay apart. Values: Int32/Int64 in decimal, Double as Python's shortest
  round-trip repr (``NaN``, ``Infinity``, ``-Infinity``), Boolean ``true``/``false``, DateTime ISO
  8601 with 7 fraction digits, Guid as text, Binary in base64.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, INT32, INT64, STRING, TYPE_NAMES, ticks_to_iso
from rangetable.entity import validate_entity
from rangetable.errors import TableError
from rangetable.rest_json import json_to_typed, typed_to_json

Typed = tuple[str, str, dict[str, list[Any]]]
Column = tuple[str, int]  # (property name, EDM type code)
KEY_COLUMNS = ("PartitionKey", "RowKey", "Timestamp")
FORMATS = ("jsonl", "csv")
_CODE_BY_NAME = {n: i for i, n in enumerate(TYPE_NAMES)}
_NEEDS_QUOTES = re.compile(r'[,"\r\n]')
_FIELD = re.compile(r'"((?:[^"]|"")*)"|([^,"\r\n]*)')


def format_of(path: str, given: str | None) -> str:
    """The format to use: ``given``, else from the file name (``.csv`` → csv, anything else jsonl)."""
    if given:
        if given not in FORMATS:
            raise ValueError(f"unknown format {given!r}; use one of {', '.join(FORMATS)}")
        return given
    return "csv" if path.lower().endswith(".csv") else "jsonl"


def _invalid(where: str, message: str) -> TableError:
    return TableError("InvalidInput", f"{where}: {message}")


# --- JSON lines ----------------------------------------------------------------------------------


def jsonl_line(pk: str, rk: str, ts: int, props: dict[str, list[Any]]) -> str:
    """One entity (wire form) as a JSON line, newline included."""
    return json.dumps(typed_to_json(pk, rk, ts, props, "minimal"), ensure_ascii=False,
                      separators=(",", ":")) + "\n"


def parse_jsonl(line: str, where: str = "line") -> Typed | None:
    """A JSON line as ``(pk, rk, typed props)``, validated like a write; None for a blank line.
    Raises TableError (InvalidInput, with ``where`` in the message)."""
    if not line.strip():
        return None
    try:
        body = json.loads(line)
    except ValueError as exc:
        raise _invalid(where, f"not JSON: {exc}") from None
    return _typed(body, where)


def _typed(body: dict[str, Any], where: str) -> Typed:
    """An Azure-JSON entity as ``(pk, rk, typed props)``, validated; the error names ``where``."""
    try:
        pk, rk, props = json_to_typed(body)
        validate_entity(pk, rk, props)
    except TableError as exc:
        raise _invalid(where, f"{exc.error_code}: {exc.message}") from None
    return pk, rk, props


# --- CSV -----------------------------------------------------------------------------------------


def columns_of(entities: Iterable[dict[str, list[Any]]], known: Iterable[Column] = ()) -> list[Column]:
    """The typed columns needed for these entities' properties (plus ``known``), sorted by name and type."""
    cols = set(known)
    for props in entities:
        for name, (code, _v) in props.items():
            cols.add((name, code))
    return sorted(cols)


def _cell(text: str | None) -> str:
    if text is None:
        return ""
    if not text or _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_header(columns: list[Column]) -> str:
    """The typed header line (newline included)."""
    return ",".join([*KEY_COLUMNS, *(_cell(f"{n}:{TYPE_NAMES[c]}") for n, c in columns)]) + "\r\n"


def value_text(code: int, v: Any) -> str:
    """A typed value as CSV cell text."""
    if code == STRING:
        return v
    if code == INT32 or code == INT64:
        return str(v)
    if code == DOUBLE:
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if code == BOOLEAN:
        return "true" if v else "false"
    if code == DATETIME:
        return ticks_to_iso(v, full=True)
    if code == BINARY:
        return base64.b64encode(v).decode("ascii")
    return v  # Guid


def csv_line(pk: str, rk: str, ts: int, props: dict[str, list[Any]], columns: list[Column],
             index: dict[Column, int] | None = None) -> str:
    """One entity as a CSV record under ``columns``; raises KeyError naming a property not among them."""
    index = index if index is not None else {c: i for i, c in enumerate(columns)}
    cells: list[str | None] = [None] * len(columns)
    for name, (code, v) in props.items():
        i = index.get((name, code))
        if i is None:
            raise KeyError(f"{name}:{TYPE_NAMES[code]}")
        cells[i] = value_text(code, v)
    return ",".join([_cell(pk), _cell(rk), _cell(ticks_to_iso(ts, full=True)), *map(_cell, cells)]) + "\r\n"


def split_record(text: str) -> list[str | None]:
    """The fields of one CSV record (its line end stripped): text, or None for an empty unquoted field."""
    out: list[str | None] = []
    pos, n = 0, len(text)
    while True:
        m = _FIELD.match(text, pos)
        assert m is not None  # the second alternative matches the empty string
        quoted, plain = m.groups()
        out.append(quoted.replace('""', '"') if quoted is not None else (plain or None))
        pos = m.end()
        if pos == n:
            return out
        if text[pos] != ",":
            raise ValueError(f"unexpected {text[pos]!r} at character {pos + 1}")
        pos += 1


def records(f: IO[bytes]) -> Iterator[tuple[str, int]]:
    """CSV records of a binary file as (text without its line end, bytes consumed): a quoted field may
    span lines. Starts at the file's current position."""
    buf, size = "", 0
    for raw in f:
        size += len(raw)
        buf += raw.decode("utf-8")
        if buf.count('"') % 2:
            continue  # inside a quoted field: the record goes on on the next line
        yield buf.rstrip("\r\n") if buf.endswith("\n") else buf, size
        buf, size = "", 0
    if buf:
        yield buf, size


def parse_header(text: str) -> list[Column]:
    """The typed columns of a header record (after PartitionKey, RowKey[, Timestamp])."""
    fields = split_record(text)
    if [f for f in fields[:2]] != ["PartitionKey", "RowKey"]:
        raise _invalid("header", "the first two columns must be PartitionKey and RowKey")
    cols: list[Column] = []
    for f in fields[2:]:
        if f == "Timestamp" and not cols:
            cols.append(("Timestamp", -1))  # read and ignored
            continue
        name, _, type_name = (f or "").rpartition(":")
        code = _CODE_BY_NAME.get(type_name)
        if not name or code is None:
            raise _invalid("header", f"column {f!r} is not name:Edm.Type (e.g. qty:Edm.Int32)")
        cols.append((name, code))
    return cols


def parse_csv(text: str, columns: list[Column], where: str = "record") -> Typed | None:
    """One CSV record as ``(pk, rk, typed props)`` under the header's columns, validated like a write;
    None for a blank record. Raises TableError (InvalidInput, with ``where`` in the message)."""
    if not text.strip():
        return None
    try:
        fields = split_record(text)
    except ValueError as exc:
        raise _invalid(where, str(exc)) from None
    if len(fields) != len(columns) + 2:
        raise _invalid(where, f"{len(fields)} fields, the header has {len(columns) + 2}")
    body: dict[str, Any] = {"PartitionKey": fields[0] or "", "RowKey": fields[1] or ""}
    for (name, code), cell in zip(columns, fields[2:], strict=True):
        if cell is None or code < 0:
            continue
        if name in body:
            raise _invalid(where, f"property {name!r} has a value in two typed columns")
        body[name], body[name + "@odata.type"] = cell, TYPE_NAMES[code]
    return _typed(body, where)
