"""Shared access signatures: verifying service (table) and account SAS tokens, and what they allow.

Pure functions, no I/O. :func:`frontend.auth.authenticate.authenticate` calls :func:`verify_service_sas` or
:func:`verify_account_sas` for a request that carries a ``sig`` query parameter; the result is a
:class:`SasGrant` the HTTP layer consults with :meth:`SasGrant.check` before each operation.

String-to-sign shapes are those of ``azure-data-tables`` 12.7.0 (``_table_shared_access_signature``
and ``_shared_access_signature``) and of the REST docs for older ``sv`` values:

* service SAS, sv >= 2015-04-05: ``sp st se /table/<account>/<table-lower> si sip spr sv spk srk epk erk``
  newline-joined (no trailing newline); 2015-02-21: without ``sip``/``spr``; 2013-08-15 … 2015-02-20:
  also without the ``/table`` prefix;
* account SAS (sv >= 2015-04-05): ``account sp ss srt st se sip spr sv`` each followed by a newline,
  plus an encryption-scope line from 2020-12-06.

Time window: the expiry is strict (Azure allows no grace); the start gets :data:`START_SKEW` of grace,
because clients commonly sign ``st=now`` on a clock slightly ahead of ours.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rangetable.edm import TICKS_PER_SECOND, parse_time, ticks_to_datetime
from rangetable.errors import TableError

START_SKEW_S = 300
START_SKEW = START_SKEW_S * TICKS_PER_SECOND  # ticks of grace before a SAS's start time
TABLE_PERMISSIONS = "raud"
ACCOUNT_PERMISSIONS = "rwdlacup"

# Operations besides the entity permissions r/a/u/d that check() knows.
LIST_TABLES = "l"
CREATE_TABLE = "c"
DELETE_TABLE = "delete_table"
SERVICE_READ = "service_read"  # get service properties / stats
SERVICE_WRITE = "service_write"  # set service properties
ACL = "acl"  # get/set table ACL: the account primary only (never a SAS)
_OP_ALIASES = {"list_tables": LIST_TABLES, "create_table": CREATE_TABLE}
# operation -> (account SAS resource type, account SAS permissions of which one suffices)
_ACCOUNT_LEVEL_OPS = {
    LIST_TABLES: ("c", "l"),
    CREATE_TABLE: ("c", "acw"),
    DELETE_TABLE: ("c", "d"),
    SERVICE_READ: ("s", "r"),
    SERVICE_WRITE: ("s", "w"),
}


class AuthError(TableError):
    """A TableError carrying Azure's ``AuthenticationErrorDetail`` text in :attr:`detail`.

    ``message`` stays Azure's canonical message for the code; the HTTP layer may add
    ``<AuthenticationErrorDetail>`` (XML errors) from :attr:`detail`.
    """

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(name)
        self.detail = detail


def fail(detail: str, code: str = "AuthenticationFailed") -> AuthError:
    """An AuthError (to raise) with Azure's code and a human-readable detail."""
    return AuthError(code, detail)


# --- times ------------------------------------------------------------------------------------

def _time(text: str | None, field: str) -> int | None:
    if not text:
        return None
    try:
        return parse_time(text)
    except ValueError:
        raise fail(f"Signature fields not well formed: {field}={text!r} is not a valid time.") from None


def _check_window(start: int | None, expiry: int | None, now: int, st: str | None, se: str | None) -> None:
    if expiry is None:
        raise fail("Signed expiry time (se) is required.")
    if now > expiry or (start is not None and now + START_SKEW < start):
        current = ticks_to_datetime(now).strftime("%a, %d %b %Y %H:%M:%S GMT")
        raise fail(f"Signature not valid in the specified time frame: Start [{st or ''}] - Expiry [{se}] - "
                   f"Current [{current}]")


