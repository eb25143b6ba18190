"""OData JSON for the REST API: metadata levels, entity and table bodies, tokens, error bodies.

The payload format itself is specified by :func:`rangetable.rest_json.typed_to_json` (reference §2).
Query pages hold up to 1000 entities and request bodies are decoded for every write, so both use
orjson where its result is provably what the stdlib gives (see :func:`parse_json_object` and
:func:`_dump`); ``tests/unit/test_rest_units.py`` and ``tests/unit/test_conversion_speed.py`` check the output
byte for byte against ``json.dumps`` of ``typed_to_json`` for every type and metadata level.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring_ascii as _esc
from typing import Any
from urllib.parse import quote

import orjson

from frontend.http.fastpath import parse_json_fast
from rangetable.edm import TICKS_PER_SECOND, TYPE_NAMES
from rangetable.errors import TableError

NO, MINIMAL, FULL = "nometadata", "minimalmetadata", "fullmetadata"
_LEVEL_NAMES = {NO: NO, MINIMAL: MINIMAL, FULL: FULL}
CONTENT_TYPES = {lv: f"application/json;odata={lv};streaming=true;charset=utf-8".encode() for lv in _LEVEL_NAMES}

# --- metadata level -------------------------------------------------------------------------------


_accept_levels: dict[str, str] = {}  # Accept header -> its level (clients send the same few values)


def metadata_level(accept: str | None, fmt: str | None = None) -> str:
    """The response metadata level from ``$format`` (wins) or ``Accept``; plain JSON or none → minimal.

    Atom/XML-only requests raise 415 AtomFormatNotSupported.
    """
    if not fmt and accept:
        level = _accept_levels.get(accept)
        if level is None:
            level = _level(accept, fmt)
            if len(_accept_levels) > 256:
                _accept_levels.clear()
            _accept_levels[accept] = level
        return level
    return _level(accept, fmt)


def _level(accept: str | None, fmt: str | None) -> str:
    text = fmt if fmt else accept
    if not text:
        return MINIMAL
    t = text.replace(" ", "").lower()
    i = t.find("odata=")
    if i >= 0:
        end = t.find(";", i)
        level = t[i + 6 : end if end >= 0 else None].split(",", 1)[0]
        if level in _LEVEL_NAMES:
            return level
        raise TableError("InvalidInput", f"Unknown odata metadata level {level!r}.")
    if "json" in t or "*/*" in t or t in ("", "*"):
        return MINIMAL
    if fmt and fmt.lower() == "json":
        return MINIMAL
    if "atom" in t or "xml" in t:
        raise TableError("AtomFormatNotSupported")
    return MINIMAL


# --- timestamps -------------------------------------------------------------------------------------

_EPOCH = datetime(1, 1, 1, tzinfo=UTC)
_heads: dict[int, tuple[str, str]] = {}  # second -> ("YYYY-MM-DDTHH:MM:SS", its ETag's start)
_days: dict[int, str] = {}  # day number -> "YYYY-MM-DDT"


def _head(seconds: int) -> tuple[str, str]:
    """The date-and-time text of a second since 0001-01-01, and ``W/"datetime'`` + its URL-encoded form."""
    head = _heads.get(seconds)
    if head is None:
        day, rest = divmod(seconds, 86400)
        date = _days.get(day)
        if date is None:
            dt = _EPOCH + timedelta(days=day)
            date = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T"
            if len(_days) > 4096:
                _days.clear()
            _days[day] = date
        text = f"{date}{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
        head = (text, "W/\"datetime'" + text.replace(":", "%3A"))
        if len(_heads) > 4096:
            _heads.clear()
        _heads[seconds] = head
    return head


def iso_ticks(ticks: int, full: bool = True) -> str:
    """``ticks`` as ``YYYY-MM-DDTHH:MM:SS[.fffffff]Z`` (same text as ``edm.ticks_to_iso``, cached by second)."""
    seconds, frac = divmod(ticks, TICKS_PER_SECOND)
    head = (_heads.get(seconds) or _head(seconds))[0]
    if full:
        return f"{head}.{frac:07d}Z"
    if frac == 0:
        return head + "Z"
    return f"{head}.{frac:07d}".rstrip("0") + "Z"


