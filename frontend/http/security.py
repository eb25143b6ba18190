"""Authentication and SAS authorization for the REST API, on top of :mod:`frontend.auth.authenticate`.

:mod:`frontend.auth.authenticate` checks signatures (SharedKey, SharedKeyLite, service SAS, account SAS) and
grants; this module adapts it to the HTTP app: it fetches stored access policies from the
coordinator when a SAS names one (``si``), caches them for a second, and maps each REST operation to
the SAS permission it needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rangetable.errors import TableError

log = logging.getLogger("rangetable.http")

try:  # written in parallel; without it the API runs unauthenticated (and says so at start-up)
    from frontend.auth import authenticate as _auth
except ImportError:  # pragma: no cover - transitional
    _auth = None  # type: ignore[assignment]

ACL_TTL_S = 1.0

# REST operation -> what SasGrant.check is asked (entity ops: permission letters, all required)
PERMISSIONS = {
    "get": "r", "query": "r", "changes": "r", "insert": "a", "replace": "u", "merge": "u", "delete": "d",
    "insert_or_replace": "au", "insert_or_merge": "au", "list_tables": "l", "get_table": "l",
    "create_table": "c", "delete_table": "delete_table", "acl": "acl", "service_read": "service_read",
    "service_write": "service_write",
}


class Security:
    """Accounts and the per-request authentication step."""

    def __init__(self, specs: list[str], fetch_acl: Callable[[str], Awaitable[dict]], oauth: str = "") -> None:
        self.enabled = _auth is not None
        self.oauth = oauth == "basic"  # accept development bearer tokens (frontend.auth.bearer)
        self.accounts: Any = _auth.Accounts.from_specs(specs) if _auth is not None else None
        self._fetch_acl = fetch_acl
        self._acl: dict[str, tuple[float, dict]] = {}
        if not self.enabled:
            log.warning("frontend.auth.authenticate is not available: the REST API accepts every request")

    def forget_acl(self, table: str) -> None:
        """Drop a cached ACL (after a Set Table ACL through this frontend)."""
        self._acl.pop(table.lower(), None)

    async def _acl_for(self, table: str) -> dict:
        key = table.lower()
        hit = self._acl.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[0] < ACL_TTL_S:
            return hit[1]
        try:
            acl = await self._fetch_acl(table)
        except TableError as exc:
            if exc.error_code in ("TableNotFound", "ResourceNotFound"):
                acl = {}
            else:
                raise
        self._acl[key] = (now, acl)
        return acl

    @staticmethod
    def acl_table(query: dict[str, list[str]], path_table: str | None) -> str | None:
        """The table whose stored access policies a request needs (a SAS naming one with ``si``)."""
        if query and query.get("si") and query.get("sig"):
            return (query.get("tn") or [""])[0] or path_table
        return None

    def authenticate_now(self, method: str, raw_path: str, query: dict[str, list[str]], headers: dict[str, str],
                         scheme: str, client_ip: str | None, acls: dict[str, dict] | None = None) -> Any:
        """:meth:`authenticate` without the fetch: ``acls`` holds the policies :meth:`acl_table` asked for."""
        if not self.enabled:
            return None
        lookup = _no_policies
        if acls:
            def lookup(table: str) -> dict:
                return acls.get(table.lower(), {})

        return _auth.authenticate(self.accounts, method, raw_path, query, headers, acl_lookup=lookup,
                                  scheme=scheme, client_ip=client_ip, oauth=self.oauth)

    async def authenticate(self, method: str, raw_path: str, query: dict[str, list[str]], headers: dict[str, str],
                           path_table: str | None, scheme: str, client_ip: str | None) -> Any:
        """The request's AuthResult (None when authentication is unavailable); raises 403 TableError."""
        acls: dict[str, dict] = {}
        table = self.acl_table(query, path_table) if self.enabled else None
        if table:
            acls[table.lower()] = await self._acl_for(table)
        return self.authenticate_now(method, raw_path, query, headers, scheme, client_ip, acls)


def _no_policies(table: str) -> dict:
    return {}


def sas_of(result: Any) -> Any:
    """The SAS grant of an AuthResult, or None for a shared-key (or unauthenticated) request."""
    return getattr(result, "sas", None) if result is not None else None


def check(result: Any, op: str, table: str | None, pk: str | None = None, rk: str | None = None) -> None:
    """Raise 403 unless the request's SAS (if any) allows ``op`` on the table / entity.

    A bearer token allows everything but the table ACL (as in Azurite: not available with OAuth).
    """
    sas = getattr(result, "sas", None)  # = sas_of(result)
    if sas is None:
        if op == "acl" and getattr(result, "scheme", None) == "Bearer":
            raise _auth.AuthError("AuthorizationFailure",
                                  "Get/Set Table ACL are not available with a bearer token; use Shared Key.")
        return
    sas.check(PERMISSIONS.get(op, op), table, pk, rk)
