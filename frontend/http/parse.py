"""Stage 1 of the HTTP pipeline — parse: the request object, the effective verb and the URL.

The pipeline of one request (:mod:`frontend.http.app` runs it): **parse** (this module) →
**authenticate** (:mod:`frontend.http.security`) → **plan** (:mod:`frontend.http.routes` picks the
operation of :mod:`~frontend.http.entity_ops`, :mod:`~frontend.http.table_ops` or
:mod:`~frontend.http.batch_ops`; a CORS preflight goes to :mod:`~frontend.http.cors`) → **send** (:mod:`frontend.native.asyncio_driver`) →
**render** (:mod:`frontend.http.render`). No stage imports :mod:`frontend.http.app`: the operations
see the app through the narrow :class:`Services` protocol defined here.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, unquote

from frontend.http import odata
from rangetable.errors import TableError

if TYPE_CHECKING:
    from frontend.http.security import Security

# --- the URL: Azure Table URL shapes -> a Resource (reference §1.1), pure, no I/O ---------------------
#
# Path style ``/{account}/{resource}`` (what the SDK and Azurite use on 127.0.0.1) and production style
# ``http://{account}.table.{...}/{resource}`` are both understood. The resource part is percent-decoded
# *before* it is parsed (the raw path is kept for signatures); inside ``'…'`` a doubled quote stands for
# one quote. Shapes:
#
# =========================================  ==========
# ``""`` (account root, with ``restype``)    service
# ``Tables`` / ``Tables()``                  tables
# ``Tables('name')``                         table
# ``$batch``                                 batch
# ``name`` / ``name()``                      entities
# ``name(PartitionKey='p',RowKey='r')``      entity
# ``name/$changes``                          changes (rangetable's change feed, docs/changes.md)
# ``name/$indexes``                          indexes (rangetable's secondary indexes, docs/indexes.md)
# ``name/$indexes/index``                    index
# =========================================  ==========

SECONDARY_SUFFIX = "-secondary"
_PROD_HOST = re.compile(r"^([a-z0-9]+)(-secondary)?\.table\.", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z0-9$_.-]*")  # what may precede "(" (validated later by the op)
_PLAIN_KEYS = re.compile(r"PartitionKey='([^']*)',RowKey='([^']*)'")  # the SDK's form: parse_keys' fast path
_host_accounts: dict[str, str | None] = {}  # Host header -> the account it names (production style) or None
_shapes: dict[tuple, tuple] = {}  # parse_resource's memory


@dataclass
class Resource:
    """What a request URL addresses."""

    kind: str  # service | tables | table | batch | entities | entity | changes | indexes | index
    account: str
    secondary: bool = False
    table: str | None = None
    pk: str | None = None
    rk: str | None = None
    query: dict[str, list[str]] = field(default_factory=dict)
    index: str | None = None  # the index a ``name/$indexes/index`` URL names

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
            kind, account, secondary, table, pk, rk, index = shape
            return Resource(kind, account, secondary, table, pk, rk, query, index)
        res = _parse_resource(raw_path, query, host)
        _remember((raw_path, host), (res.kind, res.account, res.secondary, res.table, res.pk, res.rk, res.index))
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
    rest = rest.rstrip("/")
    if "/" in rest:
        return _changes(res, rest)
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


CHANGES = "$changes"
INDEXES = "$indexes"
GEO = "$geo"


def _changes(res: Resource, rest: str) -> Resource:
    """``{table}/$changes``: a table's change feed; ``{table}/$indexes[/{index}]``: its secondary indexes;
    ``{table}/$geo``: its cut on a secondary cluster (the only resources with more than one segment)."""
    name, _, tail = rest.partition("/")
    name = name if "%" not in name else _decode(name)
    tail = tail if "%" not in tail else _decode(tail)
    if not name or _NAME.fullmatch(name) is None or name.lower() == "tables" or name.startswith("$") or "$" in name:
        raise bad_uri()
    res.table = name
    if tail == CHANGES or tail == GEO:
        res.kind = "changes" if tail == CHANGES else "geo"
        return res
    first, _, index = tail.partition("/")
    if first != INDEXES or "/" in index:
        raise bad_uri()
    res.kind = "index" if index else "indexes"
    res.index = index or None
    return res


# --- the version ------------------------------------------------------------------------------------

# The ``x-ms-version`` values the REST API serves. Azure answers 400 ``InvalidHeaderValue`` for a
# version it does not know (Azurite does the same with its list). The table is Azure Storage's published
# service versions, 2009-04-14 up to 2025-11-05; the operations and payloads rangetable serves are the
# same under every one of them (JSON payloads need 2013-08-15 or later, which every current client
# sends). A request without the header is served as DEFAULT_VERSION, the version the SDKs send.
DEFAULT_VERSION = "2019-02-02"

SUPPORTED_VERSIONS: frozenset[str] = frozenset((
    "2009-04-14", "2009-07-17", "2009-09-19", "2011-08-18", "2012-02-12", "2013-08-15", "2014-02-14",
    "2015-02-21", "2015-04-05", "2015-07-08", "2015-12-11", "2016-05-31", "2017-04-17", "2017-07-29",
    "2017-11-09", "2018-03-28", "2018-11-09", "2019-02-02", "2019-07-07", "2019-10-10", "2019-12-12",
    "2020-02-10", "2020-04-08", "2020-06-12", "2020-08-04", "2020-10-02", "2020-12-06", "2021-02-12",
    "2021-04-10", "2021-06-08", "2021-08-06", "2021-10-04", "2021-12-02", "2022-11-02", "2023-01-03",
    "2023-05-03", "2023-08-03", "2023-11-03", "2024-02-04", "2024-05-04", "2024-08-04", "2024-11-04",
    "2025-01-05", "2025-05-05", "2025-07-05", "2025-11-05",
))

VERSION_HEADERS: dict[str, bytes] = {v: v.encode() for v in SUPPORTED_VERSIONS}  # the echoed header's bytes


def check_version(value: str | None) -> str:
    """The service version a request asks for; 400 InvalidHeaderValue for one not in the table."""
    if value is None:
        return DEFAULT_VERSION
    if value in SUPPORTED_VERSIONS:
        return value
    raise TableError("InvalidHeaderValue",
                     f"The value for one of the HTTP headers is not in the correct format. x-ms-version: {value[:64]!r} "
                     "is not a supported service version.")


MAX_BODY = 4 * 1024 * 1024  # larger bodies get 413 RequestBodyTooLarge
DRAIN_LIMIT = 64 * 1024 * 1024  # beyond this we stop reading and answer at once
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "MERGE", "PATCH", "DELETE", "OPTIONS"})
XMETHODS = frozenset({"GET", "MERGE", "PATCH", "DELETE"})
MULTIPLE = "\x00multiple"  # the value standing for a repeated X-HTTP-Method header

_RID_PREFIX = str(uuid.uuid4())[:24]
_rid_counter = itertools.count(1)
READS = frozenset({"GET", "HEAD"})  # the verbs a read-only secondary serves


class NativeFrontend(Protocol):
    """What the operations use of :class:`frontend.native.asyncio_driver.AioFrontend` (the send stage)."""

    async def request(self, req: dict, timeout: float | None = None) -> Any:
        """Run one native request and return its result; raises TableError."""


class Services(Protocol):
    """What an operation may use of the app: the native frontend, the security stage, the table ACLs
    and the cached service properties (implemented by :class:`frontend.http.app.RestApp`)."""

    fe: NativeFrontend
    security: Security

    async def fetch_acl(self, table: str) -> dict:
        """The stored access policies of ``table``."""

    async def service_properties(self, fresh: bool = False) -> dict:
        """The service properties (cached for a few seconds)."""

    def forget_properties(self) -> None:
        """Drop the cached service properties."""

    @property
    def geo_role(self) -> str:
        """The cluster's geo role (``docs/geo.md``): ``primary``; ``fenced`` or ``secondary`` take no writes."""

    async def last_sync_time(self) -> float | None:
        """The ``-secondary`` endpoint's LastSyncTime, wall-clock seconds (cached for a second; None: bootstrap)."""