def etag_of(ticks: int) -> str:
    """Azure's ETag for a Timestamp (same text as ``edm.etag_from_ticks``)."""
    seconds, frac = divmod(ticks, TICKS_PER_SECOND)
    return f"{(_heads.get(seconds) or _head(seconds))[1]}.{frac:07d}Z'\""


# --- entities ---------------------------------------------------------------------------------------
#
# Entities are built as dicts and a page is serialised by orjson in one call. The result must be the
# bytes ``json.dumps`` (compact, ``ensure_ascii``) writes, so in "fragments" mode non-ASCII strings are
# pre-escaped and doubles below 1e-4 (where orjson's notation differs from ``repr``) pre-formatted as
# ``orjson.Fragment``; output orjson cannot match (non-ASCII names or URLs, U+007F, lone surrogates)
# is redone by ``json.dumps`` from plain dicts.

_annotations: dict[str, str] = {}  # property name -> "Name@odata.type"
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.~()*!$&+,;=@:-]*")  # keys that entity_path leaves as they are


def _dump(build: Callable[[bool], Any]) -> bytes:
    """``json.dumps(build(False))`` as compact ASCII bytes, via orjson of ``build(True)`` when it can."""
    try:
        raw = orjson.dumps(build(True))
        if raw.isascii() and raw.find(b"\x7f") < 0:  # find: bytes.__contains__ first tries an int
            return raw
    except orjson.JSONEncodeError:
        pass
    return json.dumps(build(False), separators=(",", ":")).encode()


def edit_link(table: str, pk: str, rk: str) -> str:
    """``entity_path(table, pk, rk)``, without the percent-encoding machinery for plain keys."""
    if _PLAIN_KEY.fullmatch(pk) and _PLAIN_KEY.fullmatch(rk):
        return f"{table}(PartitionKey='{pk}',RowKey='{rk}')"
    return entity_path(table, pk, rk)


def _str(v: str, fragments: bool) -> Any:
    return v if v.isascii() or not fragments else orjson.Fragment(_esc(v))


def _annotation(name: str) -> str:
    key = _annotations.get(name)
    if key is None:
        if len(_annotations) > 65536:
            _annotations.clear()
        key = _annotations[name] = name + "@odata.type"
    return key


def _put(d: dict[str, Any], name: str, code: int, v: Any, annotate: bool, fragments: bool) -> None:
    """Set property ``name`` (preceded by its annotation where one is due) in the entity dict ``d``."""
    if code == 0:
        d[name] = _str(v, fragments)
        return
    if code == 1 or code == 4:
        d[name] = int(v) if code == 1 else bool(v)
        return
    if code == 3:
        if math.isfinite(v):
            v = float(v)
            d[name] = orjson.Fragment(float.__repr__(v)) if fragments and -1e-4 < v < 1e-4 else v
            return
        text = "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    elif code == 2:
        text = str(v)
    elif code == 5:
        text = iso_ticks(v, full=False)
    elif code == 6:
        text = v if v.isascii() else _str(v, fragments)
    elif code == 7:
        text = base64.b64encode(v).decode("ascii")
    else:
        raise TableError("InternalError", f"unknown type code {code!r}")
    if annotate:
        d[_annotations.get(name) or _annotation(name)] = TYPE_NAMES[code]
    d[name] = text


