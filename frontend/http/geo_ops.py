"""rangetable's REST extension on a secondary cluster (``docs/geo.md``): ``GET /{account}/{Table}/$geo``, the cut
the table's reads are answered at and how far behind its source it is.

Get Service Stats gives one ``LastSyncTime`` for the account (the lowest cut of every table); this gives each
table's own: ``{"TableName", "Status": "live" | "bootstrap", "LastSyncTime": ISO 8601 or null, "LagSeconds"}``
(``bootstrap`` while the table's first copy is under way). It is authenticated like a read of the table's
metadata (Shared Key, a bearer token, or a SAS with list permission); a primary cluster answers 400, as Azure
answers Get Service Stats on a primary endpoint.
"""

from __future__ import annotations

import json

from frontend.http.parse import Request, Services
from frontend.http.render import Response
from frontend.http.security import check
from rangetable.edm import ticks_to_iso
from rangetable.errors import TableError

JSON = (b"content-type", b"application/json")


async def table_cut(app: Services, rq: Request) -> Response:
    """GET /{Table}/$geo — the table's cut and lag on a secondary cluster."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: a $geo URL names its table
    check(rq.auth, "get_table", res.table)
    if app.geo_role != "secondary":
        raise TableError("InvalidQueryParameterValue", "$geo is served by a secondary cluster only (rangetable up "
                                                       "--secondary-of).")
    st = await app.fe.request({"op": "geo_status"})
    row = next((r for r in st["tables"] if r["table"].lower() == res.table.lower()), None)
    if row is None:
        raise TableError("TableNotFound")
    cut = row["cut"]
    doc = {"TableName": row["table"], "Status": "bootstrap" if cut is None else "live",
           "LastSyncTime": None if cut is None else ticks_to_iso(cut, full=True), "LagSeconds": row["lag_s"]}
    return Response(200, [JSON], json.dumps(doc, separators=(",", ":")).encode())
