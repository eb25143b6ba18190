"""Bearer tokens for development (``--oauth basic``): the pure checks, and the unchanged SDK over HTTPS.

The tests that start no process; those that do are in tests/integration/test_auth_bearer.py.
"""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from frontend.auth.authenticate import DEV_ACCOUNT, Accounts, AuthError, AuthResult, authenticate
from frontend.auth.bearer import audience_ok, check_oauth, decode_jwt, verify_bearer

NOW = 1_800_000_000.0
ISS = "https://sts.windows.net/72f988bf-86f1-41af-91ab-2d7cd011db47/"


def _b64(obj: Any) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def make_token(now: float = NOW, **claims: Any) -> str:
    """A JWT as Azure AD issues them (RS256 header), with a signature nobody checks."""
    body = {"aud": "https://storage.azure.com", "iss": ISS, "iat": int(now) - 60, "nbf": int(now) - 60,
            "exp": int(now) + 3600, "sub": "dev-user", "scp": "user_impersonation", **claims}
    body = {k: v for k, v in body.items() if v is not None}
    return f"{_b64({'typ': 'JWT', 'alg': 'RS256', 'kid': 'dev'})}.{_b64(body)}.{_b64(b'not-a-real-signature')}"


@contextmanager
def refused(detail: str) -> Iterator[Any]:
    """Expect an AuthError whose AuthenticationErrorDetail matches ``detail``."""
    with pytest.raises(AuthError) as exc:
        yield exc
    assert re.search(detail, exc.value.detail), exc.value.detail


def test_a_well_formed_token_passes() -> None:
    tok = verify_bearer(make_token(), DEV_ACCOUNT, NOW, "https", "127.0.0.1:10002")
    assert (tok.audience, tok.issuer, tok.subject, tok.expires) == ("https://storage.azure.com", ISS, "dev-user",
                                                                   int(NOW) + 3600)


@pytest.mark.parametrize("aud", [
    "https://storage.azure.com", "https://storage.azure.com/", "e406a681-f3d4-42a8-90b6-c2b029497af1",
    "https://devstoreaccount1.table.core.windows.net", "https://devstoreaccount1.table.core.chinacloudapi.cn/",
    "https://127.0.0.1:10002/devstoreaccount1", "https://127.0.0.1:10002/devstoreaccount1/",
])
def test_storage_audiences(aud: str) -> None:
    assert audience_ok(aud, DEV_ACCOUNT, "127.0.0.1:10002")
    verify_bearer(make_token(aud=aud), DEV_ACCOUNT, NOW, "https", "127.0.0.1:10002")


@pytest.mark.parametrize("aud", [
    "https://vault.azure.net", "https://storage.azure.com.evil", "https://other.table.core.windows.net",
    "https://devstoreaccount1.blob.core.windows.net", "http://127.0.0.1:10002/devstoreaccount1",
    "https://127.0.0.1:10002/other", "https://elsewhere:10002/devstoreaccount1", "https://storage.azure.com/x",
])
def test_other_audiences_fail(aud: str) -> None:
    assert not audience_ok(aud, DEV_ACCOUNT, "127.0.0.1:10002")
    with refused("audience") as exc:
        verify_bearer(make_token(aud=aud), DEV_ACCOUNT, NOW, "https", "127.0.0.1:10002")
    assert exc.value.error_code == "AuthenticationFailed" and exc.value.status_code == 403


@pytest.mark.parametrize(("claims", "detail"), [
    ({"exp": int(NOW) - 1}, "expired"),
    ({"nbf": int(NOW) + 60}, "not yet valid"),
    ({"iss": "https://login.example.com/tenant/"}, "issuer"),
    ({"iss": None}, "'iss'"),
    ({"aud": None}, "'aud'"),
    ({"exp": None}, "'exp'"),
    ({"nbf": None}, "'nbf'"),
    ({"iat": None}, "'iat'"),
    ({"exp": "tomorrow"}, "'exp'"),
    ({"aud": ["https://storage.azure.com"]}, "'aud'"),
])
def test_claims_that_fail(claims: dict, detail: str) -> None:
    with refused(detail):
        verify_bearer(make_token(**claims), DEV_ACCOUNT, NOW, "https")


def test_every_issuer_prefix_of_azurite() -> None:
    for iss in ("https://sts.windows.net/t/", "https://sts.microsoftonline.de/t/", "https://sts.chinacloudapi.cn/t/",
                "https://sts.windows-ppe.net/t/"):
        verify_bearer(make_token(iss=iss), DEV_ACCOUNT, NOW, "https")


@pytest.mark.parametrize("token", [
    "", "abc", "a.b", "a.b.c.d", "!!!.e30.", f"{_b64([1])}.{_b64({})}.", f"{_b64({})}.{_b64(b'not json')}.x",
    f"{_b64({})}.{_b64({})}.sig/with+std", "x" * 20000,
])
def test_malformed_tokens_fail(token: str) -> None:
    with pytest.raises(AuthError):
        decode_jwt(token)
    with pytest.raises(AuthError):
        verify_bearer(token, DEV_ACCOUNT, NOW, "https")


def test_unsigned_token_is_well_formed() -> None:
    header, claims = decode_jwt(make_token().rsplit(".", 1)[0] + ".")
    assert header["alg"] == "RS256" and claims["aud"] == "https://storage.azure.com"


def test_plain_http_is_refused_before_anything_else() -> None:
    with refused("not allowed with HTTP"):
        verify_bearer("garbage", DEV_ACCOUNT, NOW, "http")


def _authenticate(token: str, oauth: bool, scheme: str = "https") -> AuthResult:
    from datetime import UTC, datetime

    return authenticate(Accounts.from_specs([]), "GET", f"/{DEV_ACCOUNT}/Tables", {},
                        {"authorization": f"Bearer {token}", "host": "127.0.0.1:10002"},
                        now=datetime.fromtimestamp(NOW, UTC), scheme=scheme, oauth=oauth)


def test_authenticate_takes_bearer_only_with_oauth() -> None:
    assert _authenticate(make_token(), oauth=True) == AuthResult(DEV_ACCOUNT, None, "Bearer")
    with refused("--oauth basic"):
        _authenticate(make_token(), oauth=False)
    with refused("not allowed with HTTP"):
        _authenticate(make_token(), oauth=True, scheme="http")


def test_oauth_needs_https() -> None:
    check_oauth("", False)
    check_oauth("basic", True)
    with pytest.raises(ValueError, match="needs HTTPS"):
        check_oauth("basic", False)
    with pytest.raises(ValueError, match="must be one of basic"):
        check_oauth("full", True)


def test_a_remembered_token_still_expires() -> None:
    tok = make_token()
    verify_bearer(tok, DEV_ACCOUNT, NOW, "https")  # decoded once, then remembered
    verify_bearer(tok, DEV_ACCOUNT, NOW + 3600, "https")
    with refused("expired"):
        verify_bearer(tok, DEV_ACCOUNT, NOW + 3601, "https")
    with refused("audience"):
        verify_bearer(make_token(aud="https://devstoreaccount1.table.core.windows.net"), "otheraccount", NOW, "https")
