"""Stage 5 of the HTTP pipeline — render: the response, its standard headers, Azure's error bodies, CORS.

Every response leaves through :func:`finish` (request id, version, Date, the client request id echo,
CORS, length). Errors become Azure's error bodies — ``odata.error`` JSON for OData operations, XML for
the others — with ``x-ms-error-code``; nothing a client sends produces a 5xx or a stack trace.
"""

from __future__ import annotations

import logging
import time
from email.utils import formatdate
from typing import Any

from frontend.http import odata
from frontend.http.parse import DEFAULT_VERSION, VERSION_HEADERS, Request
from frontend.metrics import Answers
from rangetable.errors import TableError

log = logging.getLogger("rangetable.http")

ODATA_HEADERS = [(b"cache-control", b"no-cache"), (b"x-content-type-options", b"nosniff"),
                 (b"dataserviceversion", b"3.0;")]
XML_TYPE = (b"content-type", b"application/xml")
NO_MATCH: dict = {}  # CORS rules exist, none matched: the answer only says Vary: Origin
_DEFAULT_VERSION_HEADER = DEFAULT_VERSION.encode()


_date_cache: list[Any] = [0, b""]


def http_date() -> bytes:
    """The current time as RFC 1123 (cached per second)."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0] = now
        _date_cache[1] = formatdate(now, usegmt=True).encode()
    return _date_cache[1]


def iso_now() -> str:
    """The current time as Azure prints it in error messages."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e7):07d}Z"


class Response:
    """What an operation answers."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]] | None = None, body: bytes = b"") -> None:
        self.status = status
        self.headers = headers if headers is not None else []
        self.body = body


def odata_headers(rq: Request, with_body: bool) -> list[tuple[bytes, bytes]]:
    """The headers of an OData answer (with the content type of ``rq``'s metadata level for a body)."""
    h = list(ODATA_HEADERS)
    if with_body:
        h.append((b"content-type", odata.CONTENT_TYPES[rq.level]))
    return h


def any_origin(rule: dict) -> bool:
    """Whether a CORS rule allows every origin."""
    return "*" in [o.strip() for o in (rule.get("AllowedOrigins") or "").split(",")]


def cors_headers(rule: dict, origin: str) -> list[tuple[bytes, bytes]]:
    """Response headers for a request whose Origin matched ``rule`` (:data:`NO_MATCH`: only ``Vary``,
    so that caches keep answers to different origins apart, as Azure does)."""
    if not rule:
        return [(b"vary", b"Origin")]
    star = any_origin(rule)
    h = [(b"access-control-allow-origin", b"*" if star else origin.encode("latin-1"))]
    exposed = rule.get("ExposedHeaders")
    if exposed:
        h.append((b"access-control-expose-headers", exposed.encode("latin-1")))
    if not star:
        h += [(b"access-control-allow-credentials", b"true"), (b"vary", b"Origin")]
    return h


def finish(rq: Request, resp: Response, answers: Answers) -> Response:
    """Add the standard headers (request id, version, Date, client request id echo, CORS, length) and
    count the answer in ``answers``."""
    h = resp.headers
    version = VERSION_HEADERS.get(rq.version, _DEFAULT_VERSION_HEADER)  # an unknown version is never echoed
    h += ((b"x-ms-request-id", rq.request_id.encode()), (b"x-ms-version", version), (b"date", http_date()))
    crid = rq.headers.get("x-ms-client-request-id")
    if crid is not None:
        h.append((b"x-ms-client-request-id", crid[:1024].encode("latin-1", "replace")))
    if rq.cors_rule is not None:
        h.extend(cors_headers(rq.cors_rule, rq.headers.get("origin", "")))
    h.append((b"content-length", b"%d" % len(resp.body)))
    answers.note(rq.method, str(resp.status))
    return resp


def error_response(rq: Request, exc: TableError, detail: str | None = None) -> Response:
    """An Azure error response (JSON ``odata.error`` or XML ``<Error>``)."""
    status = exc.status_code
    if exc.error_code in ("NotPrimary", "RangeBusy"):
        exc, status = TableError("ServerBusy", exc.message), 503
    headers = [(b"x-ms-error-code", exc.error_code.encode())]
    if rq.xml_errors or exc.error_code.startswith(("Authentication", "Authorization")) \
            or exc.error_code in ("InvalidXmlDocument", "CorsPreflightFailure"):
        body = odata.error_xml(exc, rq.request_id, iso_now(), detail or getattr(exc, "detail", None))
        headers.append((b"content-type", b"application/xml"))
    else:
        body = odata.error_json(exc, rq.request_id, iso_now())
        headers.append((b"content-type", odata.CONTENT_TYPES[odata.MINIMAL]))
        headers.append((b"dataserviceversion", b"3.0;"))
    if exc.retriable:
        headers.append((b"retry-after", b"1"))
    return Response(status, headers, body)


def failure(rq: Request, exc: Exception) -> Response:
    """The error response for an exception a stage raised (500 for anything but a TableError)."""
    if isinstance(exc, TableError):
        return error_response(rq, exc)
    log.error("request %s %s failed", rq.method, rq.raw_path, exc_info=exc)
    return error_response(rq, TableError("InternalError", f"{type(exc).__name__}"))