def _entity_docs(ents: list, level: str, select: list[str] | None, base: str, account: str, table: str,
                 fragments: bool) -> list[dict[str, Any]]:
    """The dicts of entities ``[pk, rk, ts, props]``, ``odata.*`` members first."""
    annotate = level != NO
    full = level == FULL
    wanted = None if not select or "*" in select else dict.fromkeys(select)
    docs = []
    for pk, rk, ts, props in ents:
        seconds, frac = divmod(ts, TICKS_PER_SECOND)
        head = _heads.get(seconds) or _head(seconds)
        fraction = f".{frac:07d}Z"
        iso = head[0] + fraction
        d: dict[str, Any] = {}
        if annotate:
            if full:
                link = edit_link(table, pk, rk)
                d["odata.type"] = f"{account}.{table}"
                d["odata.id"] = f"{base}/{link}"
            d["odata.etag"] = head[1] + fraction + "'\""
            if full:
                d["odata.editLink"] = link
        if wanted is None:
            d["PartitionKey"] = pk if pk.isascii() else _str(pk, fragments)
            d["RowKey"] = rk if rk.isascii() else _str(rk, fragments)
            if full:
                d["Timestamp@odata.type"] = "Edm.DateTime"
            d["Timestamp"] = iso
            for name, pair in props.items():
                code, v = pair  # values are well-typed (see rangetable.edm): the common cases inline
                if code == 0:
                    d[name] = v if v.isascii() else _str(v, fragments)
                elif code == 1 or code == 4 or code == 3 and (v >= 1e-4 or v <= -1e-4) and v - v == 0.0:
                    d[name] = v
                else:
                    _put(d, name, code, v, annotate, fragments)
        else:
            if "PartitionKey" in wanted:
                d["PartitionKey"] = _str(pk, fragments)
            if "RowKey" in wanted:
                d["RowKey"] = _str(rk, fragments)
            if "Timestamp" in wanted:
                if full:
                    d["Timestamp@odata.type"] = "Edm.DateTime"
                d["Timestamp"] = iso
            for name in wanted:
                if name not in ("PartitionKey", "RowKey", "Timestamp"):
                    pair = props.get(name)
                    if pair is None:
                        d[name] = None
                    else:
                        _put(d, name, pair[0], pair[1], annotate, fragments)
        docs.append(d)
    return docs


def entity_text(
    ent: list, level: str, *, select: list[str] | None = None, prefix: str = "", base: str = "",
    account: str = "", table: str = "",
) -> str:
    """:func:`entity_bytes` as text."""
    return entity_bytes(ent, level, select=select, prefix=prefix, base=base, account=account,
                        table=table).decode()


def entity_bytes(
    ent: list, level: str, *, select: list[str] | None = None, prefix: str = "", base: str = "",
    account: str = "", table: str = "",
) -> bytes:
    """The JSON of an entity ``[pk, rk, ts, props]`` with its ``odata.*`` members, as UTF-8.

    ``prefix`` is prepended inside the object (e.g. ``"odata.metadata":"…",`` for a single entity).
    Minimal and full metadata add ``odata.etag``; full adds ``odata.type``/``odata.id``/
    ``odata.editLink`` (from ``base``, ``account`` and ``table``) and ``Timestamp@odata.type``. With
    ``select`` only those members appear (selected but missing properties as null); selecting a name
    that is also an ``odata.*`` member or an annotation sets that member (once, in its place).
    """
    raw = _dump(lambda fragments: _entity_docs([ent], level, select, base, account, table, fragments)[0])
    return b"{" + prefix.encode() + raw[1:] if prefix else raw


def metadata_prefix(level: str, base: str, fragment: str) -> str:
    """``"odata.metadata":"{base}/$metadata#{fragment}",`` (or nothing for nometadata)."""
    if level == NO:
        return ""
    return '"odata.metadata":' + _esc(f"{base}/$metadata#{fragment}") + ","


_element_prefixes: dict[tuple[str, str, str], str] = {}


def element_prefix(level: str, base: str, table: str) -> str:
    """``metadata_prefix(level, base, f"{table}/@Element")`` (single-entity bodies), cached."""
    key = (level, base, table)
    prefix = _element_prefixes.get(key)
    if prefix is None:
        if len(_element_prefixes) > 4096:
            _element_prefixes.clear()
        prefix = _element_prefixes[key] = metadata_prefix(level, base, f"{table}/@Element")
    return prefix


