"""Authentication of Azure Table REST requests: SharedKey, SharedKeyLite, service SAS, account SAS, bearer.

Pure functions, no I/O (stored access policies come through the ``acl_lookup`` callback). The
HTTP frontend calls :func:`authenticate` once per request, then :meth:`SasGrant.check` for each
operation when the request used a SAS.

Shared Key, Table flavour (what ``azure-data-tables`` 12.7.0 signs, see its ``_authentication.py``)::

    SharedKey:     VERB \\n Content-MD5 \\n Content-Type \\n Date \\n CanonicalizedResource
    SharedKeyLite: Date \\n CanonicalizedResource

``Date`` is ``x-ms-date`` when present, else ``Date`` (a match with either is accepted, like
Azurite). CanonicalizedResource is ``/<account>`` + the raw (still percent-encoded) URL path +
``?comp=<v>`` when there is a ``comp`` parameter. With path-style URLs the account therefore appears
twice: ``/devstoreaccount1/devstoreaccount1/Tables``. Requests to the secondary
(``/devstoreaccount1-secondary/…``) are accepted signed over the whole raw path, over the path
without its first segment (the SDK 12.7.0 sends Get Service Stats to
``/devstoreaccount1-secondary/devstoreaccount1/`` but signs ``/devstoreaccount1/``), or with the
``-secondary`` suffix removed (Azurite). A date more than :data:`MAX_CLOCK_SKEW` away from ours fails.

Every failure is a 403 ``AuthenticationFailed`` (an :class:`AuthError`, whose ``detail`` is the
``AuthenticationErrorDetail`` text), except the SAS scope checks listed in :mod:`frontend.auth.sas`.
There is no anonymous access.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from urllib.parse import unquote

from frontend.auth.bearer import verify_bearer
from frontend.auth.sas import (
    ACL,
    CREATE_TABLE,
    DELETE_TABLE,
    LIST_TABLES,
    SERVICE_READ,
    SERVICE_WRITE,
    AuthError,
    SasGrant,
    fail,
    same_signature,
    verify_account_sas,
    verify_service_sas,
)
from rangetable.edm import datetime_to_ticks

__all__ = [
    "ACL", "CREATE_TABLE", "DELETE_TABLE", "DEV_ACCOUNT", "DEV_KEY", "LIST_TABLES", "MAX_CLOCK_SKEW",
    "SERVICE_READ", "SERVICE_WRITE", "Accounts", "AuthError", "AuthResult", "SasGrant", "authenticate",
]

DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
MAX_CLOCK_SKEW = timedelta(minutes=15)
_MAX_SKEW_S = MAX_CLOCK_SKEW.total_seconds()
SECONDARY = "-secondary"
_ACCOUNT_NAME = re.compile(r"^[a-z0-9]{3,24}$")

try:  # OpenSSL's HMAC object: copying it costs a third of hmac.HMAC.copy's Python layer
    from _hashlib import hmac_new as _hmac_new  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - a Python without OpenSSL
    def _hmac_new(key: bytes, digestmod: str) -> hmac.HMAC:  # type: ignore[misc]
        return hmac.new(key, digestmod=getattr(hashlib, digestmod))


class Accounts:
    """Account names and their keys, with the HMAC state precomputed per key."""

    __slots__ = ("_keys", "_macs")

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self._keys = dict(keys)
        self._macs = {name: _hmac_new(key, digestmod="sha256") for name, key in self._keys.items()}

    @classmethod
    def from_specs(cls, specs: list[str]) -> Accounts:
        """Parse ``--account NAME:BASE64KEY`` values; no specs means devstoreaccount1 with its key.

        Raises ValueError naming the bad spec (bad format, name, key, or a repeated name).
        """
        if not specs:
            return cls({DEV_ACCOUNT: base64.b64decode(DEV_KEY)})
        keys: dict[str, bytes] = {}
        for spec in specs:
            name, sep, key = spec.partition(":")
            name, key = name.strip(), key.strip()
            if not sep or not name or not key:
                raise ValueError(f"account spec {spec!r} is not NAME:BASE64KEY")
            if not _ACCOUNT_NAME.match(name):
                raise ValueError(f"account name {name!r} must be 3-24 lower-case letters and digits")
            if name in keys:
                raise ValueError(f"account {name!r} is given twice")
            try:
                raw = base64.b64decode(key, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"the key of account {name!r} is not valid base64") from None
            if not raw:
                raise ValueError(f"the key of account {name!r} is empty")
            keys[name] = raw
        return cls(keys)

    def key(self, name: str) -> bytes | None:
        """The decoded key of an account (None when unknown)."""
        return self._keys.get(name)

    def names(self) -> list[str]:
        """Every account name."""
        return list(self._keys)

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def sign(self, name: str, data: bytes) -> bytes:
        """HMAC-SHA256 of ``data`` under the account's key (raw digest); KeyError when unknown."""
        mac = self._macs[name].copy()
        mac.update(data)
        return mac.digest()


