"""Coordinator ops for table ACLs (stored access policies) and the table service's properties.

Ops (answered on the coordinator loop under ``maps.lock``; a write is committed, synced, before the
answer):

* ``get_acl {table}`` → ``{"policies": {id: {"start": iso|None, "expiry": iso|None, "permission": str|None}}}``
* ``set_acl {table, policies}`` → ``None``; replaces every policy of the table (``{}`` clears them).
  ``policies`` maps id → ``{"start", "expiry", "permission"}`` (each optional) or None (an identifier
  without an ``AccessPolicy``). Limits (Azure answers 400 ``InvalidXmlDocument``): at most 5
  policies, ids of 1-64 characters, permission letters from ``raud``, times in ISO 8601. Times are
  stored normalised to ``YYYY-MM-DDTHH:MM:SS.fffffffZ`` (as Azure returns them).
* ``get_service_properties {}`` → ``{"properties": dict}`` (``{}`` until something is set).
* ``set_service_properties {properties}`` → ``None``; top-level keys given replace the stored ones,
  others are kept (Azure: an element left out of Set Service Properties is unchanged). A ``cors``
  value must be a list of at most 5 rules, each a dict.

Both on a missing table → 404 ``TableNotFound``. Stored in the meta store under ``acl/<table lower>``
and ``service/properties``; read through from it on every request (a RocksDB point read), so a
restarted coordinator has them at once. Deleting a table deletes its ACL in the same commit
(:func:`~coordinator.map.acl_keys.acl_key`, used by :func:`coordinator.control.operations.delete_table`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgpack

from coordinator.map.acl_keys import acl_key
from rangetable.edm import parse_time, ticks_to_iso
from rangetable.errors import TableError

if TYPE_CHECKING:
    from coordinator.state.maps import MapService

OPS = frozenset({"get_acl", "set_acl", "get_service_properties", "set_service_properties"})
MAX_POLICIES = 5
MAX_POLICY_ID = 64
POLICY_PERMISSIONS = "raud"
MAX_CORS_RULES = 5
MAX_PROPERTIES_BYTES = 64 * 1024
SERVICE_KEY = b"service/properties"


def _bad_xml(message: str) -> TableError:
    return TableError("InvalidXmlDocument", message)


def _get(maps: MapService, key: bytes) -> Any:
    for k, v in maps.meta_store().items(key):
        if k == key:
            return v
        break
    return None


def _norm_time(value: Any, field: str, pid: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _bad_xml(f"policy {pid!r}: {field} must be an ISO 8601 time")
    try:
        ticks = parse_time(value)  # the parser SAS verification uses, so what is stored verifies
    except ValueError:
        raise _bad_xml(f"policy {pid!r}: {field} {value!r} is not an ISO 8601 time") from None
    return ticks_to_iso(ticks, full=True)


def validate_policies(policies: Any) -> dict[str, dict[str, str | None]]:
    """Check and normalise a ``set_acl`` policy map; raises TableError(InvalidXmlDocument)."""
    if policies is None:
        return {}
    if not isinstance(policies, dict):
        raise TableError("InvalidInput", "policies must be a map of id to policy")
    if len(policies) > MAX_POLICIES:
        raise _bad_xml(f"at most {MAX_POLICIES} stored access policies per table ({len(policies)} given)")
    out: dict[str, dict[str, str | None]] = {}
    for pid, pol in policies.items():
        if not isinstance(pid, str) or not 1 <= len(pid) <= MAX_POLICY_ID:
            raise _bad_xml(f"a signed identifier's Id must be 1-{MAX_POLICY_ID} characters: {pid!r}")
        if pol is None:
            pol = {}
        if not isinstance(pol, dict) or set(pol) - {"start", "expiry", "permission"}:
            raise _bad_xml(f"policy {pid!r} must have only start, expiry and permission")
        perm = pol.get("permission")
        if perm is not None and not isinstance(perm, str):
            raise _bad_xml(f"policy {pid!r}: permission must be a string")
        if perm and (any(c not in POLICY_PERMISSIONS for c in perm) or len(set(perm)) != len(perm)):
            raise _bad_xml(f"policy {pid!r}: permission {perm!r} must use the letters r, a, u, d")
        out[pid] = {
            "start": _norm_time(pol.get("start"), "start", pid),
            "expiry": _norm_time(pol.get("expiry"), "expiry", pid),
            "permission": perm or None,
        }
    return out


def validate_properties(props: Any) -> dict[str, Any]:
    """Check a ``set_service_properties`` dict; raises TableError(InvalidXmlDocument / InvalidInput)."""
    if not isinstance(props, dict) or not all(isinstance(k, str) for k in props):
        raise TableError("InvalidInput", "properties must be a map with string keys")
    cors = props.get("cors")
    if cors is not None:
        if not isinstance(cors, list):
            raise _bad_xml("cors must be a list of rules")
        if len(cors) > MAX_CORS_RULES:
            raise _bad_xml(f"at most {MAX_CORS_RULES} CORS rules ({len(cors)} given)")
        if not all(isinstance(rule, dict) for rule in cors):
            raise _bad_xml("every CORS rule must be a map")
    try:
        size = len(msgpack.packb(props, use_bin_type=True))
    except (TypeError, ValueError):
        raise TableError("InvalidInput", "properties must be plain data") from None
    if size > MAX_PROPERTIES_BYTES:
        raise _bad_xml(f"service properties larger than {MAX_PROPERTIES_BYTES} bytes")
    return props


def _table_field(req: dict) -> str:
    table = req.get("table")
    if not isinstance(table, str) or not table:
        raise TableError("InvalidInput", "field 'table' is missing or has the wrong type")
    return table


def handle(maps: MapService, op: str, req: dict) -> Any:
    """Run one of :data:`OPS` and return its result (a write is durable when this returns)."""
    with maps.lock:
        if op == "get_acl":
            table = maps.pmap.table_name(_table_field(req))  # TableNotFound
            stored = _get(maps, acl_key(table)) or {}
            return {"policies": stored.get("policies", {})}
        if op == "set_acl":
            table = maps.pmap.table_name(_table_field(req))
            policies = validate_policies(req.get("policies"))
            if policies:
                maps.meta_store().commit({acl_key(table): {"policies": policies}})
            else:
                maps.meta_store().commit({}, [acl_key(table)])
            return None
        if op == "get_service_properties":
            return {"properties": _get(maps, SERVICE_KEY) or {}}
        if op == "set_service_properties":
            props = validate_properties(req.get("properties"))
            merged = {**(_get(maps, SERVICE_KEY) or {}), **props}
            maps.meta_store().commit({SERVICE_KEY: merged})
            return None
    raise TableError("InvalidInput", f"unknown op {op!r}")
