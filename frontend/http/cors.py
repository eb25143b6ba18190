"""CORS of the HTTP frontend (plan stage): the preflight (``OPTIONS``) and the rule matching an actual
request's ``Origin``, both answered from the service properties' CORS rules."""

from __future__ import annotations

from frontend.http import xmldocs
from frontend.http.parse import Request, Services
from frontend.http.render import NO_MATCH, Response, any_origin
from rangetable.errors import TableError


async def preflight(app: Services, rq: Request) -> Response:
    """OPTIONS — a CORS preflight, answered from the service properties' CORS rules."""
    origin = rq.headers.get("origin")
    method = rq.headers.get("access-control-request-method")
    if not origin or not method:
        raise TableError("InvalidHeaderValue", "A required CORS header is not present.")
    requested = [h.strip() for h in rq.headers.get("access-control-request-headers", "").split(",") if h.strip()]
    rule = xmldocs.cors_match(await app.service_properties(), origin, method, requested)
    if rule is None:
        raise TableError("CorsPreflightFailure",
                         "CORS not enabled or no matching rule found for this request.")
    star = any_origin(rule)
    h = [(b"access-control-allow-origin", b"*" if star else origin.encode("latin-1")),
         (b"access-control-allow-methods", method.upper().encode("latin-1")),
         (b"access-control-max-age", str(int(rule.get("MaxAgeInSeconds") or 0)).encode())]
    if requested:
        h.append((b"access-control-allow-headers", ",".join(requested).encode("latin-1")))
    if not star:
        h += [(b"access-control-allow-credentials", b"true"), (b"vary", b"Origin")]
    return Response(200, h)


async def cors_rule_for(app: Services, rq: Request, method: str) -> dict | None:
    """The CORS rule matching an actual (non-preflight) request with an Origin header; :data:`NO_MATCH`
    when the service has CORS rules but none matches, None when it has none."""
    try:
        props = await app.service_properties()
    except TableError:
        return None
    rule = xmldocs.cors_match(props, rq.headers.get("origin", ""), method)
    if rule is None and (props or {}).get("cors"):
        return NO_MATCH
    return rule
