"""The plan stage's switch of the HTTP frontend: which operation answers a request.

:func:`frontend.http.entity_ops.plan_for` finds the Plan of a point operation or entity query;
:func:`route` here the handler of every other request (:mod:`~frontend.http.table_ops`,
:mod:`~frontend.http.cors`, :mod:`~frontend.http.batch_ops`), from the resource kind, the (tunnelled)
verb and ``comp``. Handlers are ``async (app, rq) -> Response``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from frontend.http.batch_ops import run_batch
from frontend.http.parse import Request, Resource, Services
from frontend.http.render import Response
from frontend.http.table_ops import (
    create_table,
    delete_table,
    get_acl,
    get_properties,
    get_stats,
    get_table,
    query_tables,
    set_acl,
    set_properties,
)
from rangetable.errors import TableError

Handler = Callable[[Services, Request], Awaitable[Response]]


async def not_allowed(app: Services, rq: Request) -> Response:
    """A verb this resource does not support."""
    raise TableError("MethodNotAllowed")


_ROUTES: dict[tuple[str, str], Handler] = {
    ("tables", "GET"): query_tables, ("tables", "POST"): create_table,
    ("table", "DELETE"): delete_table, ("table", "GET"): get_table,
    ("batch", "POST"): run_batch,
}


def route(res: Resource, method: str, comp: str | None) -> Handler:
    """The handler for a resource, effective verb and ``comp`` parameter (point operations: see
    :func:`frontend.http.entity_ops.plan_for`)."""
    if method == "HEAD":
        method = "GET"
    kind = res.kind
    if kind == "service":
        if (res.param("restype") or "").lower() != "service":
            raise TableError("InvalidQueryParameterValue", "Value for one of the query parameters specified "
                             "in the request URI is invalid.")
        if comp == "properties":
            return {"GET": get_properties, "PUT": set_properties}.get(method, not_allowed)
        if comp == "stats":
            return get_stats if method == "GET" else not_allowed
        raise TableError("InvalidQueryParameterValue", "Value for one of the query parameters specified in "
                         "the request URI is invalid.")
    if comp is not None:
        if comp == "acl" and kind == "entities":
            return {"GET": get_acl, "PUT": set_acl}.get(method, not_allowed)
        raise TableError("InvalidQueryParameterValue", "Value for one of the query parameters specified in "
                         "the request URI is invalid.")
    return _ROUTES.get((kind, method), not_allowed)