def _check_protocol(spr: str | None, scheme: str) -> None:
    if spr and scheme.lower() not in [p.strip().lower() for p in spr.split(",")]:
        raise fail(f"This request is not authorized to perform this operation using this protocol ({spr}).",
                   "AuthorizationProtocolMismatch")


_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _within(lo: _Address, ip: _Address, hi: _Address) -> bool:
    """``lo <= ip <= hi``; False when their IP versions differ (such addresses do not compare)."""
    v4, v6 = ipaddress.IPv4Address, ipaddress.IPv6Address
    if isinstance(lo, v4) and isinstance(ip, v4) and isinstance(hi, v4):
        return lo <= ip <= hi
    if isinstance(lo, v6) and isinstance(ip, v6) and isinstance(hi, v6):
        return lo <= ip <= hi
    return False


def _check_ip(sip: str | None, client_ip: str | None) -> None:
    if not sip:
        return
    try:
        low, _, high = sip.partition("-")
        lo = ipaddress.ip_address(low.strip())
        hi = ipaddress.ip_address(high.strip()) if high else lo
        ok = client_ip is not None and _within(lo, ipaddress.ip_address(client_ip), hi)
    except (ValueError, TypeError):
        ok = False
    if not ok:
        raise fail(f"Source IP {client_ip} is not in the signed IP range {sip}.", "AuthorizationSourceIPMismatch")


# --- the grant --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SasGrant:
    """What a verified SAS allows.

    ``kind`` is ``"service"`` (one table, permissions ⊆ ``raud``, optional key range) or
    ``"account"`` (every table; ``resource_types`` ⊆ ``sco``; permissions ⊆ ``rwdlacup``).
    """

    kind: str
    permissions: frozenset[str]
    table: str | None = None
    resource_types: frozenset[str] = frozenset()
    start_pk: str | None = None
    start_rk: str | None = None
    end_pk: str | None = None
    end_rk: str | None = None
    expiry: int | None = None  # ticks
    policy_id: str | None = None

    @property
    def key_range(self) -> tuple[str | None, str | None, str | None, str | None]:
        """``(spk, srk, epk, erk)`` — inclusive bounds, None where unbounded (queries narrow to these)."""
        return self.start_pk, self.start_rk, self.end_pk, self.end_rk

    @property
    def has_key_range(self) -> bool:
        """True when the SAS restricts PartitionKey/RowKey."""
        return self.start_pk is not None or self.end_pk is not None

    def in_range(self, pk: str, rk: str | None = None) -> bool:
        """Whether an entity key lies in the SAS's (inclusive) key range.

        (PK > spk) or (PK = spk and RK >= srk); (PK < epk) or (PK = epk and RK <= erk).
        """
        r = rk or ""
        if self.start_pk is not None:
            if pk < self.start_pk or (pk == self.start_pk and self.start_rk is not None and r < self.start_rk):
                return False
        if self.end_pk is not None:
            if pk > self.end_pk or (pk == self.end_pk and self.end_rk is not None and r > self.end_rk):
                return False
        return True

    def check(self, perm: str, table: str | None, pk: str | None = None, rk: str | None = None) -> None:
        """Raise unless this SAS allows the operation.

        ``perm``: one or more of ``r`` (query/get), ``a`` (insert), ``u`` (update/merge/replace), ``d``
        (delete entity) — all required, e.g. ``"au"`` for an upsert — for entity operations on
        ``table`` (pass ``pk``/``rk`` for point operations; a query passes none and is narrowed with
        :attr:`key_range`); or a table/service-level operation: ``"l"`` list tables, ``"c"`` create
        table, ``"delete_table"`` (``"d"`` with neither ``pk`` nor ``rk`` means the same),
        ``"service_read"``, ``"service_write"``, ``"acl"``.

        Raises AuthorizationPermissionMismatch (permission missing), AuthorizationResourceTypeMismatch
        (account SAS without the resource type), AuthorizationFailure (wrong table, key outside the
        range, or an operation no SAS of this kind may perform).
        """
        op = _OP_ALIASES.get(perm, perm)
        if op == "d" and pk is None and rk is None:
            op = DELETE_TABLE
        if op == ACL:
            raise fail("Table ACL operations need the account key.", "AuthorizationFailure")
        if op in _ACCOUNT_LEVEL_OPS:
            if self.kind != "account":
                raise fail("A table SAS does not allow this operation.", "AuthorizationFailure")
            rtype, perms = _ACCOUNT_LEVEL_OPS[op]
            if rtype not in self.resource_types:
                raise fail(f"The SAS resource types (srt) lack {rtype!r}.", "AuthorizationResourceTypeMismatch")
            if not self.permissions.intersection(perms):
                raise fail(f"The SAS permissions (sp) lack any of {perms!r}.", "AuthorizationPermissionMismatch")
            return
        if not op or any(c not in TABLE_PERMISSIONS for c in op):
            raise ValueError(f"unknown SAS operation {perm!r}")
        if self.kind == "account":
            if "o" not in self.resource_types:
                raise fail("The SAS resource types (srt) lack 'o'.", "AuthorizationResourceTypeMismatch")
        elif table is None or self.table is None or table.lower() != self.table.lower():
            raise fail(f"The SAS is for table {self.table!r}, not {table!r}.", "AuthorizationFailure")
        missing = [c for c in op if c not in self.permissions]
        if missing:
            raise fail(f"The SAS permissions (sp) lack {''.join(missing)!r}.", "AuthorizationPermissionMismatch")
        if pk is not None and not self.in_range(pk, rk):
            raise fail("The entity key is outside the SAS's PartitionKey/RowKey range.", "AuthorizationFailure")