@dataclass(frozen=True, slots=True)
class AuthResult:
    """Who the request is: the account, and the SAS grant when it used a SAS (None for Shared Key).

    ``scheme`` is ``"SharedKey"``, ``"SharedKeyLite"``, ``"SAS"`` or ``"Bearer"`` (``--oauth basic``).
    """

    account: str
    sas: SasGrant | None = None
    scheme: str = "SharedKey"


_SHARED_KEY_RESULTS: dict[tuple[str, str], AuthResult] = {}  # immutable, so shared between requests
_BEARER_RESULTS: dict[str, AuthResult] = {}


def authenticate(
    accounts: Accounts,
    method: str,
    raw_path: str,
    query: Mapping[str, list[str]],
    headers: Mapping[str, str],
    acl_lookup: Callable[[str], dict] | None = None,
    now: datetime | None = None,
    *,
    scheme: str = "http",
    client_ip: str | None = None,
    oauth: bool = False,
) -> AuthResult:
    """Authenticate one request or raise :class:`AuthError` (a TableError with Azure's code).

    ``raw_path``: the URL path as sent (percent-encoded, with the path-style account prefix);
    ``query``: parsed query string, values percent-decoded; ``headers``: lower-case names;
    ``acl_lookup(table)`` → ``{id: {"start", "expiry", "permission"}}`` resolves ``si`` (a TableError
    from it fails the request); ``scheme`` is checked against a SAS's ``spr`` and ``client_ip``
    against its ``sip`` (a SAS with ``sip`` fails when ``client_ip`` is None); ``oauth`` accepts
    ``Authorization: Bearer`` tokens as :func:`frontend.auth.bearer.verify_bearer` checks them.
    """
    account, rest = _account_of(accounts, raw_path, headers)
    auth = headers.get("authorization")
    if auth and oauth and auth[:7].lower() == "bearer ":
        now_s = time.time() if now is None else now.timestamp()
        verify_bearer(auth[7:].strip(), account, now_s, scheme, headers.get("host", ""))
        return _BEARER_RESULTS.get(account) or _BEARER_RESULTS.setdefault(account, AuthResult(account, None, "Bearer"))
    if auth:
        now_s = time.time() if now is None else now.timestamp()
        kind = _verify_shared_key(accounts, account, method, raw_path, query, headers, auth, now_s)
        res = _SHARED_KEY_RESULTS.get((account, kind))
        if res is None:  # one per account and scheme (the accounts are fixed)
            res = _SHARED_KEY_RESULTS[(account, kind)] = AuthResult(account, None, kind)
        return res
    now = now or datetime.now(UTC)
    if query.get("sig"):
        if len(query["sig"]) > 1:  # which one would count? Azurite refuses it too
            raise fail("The shared access signature carries more than one sig parameter.")
        ticks = datetime_to_ticks(now)
        if "ss" in query or "srt" in query:
            grant = verify_account_sas(accounts.sign, account, query, ticks, scheme, client_ip)
        else:
            grant = verify_service_sas(accounts.sign, account, query, _table_of(rest), acl_lookup, ticks,
                                       scheme, client_ip)
        return AuthResult(account, grant, "SAS")
    raise fail("The request has no Authorization header and no shared access signature; "
               "anonymous access is not allowed.")


# --- helpers ----------------------------------------------------------------------------------


