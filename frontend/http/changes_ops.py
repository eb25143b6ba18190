"""rangetable's REST extension: a table's change feed, ``GET /{account}/{Table}/$changes`` (``docs/changes.md``).

No Azure service has it; any HTTP client can read it, curl included. The query parameters say where the page
starts — ``cursor`` (an opaque cursor of :mod:`rangetable.feed_cursor`, the same strings the native client and
``rangetable changes`` print), else ``from`` (``beginning``, the default; ``now``; or an ISO 8601 time) — and
``top`` its records at most (1 to 10,000; 1,000 by default). The answer is ``application/x-ndjson``: one line
per record (:func:`rangetable.feed_page.record_json`) then one ``{"cursor", "resolved"}`` line
(:func:`rangetable.feed_page.end_json`); the final cursor is also in ``x-ms-continuation-cursor``. It is
authenticated like any read of the table: Shared Key, a bearer token, or a SAS with read permission (a SAS
with a key range sees only the records of keys in its range). One request is one page of the native
``changes`` request (:mod:`frontend.changes`).
"""

from __future__ import annotations

import json
from typing import Any

from frontend.http.parse import Request, Services
from frontend.http.render import Response
from frontend.http.security import check, sas_of
from rangetable import feed_cursor, feed_page
from rangetable.errors import TableError
from rangetable.keys import decode_key
from rangetable.messages import ChangesPageRequest

NDJSON = (b"content-type", b"application/x-ndjson")
CURSOR_HEADER = b"x-ms-continuation-cursor"


def _bad(name: str, why: str) -> TableError:
    return TableError("InvalidQueryParameterValue", f"The value of the query parameter {name} {why}.")


def page_request(table: str, rq: Request) -> ChangesPageRequest:
    """The native request of the page a ``$changes`` request asks for; 400 InvalidQueryParameterValue for a
    ``from``, ``cursor`` or ``top`` that is not one."""
    text = rq.param("top")
    try:
        top = feed_page.check_top(feed_page.DEFAULT_TOP if text is None else int(text))
    except (ValueError, TableError):
        raise _bad("top", f"is not a number from 1 to {feed_page.MAX_TOP}") from None
    try:
        start = feed_page.parse_start(rq.param("from") or feed_page.BEGINNING)
    except ValueError:
        raise _bad("from", "is not beginning, now or an ISO 8601 time") from None
    cursor = rq.param("cursor")
    try:
        first = feed_page.first(start, cursor)
    except TableError:
        raise _bad("cursor", "is not a change-feed cursor") from None
    return feed_page.request(table, top, first)


async def read_changes(app: Services, rq: Request) -> Response:
    """GET /{Table}/$changes — one page of the table's change feed as JSON lines."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: a $changes URL names its table
    check(rq.auth, "changes", res.table)
    out = await app.fe.request(dict(page_request(res.table, rq)))
    records = out["records"]
    sas = sas_of(rq.auth)
    if sas is not None and sas.has_key_range:
        records = [r for r in records if sas.in_range(*decode_key(r[1]))]
    lines = [_line(feed_page.record_json(r)) for r in records]
    cursor = feed_cursor.encode(feed_cursor.from_wire(out["cursor"]))
    lines.append(_line(feed_page.end_json(cursor, out.get("resolved"))))
    return Response(200, [NDJSON, (CURSOR_HEADER, cursor.encode())], "".join(lines).encode())


def _line(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":")) + "\n"