# --- verification -----------------------------------------------------------------------------

Signer = Callable[[str, bytes], bytes]  # (account, string-to-sign) -> raw HMAC-SHA256 digest


def _first(query: Mapping[str, list[str]], name: str) -> str | None:
    v = query.get(name)
    return v[0] if v else None


def same_signature(expected: bytes, given: str) -> bool:
    """Constant-time comparison of a raw digest with a base64 signature from a request."""
    if given.isascii() and hmac.compare_digest(binascii.b2a_base64(expected, newline=False), given.encode()):
        return True  # the canonical encoding (what clients send); anything else is decoded below
    try:
        raw = base64.b64decode(given.replace(" ", "+"), validate=True)  # '+' may arrive decoded as ' '
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(expected, raw)


def verify_service_sas(
    sign: Signer,
    account: str,
    query: Mapping[str, list[str]],
    path_table: str | None,
    acl_lookup: Callable[[str], dict] | None,
    now: int,
    scheme: str = "http",
    client_ip: str | None = None,
) -> SasGrant:
    """Verify a table (service) SAS; ``path_table`` is the table the URL names (used without ``tn``)."""
    f = {k: _first(query, k) for k in ("sv", "sp", "st", "se", "si", "sip", "spr", "spk", "srk", "epk", "erk")}
    sv, sig = f["sv"], _first(query, "sig") or ""
    table = _first(query, "tn") or path_table
    if not sv:
        raise fail("The signed version (sv) is required.")
    if not table:
        raise fail("The SAS names no table (tn) and the request names none.")
    keys = [f["spk"], f["srk"], f["epk"], f["erk"]]
    if sv >= "2015-04-05":
        lines = [f["sp"], f["st"], f["se"], f"/table/{account}/{table.lower()}", f["si"], f["sip"], f["spr"], sv, *keys]
    elif sv >= "2015-02-21":
        lines = [f["sp"], f["st"], f["se"], f"/table/{account}/{table.lower()}", f["si"], sv, *keys]
    elif sv >= "2013-08-15":
        lines = [f["sp"], f["st"], f["se"], f"/{account}/{table.lower()}", f["si"], sv, *keys]
    else:
        raise fail(f"Signed version {sv} is not supported for a table SAS.")
    string_to_sign = "\n".join(x or "" for x in lines)
    if not same_signature(sign(account, string_to_sign.encode()), sig):
        raise fail("Signature did not match. String to sign used was " + string_to_sign)
    perm, st, se = f["sp"], f["st"], f["se"]
    if f["si"]:
        policy = _policy(acl_lookup, table, f["si"])
        for field, value, name in (("sp", perm, "permission"), ("st", st, "start"), ("se", se, "expiry")):
            if value and policy.get(name):  # Azure: "the request will fail with status code 400"
                raise AuthError("InvalidQueryParameterValue",
                                f"{field} is given both in the SAS and in stored access policy {f['si']!r}.")
        perm = perm or policy.get("permission")
        st = st or policy.get("start")
        se = se or policy.get("expiry")
    if not perm:
        raise fail("Signed permissions (sp) are required.")
    if any(c not in TABLE_PERMISSIONS for c in perm):
        raise fail(f"Signed permissions {perm!r} are not valid for a table SAS.")
    start, expiry = _time(st, "st"), _time(se, "se")
    _check_window(start, expiry, now, st, se)
    _check_protocol(f["spr"], scheme)
    _check_ip(f["sip"], client_ip)
    return SasGrant("service", frozenset(perm), table, frozenset(), f["spk"], f["srk"] if f["spk"] else None,
                    f["epk"], f["erk"] if f["epk"] else None, expiry, f["si"])