def next_request_id() -> str:
    """A UUID-shaped request id, unique per process run (a random prefix and a counter)."""
    return f"{_RID_PREFIX}{next(_rid_counter) & 0xFFFFFFFFFFFF:012x}"


class Request:
    """One HTTP request as the operations see it."""

    __slots__ = ("method", "raw_path", "query_string", "query", "headers", "host", "scheme", "body",
                 "request_id", "version", "res", "auth", "xml_errors", "level", "cors_rule", "client_ip", "ctx",
                 "_base")

    def __init__(self, method: str, raw_path: str, query_string: str, headers: dict[str, str],
                 client_ip: str | None = None, scheme: str = "http") -> None:
        self.method: str = method.upper()
        self.raw_path: str = raw_path
        self.query_string: str = query_string
        self.headers: dict[str, str] = headers  # lower-case names; a repeated X-HTTP-Method is "\x00multiple"
        self.host: str = headers.get("host") or "127.0.0.1"
        self.scheme: str = scheme
        self.client_ip: str | None = client_ip
        self.body = b""
        self.request_id = next_request_id()
        self.version = headers.get("x-ms-version") or DEFAULT_VERSION
        self.query: dict[str, list[str]] = {}
        self.res: Resource | None = None
        self.auth: Any = None
        self.xml_errors = False
        self.level = odata.MINIMAL
        self.cors_rule: dict | None = None
        self.ctx: Any = None  # what an operation keeps between its native request and its answer
        self._base: str | None = None

    @classmethod
    def from_scope(cls, scope: dict) -> Request:
        """The request an ASGI ``http`` scope describes (the body is read separately)."""
        raw = scope.get("raw_path")
        raw_path = raw.decode("latin-1").split("?", 1)[0] if raw else scope["path"]
        headers: dict[str, str] = {}
        xm = 0
        for k, v in scope["headers"]:
            name = k.decode("latin-1").lower()
            if name == "x-http-method":
                xm += 1
            headers[name] = v.decode("latin-1")
        if xm > 1:
            headers["x-http-method"] = MULTIPLE
        client = scope.get("client")
        return cls(scope["method"], raw_path, (scope.get("query_string") or b"").decode("latin-1"), headers,
                   client[0] if client else None, scope.get("scheme") or "http")

    def param(self, name: str) -> str | None:
        """The first value of a query parameter."""
        v = self.query.get(name)
        return v[0] if v else None

    @property
    def base(self) -> str:
        """The account's base URL as the client addressed it (for odata.metadata links)."""
        base = self._base
        if base is None:
            assert self.res is not None
            first = self.raw_path.lstrip("/").split("/", 1)[0]
            if first == self.res.account or not self.res.account:
                base = f"{self.scheme}://{self.host}/{self.res.account}"
            elif self.res.secondary and first == self.res.account + SECONDARY_SUFFIX:
                base = f"{self.scheme}://{self.host}/{first}"  # links of a secondary read stay on the secondary
            else:
                base = f"{self.scheme}://{self.host}"
            self._base = base
        return base