def entity_feed(ents: list, level: str, base: str, account: str, table: str, select: list[str] | None) -> bytes:
    """A Query Entities body: ``{"odata.metadata":…,"value":[…]}``."""

    def build(fragments: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {} if level == NO else {"odata.metadata": f"{base}/$metadata#{table}"}
        doc["value"] = _entity_docs(ents, level, select, base, account, table, fragments)
        return doc

    return _dump(build)


def table_item(name: str, level: str, base: str, account: str) -> dict[str, Any]:
    """One table as Query Tables lists it (no ``odata.metadata``)."""
    if level != FULL:
        return {"TableName": name}
    return {"odata.type": f"{account}.Tables", "odata.id": f"{base}/Tables('{name}')",
            "odata.editLink": f"Tables('{name}')", "TableName": name}


def table_single(name: str, level: str, base: str, account: str) -> bytes:
    """The Create Table echo / single table body."""
    doc: dict[str, Any] = {}
    if level != NO:
        doc["odata.metadata"] = f"{base}/$metadata#Tables/@Element"
    doc.update(table_item(name, level, base, account))
    return dumps(doc)


def table_feed(names: list[str], level: str, base: str, account: str) -> bytes:
    """A Query Tables body."""
    doc: dict[str, Any] = {}
    if level != NO:
        doc["odata.metadata"] = f"{base}/$metadata#Tables"
    doc["value"] = [table_item(n, level, base, account) for n in names]
    return dumps(doc)


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(obj, separators=(",", ":")).encode()


# --- request bodies ---------------------------------------------------------------------------------


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise TableError("DuplicatePropertiesSpecified")
    return d


def _no_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON")


def parse_json_object(body: bytes) -> dict[str, Any]:
    """Decode a JSON object body; 400 InvalidInput for anything else, DuplicatePropertiesSpecified on dups."""
    doc = parse_json_fast(body)  # orjson, when it provably gives what the plain decoder below would
    return doc if doc is not None else parse_json_plain(body)


def parse_json_plain(body: bytes) -> dict[str, Any]:
    """:func:`parse_json_object` by the stdlib decoder alone (the plain version of
    :func:`frontend.http.fastpath.parse_json_fast`)."""
    try:
        doc = json.loads(body, object_pairs_hook=_pairs, parse_constant=_no_constant)
    except TableError:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise TableError("InvalidInput", "The request body is not valid JSON.") from None
    if not isinstance(doc, dict):
        raise TableError("InvalidInput", "The request body must be a JSON object.")
    return doc


# --- continuation tokens ------------------------------------------------------------------------------

TOKEN_PREFIX = "1!"


def encode_token(text: str) -> str:
    """An opaque continuation token for a key part: ``1!`` + unpadded base64url of its UTF-8."""
    raw = base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).rstrip(b"=")
    return TOKEN_PREFIX + raw.decode("ascii")


def decode_token(token: str) -> str:
    """Inverse of :func:`encode_token`; 400 InvalidInput for a token we did not make."""
    if not token.startswith(TOKEN_PREFIX):
        raise TableError("InvalidInput", "The continuation token is not valid.")
    raw = token[len(TOKEN_PREFIX):]
    try:
        return base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=b"-_", validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise TableError("InvalidInput", "The continuation token is not valid.") from None


# --- errors -----------------------------------------------------------------------------------------


def error_message(exc: TableError, request_id: str, when: str, index: int | None = None) -> str:
    """The message text of an error body (``index:`` prefix for a batch operation)."""
    head = f"{index}:" if index is not None else ""
    return f"{head}{exc.message}\nRequestId:{request_id}\nTime:{when}"


def error_json(exc: TableError, request_id: str, when: str, index: int | None = None) -> bytes:
    """The ``odata.error`` body."""
    return dumps({"odata.error": {"code": exc.error_code, "message": {
        "lang": "en-US", "value": error_message(exc, request_id, when, index)}}})


def error_xml(exc: TableError, request_id: str, when: str, detail: str | None = None) -> bytes:
    """The XML ``<Error>`` body used by non-OData operations and authentication failures."""
    from xml.sax.saxutils import escape

    extra = f"<AuthenticationErrorDetail>{escape(detail)}</AuthenticationErrorDetail>" if detail else ""
    return (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{escape(exc.error_code)}</Code>'
            f"<Message>{escape(error_message(exc, request_id, when))}</Message>{extra}</Error>").encode()


def quote_key(value: str) -> str:
    """A key as it appears inside ``'…'`` in an edit link (quotes doubled, then percent-encoded)."""
    return quote(value.replace("'", "''"), safe="'()*!$&+,;=@:~")


def entity_path(table: str, pk: str, rk: str) -> str:
    """``table(PartitionKey='pk',RowKey='rk')`` with the keys escaped for a URL."""
    return f"{table}(PartitionKey='{quote_key(pk)}',RowKey='{quote_key(rk)}')"
