"""The plan stage's switch of the HTTP frontend: which operation answers a request.

:func:`plan_for` finds the Plan of a point operation or entity query (:data:`frontend.http.entity_ops.PLANS`:
synchronous, so the listener can run it without a coroutine); :func:`route` the handler of every other
request (:mod:`~frontend.http.table_ops`, :mod:`~frontend.http.batch_ops`, the change feed's
:mod:`~frontend.http.changes_ops`, the indexes' :mod:`~frontend.http.index_ops`), from the resource kind, the
(tunnelled) verb and ``comp``. Handlers are ``async (app, rq) -> Response``. A ``HEAD`` is planned as a
``GET``. CORS preflights (``OPTIONS``) are answered by :mod:`frontend.http.cors` before this stage.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from frontend.http.batch_ops import run_batch
from frontend.http.changes_ops import read_changes
from frontend.http.entity_ops import PLANS, Plan
from frontend.http.geo_ops import table_cut
from frontend.http.index_ops import create_index, drop_index, list_indexes
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
    ("batch", "POST"): run_batch, ("changes", "GET"): read_changes, ("geo", "GET"): table_cut,
    ("indexes", "GET"): list_indexes, ("index", "PUT"): create_index, ("index", "DELETE"): drop_index,
}


_PLAN_KINDS = frozenset(kind for kind, _ in PLANS)


def plan_for(res: Resource, method: str, comp: str | None) -> Plan | None:
    """The Plan of a point operation or entity query (None for every other request: :func:`route`
    has its handler)."""
    if comp is not None or res.kind not in _PLAN_KINDS:
        return None
    return PLANS.get((res.kind, "GET" if method == "HEAD" else method))


def route(res: Resource, method: str, comp: str | None) -> Handler:
    """The handler for a resource, effective verb and ``comp`` parameter of a request that
    :func:`plan_for` has no Plan for."""
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

