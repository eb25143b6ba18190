"""rangetable's REST extension: a table's secondary indexes (``docs/indexes.md``).

``GET /{account}/{Table}/$indexes`` lists them (``{"value": [definition…]}``), ``PUT
/{account}/{Table}/$indexes/{name}`` with ``{"on": [...], "include": [...] | "all"}`` declares one (201 with its
definition), ``DELETE /{account}/{Table}/$indexes/{name}`` drops it (204). No Azure service has them; they
are the native ``list_indexes``, ``create_index`` and ``drop_index`` requests. Declaring and dropping are
the account's administration: Shared Key or a bearer token, never a SAS; listing is allowed as reading the
table's entry is (Get Table). Errors are Azure's (JSON ``odata.error``): TableNotFound, IndexNotFound,
IndexAlreadyExists, InvalidResourceName, PropertyNameInvalid, InvalidInput.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from frontend.http.parse import Request, Services
from frontend.http.render import Response
from frontend.http.security import check, sas_of
from rangetable.errors import TableError
from rangetable.index_def import check_def

JSON = (b"content-type", b"application/json;charset=utf-8")


def _admin(rq: Request) -> None:
    """Refuse a SAS: index administration needs the account key (or a bearer token)."""
    if sas_of(rq.auth) is not None:
        raise TableError("AuthorizationFailure", "Declaring or dropping an index needs the account key.")


def _json(status: int, doc: Any) -> Response:
    return Response(status, [JSON], json.dumps(doc, separators=(",", ":")).encode())


async def list_indexes(app: Services, rq: Request) -> Response:
    """GET /{Table}/$indexes — the table's index definitions."""
    res = rq.res
    assert res is not None and res.table is not None  # parsed: an $indexes URL names its table
    check(rq.auth, "get_table", res.table)
    out = await app.fe.request({"op": "list_indexes", "table": res.table})
    return _json(200, {"value": out["indexes"]})


async def create_index(app: Services, rq: Request) -> Response:
    """PUT /{Table}/$indexes/{name} — declare an index (201 with its definition)."""
    res = rq.res
    assert res is not None and res.table is not None and res.index is not None  # parsed: kind "index"
    _admin(rq)
    try:
        doc = json.loads(rq.body or b"{}")
    except ValueError:
        raise TableError("InvalidInput", "The body must be a JSON object {\"on\": [...], \"include\": [...]}.") from None
    if not isinstance(doc, dict):
        raise TableError("InvalidInput", "The body must be a JSON object {\"on\": [...], \"include\": [...]}.")
    d = check_def(res.table, res.index, doc.get("on"), doc.get("include"))
    req = {"op": "create_index", "rid": uuid.uuid4().hex, **d.to_wire()}
    del req["state"]
    out = await app.fe.request(req)
    return _json(201, out["index"])


async def drop_index(app: Services, rq: Request) -> Response:
    """DELETE /{Table}/$indexes/{name} — drop an index and its entries (204)."""
    res = rq.res
    assert res is not None and res.table is not None and res.index is not None  # parsed: kind "index"
    _admin(rq)
    await app.fe.request({"op": "drop_index", "table": res.table, "name": res.index})
    return Response(204)
