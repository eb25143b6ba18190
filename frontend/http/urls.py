"""Azure Table URL shapes → a :class:`Resource` (reference §1.1). Pure, no I/O.

Path style ``/{account}/{resource}`` (what the SDK and Azurite use on 127.0.0.1) and production style
``http://{account}.table.{...}/{resource}`` are both understood. The resource part is percent-decoded
*before* it is parsed (the raw path is kept for signatures); inside ``'…'`` a doubled quote stands for
one quote. Shapes:

=========================================  ==========
``""`` (account root, with ``restype``)    service
``Tables`` / ``Tables()``                  tables
``Tables('name')``                         table
``$batch``                                 batch
``name`` / ``name()``                      entities
``name(PartitionKey='p',RowKey='r')``      entity
=========================================  ==========
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, unquote

from rangetable.errors import TableError

SECONDARY_SUFFIX = "-secondary"
_PROD_HOST = re.compile(r"^([a-z0-9]+)(-secondary)?\.table\.", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z0-9$_.-]*")  # what may precede "(" (validated later by the op)
_PLAIN_KEYS = re.compile(r"PartitionKey='([^']*)',RowKey='([^']*)'")  # the SDK's form: parse_keys' fast path
_host_accounts: dict[str, str | None] = {}  # Host header -> the account it names (production style) or None
_shapes: dict[tuple, tuple] = {}  # parse_resource's memory


@dataclass
class Resource:
    """What a request URL addresses."""

    kind: str  # service | tables | table | batch | entities | entity
    account: str
    secondary: bool = False
    table: str | None = None
    pk: str | None = None
    rk: str | None = None
    query: dict[str, list[str]] = field(default_factory=dict)

    def param(self, name: str) -> str | None:
        """The first value of a query parameter, or None."""
        v = self.query.get(name)
        return v[0] if v else None


def bad_uri(message: str = "The requested URI does not represent any resource on the server.") -> TableError:
    """The error for a URL that names no resource."""
    return TableError("InvalidUri", message)


def _decode(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise bad_uri("The request URI is not valid UTF-8 after percent-decoding.") from None


def parse_query(raw: bytes | str) -> dict[str, list[str]]:
    """Decode a query string into name → values (blank values kept); 400 InvalidUri when undecodable."""
    if isinstance(raw, bytes):
        raw = raw.decode("latin-1")
    if not raw:
        return {}
    try:
        return parse_qs(raw, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise TableError("InvalidQueryParameterValue") from None


def parse_keys(text: str) -> tuple[str, str]:
    """Parse ``PartitionKey='p',RowKey='r'`` (already percent-decoded) into ``(pk, rk)``.

    ``''`` inside a literal is one quote; spaces around the comma and ``=`` are tolerated; the
    properties may come in either order. Anything else raises 400 InvalidInput.
    """
    found: dict[str, str] = {}
    i, n = 0, len(text)
    while True:
        while i < n and text[i] == " ":
            i += 1
        j = text.find("=", i)
        if j < 0:
            break
        name = text[i:j].strip()
        i = j + 1
        while i < n and text[i] == " ":
            i += 1
        if i >= n or text[i] != "'":
            break
        i += 1
        parts = []
        while True:
            q = text.find("'", i)
            if q < 0:
                raise TableError("InvalidInput", "Unterminated key literal in the request URI.")
            parts.append(text[i:q])
            if q + 1 < n and text[q + 1] == "'":
                parts.append("'")
                i = q + 2
                continue
            i = q + 1
            break
        if name not in ("PartitionKey", "RowKey") or name in found:
            break
        found[name] = "".join(parts)
        while i < n and text[i] == " ":
            i += 1
        if i == n:
            if len(found) == 2:
                return found["PartitionKey"], found["RowKey"]
            break
        if text[i] != ",":
            break
        i += 1
    raise TableError(
        "InvalidInput",
        "The number of keys specified in the URI does not match number of key properties for the resource.",
    )


def _quoted(text: str) -> str:
    """The content of a ``'…'`` literal (with ``''`` un-doubled)."""
    if len(text) < 2 or text[0] != "'" or text[-1] != "'":
        raise bad_uri()
    inner = text[1:-1]
    if inner.replace("''", "").find("'") >= 0:
        raise bad_uri()
    return inner.replace("''", "'")


def split_account(raw_path: str, host: str | None) -> tuple[str, str]:
    """``(account, rest)`` of a raw (still percent-encoded) path; ``rest`` has no leading slash.

    The account is the first path segment unless the host is ``{account}.table.…`` (production style).
    """
    path = raw_path.lstrip("/")
    if host:
        named = _host_accounts.get(host, "")
        if named == "":
            m = _PROD_HOST.match(host.split(":", 1)[0])
            named = m.group(1) + (m.group(2) or "") if m is not None else None
            if len(_host_accounts) > 1024:
                _host_accounts.clear()
            _host_accounts[host] = named
        if named is not None:
            return named, path
    account, _, rest = path.partition("/")
    if not account:
        raise bad_uri("The request URI does not name an account.")
    return account if "%" not in account else _decode(account), rest


def parse_resource(raw_path: str, query: dict[str, list[str]], host: str | None = None) -> Resource:
    """Parse a request's raw path (and decoded query) into a :class:`Resource`; 400 InvalidUri if none.

    Parses are remembered per (path, Host): whole for a path without ``(`` (tables, collections), by
    their part before ``(`` for plain entity URLs (whose keys change with every request).
    """
    paren = raw_path.find("(")
    if paren < 0:
        shape = _shapes.get((raw_path, host))
        if shape is not None:
            return Resource(*shape, query=query)
        res = _parse_resource(raw_path, query, host)
        _remember((raw_path, host), (res.kind, res.account, res.secondary, res.table, res.pk, res.rk))
        return res
    plain = raw_path[-1] == ")" and "%" not in raw_path and "/" not in raw_path[paren:]
    if plain:  # nothing to decode, the keys in the last segment: the part before "(" decides the rest
        where = _shapes.get((raw_path[:paren], host, "("))
        if where is not None:
            m = _PLAIN_KEYS.fullmatch(raw_path, paren + 1, len(raw_path) - 1)
            if m is not None:
                return Resource("entity", where[0], where[1], where[2], m[1], m[2], query)
    res = _parse_resource(raw_path, query, host)
    if plain and res.kind == "entity":
        _remember((raw_path[:paren], host, "("), (res.account, res.secondary, res.table))
    return res


def _remember(key: tuple, shape: tuple) -> None:
    if len(_shapes) > 4096:
        _shapes.clear()
    _shapes[key] = shape


def _parse_resource(raw_path: str, query: dict[str, list[str]], host: str | None) -> Resource:
    account, rest = split_account(raw_path, host)
    secondary = account.endswith(SECONDARY_SUFFIX)
    if secondary:
        account = account[: -len(SECONDARY_SUFFIX)]
    res = Resource("service", account, secondary, query=query)
    if secondary and (rest == account or rest.startswith(account + "/")):
        rest = rest[len(account):].lstrip("/")  # SDK 12.7: /acct-secondary/acct/?restype=service&comp=stats
    if "/" in rest.rstrip("/"):
        raise bad_uri()
    rest = rest.rstrip("/")
    if rest == "":
        return res
    text = rest if "%" not in rest else _decode(rest)
    if text == "$batch":
        res.kind = "batch"
        return res
    paren = text.find("(")
    name = text if paren < 0 else text[:paren]
    args = None
    if paren >= 0:
        if not text.endswith(")"):
            raise bad_uri()
        args = text[paren + 1 : -1]
    if not name or _NAME.fullmatch(name) is None:
        raise bad_uri()
    if name.lower() == "tables":
        if args:
            res.kind = "table"
            res.table = _quoted(args.strip())
        else:
            res.kind = "tables"
        return res
    res.table = name
    if not args:
        res.kind = "entities"
        return res
    res.kind = "entity"
    m = _PLAIN_KEYS.fullmatch(args)
    res.pk, res.rk = m.groups() if m is not None else parse_keys(args)
    return res


def quote_key(value: str) -> str:
    """A key as it appears inside ``'…'`` in an edit link (quotes doubled, then percent-encoded)."""
    return quote(value.replace("'", "''"), safe="'()*!$&+,;=@:~")


def entity_path(table: str, pk: str, rk: str) -> str:
    """``table(PartitionKey='pk',RowKey='rk')`` with the keys escaped for a URL."""
    return f"{table}(PartitionKey='{quote_key(pk)}',RowKey='{quote_key(rk)}')"