def _account_of(accounts: Accounts, raw_path: str, headers: Mapping[str, str]) -> tuple[str, str]:
    """The account a request addresses, and the path after it (path-style first, then host-style)."""
    seg, _, rest = raw_path.lstrip("/").partition("/")
    name = seg[: -len(SECONDARY)] if seg.endswith(SECONDARY) else seg
    if name in accounts._keys:
        return name, "/" + rest
    host = headers.get("host", "")
    host = "" if host.startswith("[") else host.split(":", 1)[0]  # no account in an IPv6 literal
    label = host.split(".", 1)[0]
    label = label[: -len(SECONDARY)] if label.endswith(SECONDARY) else label
    if "." in host and label in accounts:
        return label, raw_path
    raise fail(f"The account {name or label!r} does not exist.")


def _table_of(rest: str) -> str | None:
    """The table an account-relative path names (``/t``, ``/t()``, ``/t(PartitionKey=…)``), if any."""
    seg = rest.lstrip("/").split("/", 1)[0]
    name = unquote(seg.split("(", 1)[0])
    if not name or name.startswith("$") or name.lower() == "tables":
        return None
    return name


@lru_cache(maxsize=512)
def _http_date_seconds(value: str) -> float | None:
    """An RFC 1123 date as seconds since the epoch (None when it is not one)."""
    try:
        return datetime.strptime(value.strip(), "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _canonical_resources(account: str, raw_path: str, comp: str) -> list[str]:
    """Candidate canonicalized resources, the SDK's form first."""
    path = raw_path or "/"
    out = [f"/{account}{path}{comp}"]
    if SECONDARY not in path:
        return out
    seg, _, rest = path.lstrip("/").partition("/")
    if seg.endswith(SECONDARY):
        out.append(f"/{account}/{rest}{comp}")  # SDK 12.7.0 Get Service Stats
        out.append(f"/{account}/{seg[: -len(SECONDARY)]}/{rest}{comp}")  # Azurite's authenticationPath
    return out


def _verify_shared_key(
    accounts: Accounts,
    account: str,
    method: str,
    raw_path: str,
    query: Mapping[str, list[str]],
    headers: Mapping[str, str],
    auth: str,
    now: float,
) -> str:
    kind, _, credential = auth.strip().partition(" ")
    if kind not in ("SharedKey", "SharedKeyLite"):
        hint = " (bearer tokens: start the frontend with --oauth basic and HTTPS)" if kind.lower() == "bearer" else ""
        raise fail(f"Authorization scheme {kind!r} is not supported; use SharedKey, SharedKeyLite or a SAS{hint}.")
    signer, sep, signature = credential.strip().rpartition(":")
    if not sep or not signer or not signature:
        raise fail("The Authorization header is not of the form 'SharedKey account:signature'.")
    if signer != account:
        raise fail(f"The request is signed for account {signer!r} but addresses account {account!r}.")
    x_ms_date, date = headers.get("x-ms-date", ""), headers.get("date", "")
    effective = x_ms_date or date
    if not effective:
        raise fail("Request date header not specified (x-ms-date or Date).")
    when = _http_date_seconds(effective)
    if when is None:
        raise fail(f"The date {effective!r} is not an RFC 1123 date.")
    if abs(now - when) > _MAX_SKEW_S:
        raise fail(f"Request date header too old or too far in the future: {effective!r} "
                   f"(allowed skew {int(MAX_CLOCK_SKEW.total_seconds() // 60)} minutes).")
    comp = query.get("comp") if query else None
    comp_s = f"?comp={comp[0]}" if comp else ""
    dates = (effective,) if not (x_ms_date and date and date != x_ms_date) else (x_ms_date, date)
    head = (f"{method.upper()}\n{headers.get('content-md5', '')}\n{headers.get('content-type', '')}\n"
            if kind == "SharedKey" else "")
    first = f"{head}{effective}\n/{account}{raw_path or '/'}{comp_s}"  # what the SDK signs
    mac = accounts._macs[account].copy()
    mac.update(first.encode())
    if same_signature(mac.digest(), signature):
        return kind
    for resource in _canonical_resources(account, raw_path, comp_s):
        for d in dates:
            sts = f"{head}{d}\n{resource}"
            if sts != first and same_signature(accounts.sign(account, sts.encode()), signature):
                return kind
    raise fail(f"The MAC signature found in the HTTP request '{signature}' is not the same as any computed "
               f"signature. Server used following string to sign: '{first}'.")
