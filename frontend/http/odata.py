"""OData JSON for the REST API: metadata levels, entity and table bodies, tokens, error bodies.

The payload format itself is specified by :func:`rangetable.values.typed_to_json` (reference §2).
Query pages hold up to 1000 entities, so :func:`entity_text` writes an entity's JSON text directly
(about 5× faster than building the dict and ``json.dumps``); ``tests/test_rest_units.py`` checks it
against ``typed_to_json`` for every type and metadata level.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring_ascii as _esc
from typing import Any

from frontend.http.urls import entity_path
from rangetable.edm import TICKS_PER_SECOND, TYPE_NAMES
from rangetable.errors import TableError

NO, MINIMAL, FULL = "nometadata", "minimalmetadata", "fullmetadata"
_LEVEL_NAMES = {NO: NO, MINIMAL: MINIMAL, FULL: FULL}
CONTENT_TYPES = {lv: f"application/json;odata={lv};streaming=true;charset=utf-8".encode() for lv in _LEVEL_NAMES}

# --- metadata level -------------------------------------------------------------------------------


def metadata_level(accept: str | None, fmt: str | None = None) -> str:
    """The response metadata level from ``$format`` (wins) or ``Accept``; plain JSON or none → minimal.

    Atom/XML-only requests raise 415 AtomFormatNotSupported.
    """
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
_heads: dict[int, str] = {}


def iso_ticks(ticks: int, full: bool = True) -> str:
    """``ticks`` as ``YYYY-MM-DDTHH:MM:SS[.fffffff]Z`` (same text as ``edm.ticks_to_iso``, cached by second)."""
    seconds, frac = divmod(ticks, TICKS_PER_SECOND)
    head = _heads.get(seconds)
    if head is None:
        dt = _EPOCH + timedelta(seconds=seconds)
        head = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
        if len(_heads) > 4096:
            _heads.clear()
        _heads[seconds] = head
    if full:
        return f"{head}.{frac:07d}Z"
    if frac == 0:
        return head + "Z"
    return f"{head}.{frac:07d}".rstrip("0") + "Z"


def etag_of(ticks: int) -> str:
    """Azure's ETag for a Timestamp (same text as ``edm.etag_from_ticks``)."""
    return "W/\"datetime'" + iso_ticks(ticks).replace(":", "%3A") + "'\""


# --- entities ---------------------------------------------------------------------------------------

_names: dict[str, tuple[str, str]] = {}  # property name -> ('"Name":', '"Name@odata.type":')
_TYPE_JSON = [_esc(n) for n in TYPE_NAMES]


def _name(name: str) -> tuple[str, str]:
    t = _names.get(name)
    if t is None:
        t = (_esc(name) + ":", _esc(name + "@odata.type") + ":")
        if len(_names) > 65536:
            _names.clear()
        _names[name] = t
    return t


def _value(out: list[str], name: str, code: int, v: Any, annotate: bool) -> None:
    key, ann = _name(name)
    if code == 0:
        out.append(key + _esc(v))
    elif code == 1:
        out.append(key + str(int(v)))
    elif code == 4:
        out.append(key + ("true" if v else "false"))
    elif code == 3:
        if math.isfinite(v):
            out.append(key + float.__repr__(float(v)))
            return
        text = "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
        if annotate:
            out.append(ann + '"Edm.Double"')
        out.append(key + '"' + text + '"')
    else:
        if code == 2:
            text = f'"{v}"'
        elif code == 5:
            text = '"' + iso_ticks(v, full=False) + '"'
        elif code == 6:
            text = _esc(v)
        elif code == 7:
            text = '"' + base64.b64encode(v).decode("ascii") + '"'
        else:
            raise TableError("InternalError", f"unknown type code {code!r}")
        if annotate:
            out.append(ann + _TYPE_JSON[code])
        out.append(key + text)


def entity_text(
    ent: list, level: str, *, select: list[str] | None = None, prefix: str = "", base: str = "",
    account: str = "", table: str = "",
) -> str:
    """The JSON text of an entity ``[pk, rk, ts, props]`` with its ``odata.*`` members.

    ``prefix`` is prepended inside the object (e.g. ``"odata.metadata":"…",`` for a single entity).
    Minimal and full metadata add ``odata.etag``; full adds ``odata.type``/``odata.id``/
    ``odata.editLink`` (from ``base``, ``account`` and ``table``) and ``Timestamp@odata.type``.
    """
    pk, rk, ts, props = ent
    out: list[str] = []
    annotate = level != NO
    iso = iso_ticks(ts)
    if annotate:
        if level == FULL:
            link = entity_path(table, pk, rk)
            out.append('"odata.type":' + _esc(f"{account}.{table}"))
            out.append('"odata.id":' + _esc(f"{base}/{link}"))
        out.append('"odata.etag":"W/\\"datetime\'' + iso.replace(":", "%3A") + '\'\\""')
        if level == FULL:
            out.append('"odata.editLink":' + _esc(link))
    everything = not select or "*" in select
    if everything:
        out.append('"PartitionKey":' + _esc(pk))
        out.append('"RowKey":' + _esc(rk))
        if level == FULL:
            out.append('"Timestamp@odata.type":"Edm.DateTime"')
        out.append('"Timestamp":"' + iso + '"')
        names = _names
        for name, pair in props.items():
            code, v = pair
            if code == 0 or code == 1 or code == 4:  # the common cases inline: String, Int32, Boolean
                key = names.get(name)
                if key is None:
                    key = _name(name)
                out.append(key[0] + (_esc(v) if code == 0 else str(int(v)) if code == 1 else
                                     ("true" if v else "false")))
            else:
                _value(out, name, code, v, annotate)
    else:
        wanted = dict.fromkeys(select)
        if "PartitionKey" in wanted:
            out.append('"PartitionKey":' + _esc(pk))
        if "RowKey" in wanted:
            out.append('"RowKey":' + _esc(rk))
        if "Timestamp" in wanted:
            if level == FULL:
                out.append('"Timestamp@odata.type":"Edm.DateTime"')
            out.append('"Timestamp":"' + iso + '"')
        for name in wanted:
            if name in ("PartitionKey", "RowKey", "Timestamp"):
                continue
            pair = props.get(name)
            if pair is None:
                out.append(_name(name)[0] + "null")
            else:
                _value(out, name, pair[0], pair[1], annotate)
    return "{" + prefix + ",".join(out) + "}"


def metadata_prefix(level: str, base: str, fragment: str) -> str:
    """``"odata.metadata":"{base}/$metadata#{fragment}",`` (or nothing for nometadata)."""
    if level == NO:
        return ""
    return '"odata.metadata":' + _esc(f"{base}/$metadata#{fragment}") + ","


def entity_feed(ents: list, level: str, base: str, account: str, table: str, select: list[str] | None) -> bytes:
    """A Query Entities body: ``{"odata.metadata":…,"value":[…]}``."""
    items = ",".join(
        entity_text(e, level, select=select, base=base, account=account, table=table) for e in ents
    )
    return ("{" + metadata_prefix(level, base, table) + '"value":[' + items + "]}").encode()


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
