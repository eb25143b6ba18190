"""Bearer tokens for development (``--oauth basic``), checked as Azurite's basic OAuth level does.

Pure functions, no I/O. :func:`frontend.auth.authenticate.authenticate` calls :func:`verify_bearer` for a request
whose ``Authorization`` header is ``Bearer <token>`` when the frontend runs with ``--oauth basic``.

What is checked (Azurite's ``TableTokenAuthenticator.authenticateBasic``): the request came over
HTTPS; the token is a JWT (three base64url parts, the first two JSON objects); it has ``iat``,
``nbf`` and ``exp`` and ``nbf <= now <= exp``; ``iss`` starts with one of Azure AD's token-service
prefixes (:data:`ISSUER_PREFIXES`); ``aud`` is the storage audience (:func:`audience_ok`). The
signature is **not** checked: any well-formed token passes, which is what makes this a development
mode. Every failure is a 403 ``AuthenticationFailed`` with a detail naming the check.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from frontend.auth.sas import AuthError, fail

OAUTH_LEVELS = ("basic",)  # --oauth values; "" (the default) turns bearer tokens off

# Azure AD token issuers (Azurite's VALID_ISSUE_PREFIXES): public, Germany, China, test.
ISSUER_PREFIXES = (
    "https://sts.windows.net/",
    "https://sts.microsoftonline.de/",
    "https://sts.chinacloudapi.cn/",
    "https://sts.windows-ppe.net",
)
STORAGE_AUDIENCES = ("https://storage.azure.com", "https://storage.azure.com/",
                     "e406a681-f3d4-42a8-90b6-c2b029497af1")  # the last: Azure Storage's application id
# Account-specific audiences of the Azure clouds: https://<account>.table.core.<cloud>[/]
_CLOUD_AUDIENCE = re.compile(
    r"^https://([^./]+)\.table\.core\.(?:windows\.net|chinacloudapi\.cn|usgovcloudapi\.net|cloudapi\.de)/?$")
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")
MAX_TOKEN_CHARS = 16_384  # Azure AD tokens are a few KB; a longer header is not a token


@dataclass(frozen=True, slots=True)
class BearerToken:
    """The claims a request's bearer token carried (after :func:`verify_bearer` accepted it)."""

    audience: str
    issuer: str
    subject: str
    expires: int  # seconds since the epoch


def _b64url_json(part: str, what: str) -> dict[str, Any]:
    if not part or not _B64URL.match(part):
        raise fail(f"The bearer token's {what} is not base64url.")
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        doc = json.loads(raw)
    except (binascii.Error, ValueError):
        raise fail(f"The bearer token's {what} is not base64url-encoded JSON.") from None
    if not isinstance(doc, dict):
        raise fail(f"The bearer token's {what} is not a JSON object.")
    return doc


def decode_jwt(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A JWT's header and claims, without checking its signature; raises AuthError when malformed."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise fail("Authentication scheme Bearer is not supported: the token is empty or too long.")
    parts = token.split(".")
    if len(parts) != 3:
        raise fail("Authentication scheme Bearer is not supported: the token is not a JWT "
                   "(header.claims.signature).")
    header = _b64url_json(parts[0], "header")
    claims = _b64url_json(parts[1], "claims part")
    if parts[2] and not _B64URL.match(parts[2]):
        raise fail("The bearer token's signature is not base64url.")
    return header, claims


@lru_cache(maxsize=256)
def _claims(token: str) -> dict[str, Any]:
    """decode_jwt's claims, remembered: a client sends the same token with every request for an hour
    (read only; a malformed token raises and is not remembered)."""
    return decode_jwt(token)[1]


def audience_ok(aud: str, account: str, host: str = "") -> bool:
    """Whether ``aud`` is the storage audience for ``account``.

    Accepted: ``https://storage.azure.com`` (with or without ``/``), Azure Storage's application id,
    ``https://<account>.table.core.windows.net`` and the other clouds' equivalents, and this
    server's account URL ``https://<host>/<account>`` (``host`` as the request's Host header,
    with or without a trailing ``/``).
    """
    if aud in STORAGE_AUDIENCES:
        return True
    m = _CLOUD_AUDIENCE.match(aud)
    if m:
        return m.group(1) == account
    if not aud.startswith("https://"):
        return False
    u = urlsplit(aud)
    if u.query or u.fragment or u.path.rstrip("/") != f"/{account}":
        return False
    return not host or u.netloc.lower() == host.lower()


def _number(claims: dict[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"Authentication scheme Bearer is not supported: the token has no numeric {name!r} claim.")
    return float(value)


def verify_bearer(token: str, account: str, now: float, scheme: str, host: str = "") -> BearerToken:
    """Check a bearer token for ``account`` at ``now`` (seconds since the epoch) or raise AuthError.

    ``scheme`` is the request's (``https`` required); ``host`` its Host header (for the account-URL
    audience). The checks and their order are Azurite's: transport, structure, lifetime, issuer,
    audience.
    """
    if scheme != "https":
        raise fail("Authentication scheme Bearer is not allowed with HTTP.")
    claims = _claims(token)
    nbf, exp = _number(claims, "nbf"), _number(claims, "exp")
    _number(claims, "iat")
    if now < nbf:
        raise fail("Lifetime validation failed. The token is not yet valid.")
    if now > exp:
        raise fail("Lifetime validation failed. The token is expired.")
    iss = claims.get("iss")
    if not isinstance(iss, str) or not iss:
        raise fail("Authentication scheme Bearer is not supported: the token has no 'iss' claim.")
    if not iss.startswith(ISSUER_PREFIXES):
        raise fail(f"Invalid token issuer {iss!r}.")
    aud = claims.get("aud")
    if not isinstance(aud, str) or not aud:
        raise fail("Authentication scheme Bearer is not supported: the token has no 'aud' claim.")
    if not audience_ok(aud, account, host):
        raise fail(f"Invalid token audience {aud!r}.")
    sub = claims.get("sub") or claims.get("oid") or ""
    return BearerToken(aud, iss, str(sub), int(exp))


def check_oauth(oauth: str, https: bool) -> None:
    """Raise ValueError unless ``--oauth`` is off or ``basic`` with a certificate (tokens never travel in clear)."""
    if oauth and oauth not in OAUTH_LEVELS:
        raise ValueError(f"--oauth must be one of {', '.join(OAUTH_LEVELS)}, not {oauth!r}")
    if oauth and not https:
        raise ValueError("--oauth basic needs HTTPS: pass --cert and --key (bearer tokens must not travel in "
                         "clear; `rangetable cert create` makes a development certificate)")


__all__ = ["ISSUER_PREFIXES", "OAUTH_LEVELS", "STORAGE_AUDIENCES", "AuthError", "BearerToken", "audience_ok",
           "check_oauth", "decode_jwt", "verify_bearer"]