def _policy(acl_lookup: Callable[[str], dict] | None, table: str, policy_id: str) -> dict[str, Any]:
    if acl_lookup is None:
        raise fail(f"Stored access policy {policy_id!r} cannot be looked up.")
    try:
        policies = acl_lookup(table) or {}
    except TableError as exc:
        raise fail(f"Stored access policy {policy_id!r} cannot be looked up: {exc.error_code}.") from None
    if policy_id not in policies:
        raise fail(f"Stored access policy {policy_id!r} does not exist on table {table!r}.")
    return policies[policy_id] or {}


def verify_account_sas(
    sign: Signer,
    account: str,
    query: Mapping[str, list[str]],
    now: int,
    scheme: str = "http",
    client_ip: str | None = None,
) -> SasGrant:
    """Verify an account SAS (``ss``/``srt`` present)."""
    f = {k: _first(query, k) for k in ("sv", "sp", "ss", "srt", "st", "se", "sip", "spr", "ses")}
    sv, sig = f["sv"], _first(query, "sig") or ""
    missing = [k for k in ("sv", "ss", "srt", "sp", "se") if not f[k]]
    if missing:
        raise fail(f"An account SAS needs {', '.join(missing)}.")
    assert sv is not None
    if sv < "2015-04-05":
        raise fail(f"Signed version {sv} is not supported for an account SAS.")
    parts = [account, f["sp"], f["ss"], f["srt"], f["st"], f["se"], f["sip"], f["spr"], sv]
    if sv >= "2020-12-06":
        parts.append(f["ses"])
    string_to_sign = "".join((x or "") + "\n" for x in parts)
    if not same_signature(sign(account, string_to_sign.encode()), sig):
        raise fail("Signature did not match. String to sign used was " + string_to_sign)
    start, expiry = _time(f["st"], "st"), _time(f["se"], "se")
    _check_window(start, expiry, now, f["st"], f["se"])
    _check_protocol(f["spr"], scheme)
    _check_ip(f["sip"], client_ip)
    if "t" not in (f["ss"] or ""):
        raise fail("The account SAS does not cover the table service (ss lacks 't').", "AuthorizationServiceMismatch")
    perms = f["sp"] or ""
    if any(c not in ACCOUNT_PERMISSIONS + "xyfti" for c in perms):
        raise fail(f"Signed permissions {perms!r} are not valid for an account SAS.")
    return SasGrant("account", frozenset(perms), None, frozenset(f["srt"] or ""), expiry=expiry)