def parse(rq: Request, too_big: bool) -> tuple[str, str | None]:
    """The first stage of every request: the effective verb, the URL, the error flavour and metadata
    level (set on ``rq``); returns ``(verb, comp)``. Raises TableError for a request it refuses."""
    if too_big:
        raise TableError("RequestBodyTooLarge")
    method = rq.method
    if method not in KNOWN_METHODS:
        raise TableError("MethodNotAllowed", f"The HTTP verb {method!r} is not supported.")
    xm = rq.headers.get("x-http-method")
    if xm is not None:
        if xm == MULTIPLE:
            raise TableError("XMethodIncorrectCount")
        if method != "POST":
            raise TableError("XMethodNotUsingPost")
        if xm.upper() not in XMETHODS:
            raise TableError("XMethodIncorrectValue")
        method = xm.upper()
    if rq.query_string:
        rq.query = parse_query(rq.query_string)
    res = rq.res = parse_resource(rq.raw_path, rq.query, rq.host)
    comp = rq.param("comp") if rq.query else None
    kind = res.kind
    rq.xml_errors = kind == "service" or comp is not None or method == "OPTIONS"
    if method != "OPTIONS" and not rq.xml_errors and kind != "batch":
        rq.level = odata.metadata_level(rq.headers.get("accept"), rq.param("$format") if rq.query else None)
    if method != "OPTIONS":
        version = rq.headers.get("x-ms-version")
        if version:
            rq.version = check_version(version)
    return method, comp


def refuse_secondary_write(res: Resource, method: str, geo_role: Callable[[], str] = lambda: "primary") -> None:
    """403 InsufficientAccountPermissions for anything but a read on the ``-secondary`` account, and on every
    account of a cluster whose ``geo_role()`` is not ``primary`` (a secondary cluster's, or one failing over to
    it: ``docs/geo.md``; asked of writes only): like Azure's read-access geo-redundant secondary, it serves reads
    (queries, gets, ACL, service properties and stats) and refuses writes."""
    if method not in READS and (res.secondary or geo_role() != "primary"):
        raise TableError("InsufficientAccountPermissions", "Write operations are not allowed.")
