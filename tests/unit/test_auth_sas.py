"""Authentication (frontend.auth.authenticate) of SAS tokens: service SAS, stored access policies (si), account SAS.

Tokens come from generate_table_sas / generate_account_sas and reach us the way the SDK sends them;
the helpers (captured SDK requests, ``auth``) are those of ``tests/unit/test_auth.py``. Nothing here does I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.data.tables import (
    AccountSasPermissions,
    ResourceTypes,
    TableClient,
    generate_account_sas,
    generate_table_sas,
)
from azure.data.tables._shared_access_signature import SharedAccessSignature

from frontend.auth.authenticate import DEV_ACCOUNT, DEV_KEY, AuthError, SasGrant, authenticate
from tests.unit.test_auth import ACCOUNTS, DEV, OTHER_KEY, SDK_CALLS, auth, code_of, sas_request, sdk_request

# --- service SAS ------------------------------------------------------------------------------

SOON = datetime.now(UTC) + timedelta(hours=1)
ENTITY = {"PartitionKey": "p", "RowKey": "r"}
# SDK call -> the permission letters check() is asked for, and whether it has keys
TABLE_OPS: dict[str, tuple[Callable[[TableClient], Any], str, bool]] = {
    "query": (lambda t: list(t.query_entities("PartitionKey eq 'p'")), "r", False),
    "get": (lambda t: t.get_entity("p", "r"), "r", True),
    "insert": (lambda t: t.create_entity(ENTITY), "a", True),
    "update": (lambda t: t.update_entity(ENTITY), "u", True),
    "upsert": (lambda t: t.upsert_entity(ENTITY), "au", True),
    "delete": (lambda t: t.delete_entity("p", "r"), "d", True),
}


def table_sas(**kw: Any) -> str:
    kw.setdefault("expiry", SOON)
    return generate_table_sas(DEV, kw.pop("table", "MyTable"), **kw)


def grant_for(token: str, op: str = "query", table: str = "mytable", **kw: Any) -> SasGrant:
    res = auth(sas_request(TABLE_OPS[op][0], token, table), **kw)
    assert res.scheme == "SAS" and res.account == DEV_ACCOUNT and res.sas is not None
    return res.sas


@pytest.mark.parametrize("perms", ["r", "a", "u", "d", "au", "raud"])
@pytest.mark.parametrize("op", list(TABLE_OPS))
def test_table_sas_permissions(perms: str, op: str) -> None:
    grant = grant_for(table_sas(permission=perms), op)
    assert grant.kind == "service" and grant.table == "MyTable"
    needed, keyed = TABLE_OPS[op][1], TABLE_OPS[op][2]
    pk, rk = ("p", "r") if keyed else (None, None)
    if set(needed) <= set(perms):
        grant.check(needed, "mytable", pk, rk)
    else:
        with pytest.raises(AuthError) as e:
            grant.check(needed, "mytable", pk, rk)
        assert e.value.error_code == "AuthorizationPermissionMismatch"


def test_reference_table_sas_vector() -> None:
    q = parse_qs("st=2020-01-01T00:00:00Z&se=2030-01-01T00:00:00Z&sp=ra&sv=2019-02-02&tn=MyTable&spk=a&srk=1"
                 "&epk=z&erk=9&sig=fxw0JEEtpJygumlZ2F3ZN9RQbufMCo0APonSMDvHxj8%3D")
    res = authenticate(ACCOUNTS, "GET", "/devstoreaccount1/MyTable()", q, {}, now=datetime(2025, 1, 1, tzinfo=UTC))
    assert res.sas is not None and res.sas.key_range == ("a", "1", "z", "9")


def test_table_sas_is_for_one_table_and_no_table_ops() -> None:
    grant = grant_for(table_sas(permission="raud"))
    grant.check("r", "MYTABLE")  # table names are case-insensitive
    for perm, table in [("r", "other"), ("r", None), ("l", None), ("c", "mytable"), ("d", "mytable"),
                        ("delete_table", "mytable"), ("service_read", None), ("acl", "mytable")]:
        with pytest.raises(AuthError) as e:
            grant.check(perm, table)
        assert e.value.error_code == "AuthorizationFailure", perm


def test_table_sas_without_tn_uses_the_url_table() -> None:
    token = "&".join(p for p in table_sas(permission="r").split("&") if not p.startswith("tn="))
    assert grant_for(token, table="MyTable").table == "MyTable"  # signed over the lower-cased name
    assert code_of(lambda: grant_for(token, table="Other")) == "AuthenticationFailed"


@pytest.mark.parametrize("change", ["sp=raud", "se=2099-01-01T00:00:00Z", "tn=Other", "spk=a"])
def test_tampered_table_sas(change: str) -> None:
    name = change.split("=")[0]
    parts = [p for p in table_sas(permission="r").split("&") if not p.startswith(name + "=")]
    token = "&".join([*parts, change])
    assert code_of(lambda: grant_for(token, table=change[3:] if name == "tn" else "mytable")) == "AuthenticationFailed"


def test_table_sas_wrong_key() -> None:
    token = generate_table_sas(AzureNamedKeyCredential(DEV_ACCOUNT, OTHER_KEY), "MyTable", permission="r",
                               expiry=SOON)
    assert code_of(lambda: grant_for(token)) == "AuthenticationFailed"


def test_time_window() -> None:
    now = datetime.now(UTC)
    assert code_of(lambda: grant_for(table_sas(permission="r", expiry=now - timedelta(seconds=5)))) == \
        "AuthenticationFailed"
    assert code_of(lambda: grant_for(table_sas(permission="r", start=now + timedelta(minutes=10)))) == \
        "AuthenticationFailed"
    grant_for(table_sas(permission="r", start=now + timedelta(minutes=2)))  # within the start skew
    token = table_sas(permission="r", start="2020-01-01", expiry="2020-02-01")  # date-only forms
    grant_for(token, now=datetime(2020, 1, 15, tzinfo=UTC))
    assert code_of(lambda: grant_for(token, now=datetime(2020, 2, 1, 0, 0, 1, tzinfo=UTC))) == "AuthenticationFailed"


def test_key_ranges() -> None:
    grant = grant_for(table_sas(permission="raud", start_pk="b", start_rk="5", end_pk="d", end_rk="2"))
    assert grant.key_range == ("b", "5", "d", "2") and grant.has_key_range
    inside = [("b", "5"), ("b", "9"), ("c", ""), ("c", "zzz"), ("d", ""), ("d", "2")]
    outside = [("a", "9"), ("b", "4"), ("b", ""), ("d", "3"), ("e", "")]
    for pk, rk in inside:
        assert grant.in_range(pk, rk)
        grant.check("u", "mytable", pk, rk)
    for pk, rk in outside:
        assert not grant.in_range(pk, rk)
        with pytest.raises(AuthError) as e:
            grant.check("a", "mytable", pk, rk)
        assert e.value.error_code == "AuthorizationFailure"
    grant.check("r", "mytable")  # a query is allowed and narrowed by key_range
    pk_only = grant_for(table_sas(permission="r", start_pk="m"))
    assert pk_only.key_range == ("m", None, None, None) and pk_only.in_range("m", "") and not pk_only.in_range("l")


def test_protocol_and_ip() -> None:
    https = table_sas(permission="r", protocol="https")
    assert code_of(lambda: grant_for(https)) == "AuthorizationProtocolMismatch"
    grant_for(https, scheme="https")
    grant_for(table_sas(permission="r", protocol="https,http"))
    ranged = table_sas(permission="r", ip_address_or_range="10.0.0.1-10.0.0.9")
    grant_for(ranged, client_ip="10.0.0.5")
    for ip in ("10.0.0.10", None, "::1"):
        assert code_of(lambda ip=ip: grant_for(ranged, client_ip=ip)) == "AuthorizationSourceIPMismatch"


# --- stored access policies (si) ---------------------------------------------------------------


def lookup(policies: dict[str, Any]) -> Callable[[str], dict]:
    def acl_lookup(table: str) -> dict:
        assert table.lower() == "mytable"
        return policies

    return acl_lookup


def test_stored_policy_supplies_fields() -> None:
    token = table_sas(policy_id="p1", expiry=None)
    expiry = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.0000000Z")
    grant = grant_for(token, acl_lookup=lookup({"p1": {"start": None, "expiry": expiry, "permission": "ra"}}))
    assert grant.permissions == {"r", "a"} and grant.policy_id == "p1"
    grant.check("a", "mytable", "x", "y")
    with pytest.raises(AuthError):
        grant.check("d", "mytable", "x", "y")
    # permission in the SAS, expiry from the policy
    grant = grant_for(table_sas(policy_id="p1", permission="d", expiry=None),
                      acl_lookup=lookup({"p1": {"start": None, "expiry": expiry, "permission": None}}))
    assert grant.permissions == {"d"}


def test_stored_policy_failures() -> None:
    past = "2020-01-01T00:00:00.0000000Z"
    token = table_sas(policy_id="p1", expiry=None)
    cases = {
        "missing policy": (token, lookup({"other": {"expiry": past, "permission": "r"}}), "AuthenticationFailed"),
        "no lookup": (token, None, "AuthenticationFailed"),
        "expired policy": (token, lookup({"p1": {"start": None, "expiry": past, "permission": "r"}}),
                           "AuthenticationFailed"),
        "no expiry anywhere": (token, lookup({"p1": {"start": None, "expiry": None, "permission": "r"}}),
                               "AuthenticationFailed"),
        "empty identifier": (token, lookup({"p1": None}), "AuthenticationFailed"),
        "field in both": (table_sas(policy_id="p1", permission="r"),
                          lookup({"p1": {"start": None, "expiry": None, "permission": "r"}}),
                          "InvalidQueryParameterValue"),
    }
    for name, (tok, acl_lookup, code) in cases.items():
        assert code_of(lambda t=tok, a=acl_lookup: grant_for(t, acl_lookup=a)) == code, name


# --- account SAS ------------------------------------------------------------------------------


def account_grant(resource_types: ResourceTypes, perms: str, op: str = "query", **kw: Any) -> SasGrant:
    token = generate_account_sas(DEV, resource_types, AccountSasPermissions.from_string(perms), SOON, **kw)
    return grant_for(token, op)


def test_account_sas_entities() -> None:
    grant = account_grant(ResourceTypes(object=True), "ra")
    assert grant.kind == "account" and grant.table is None and grant.key_range == (None, None, None, None)
    grant.check("r", "anytable")
    grant.check("a", "othertable", "p", "r")
    for perm, code in [("u", "AuthorizationPermissionMismatch"), ("d", "AuthorizationResourceTypeMismatch"),
                       ("l", "AuthorizationResourceTypeMismatch"), ("acl", "AuthorizationFailure")]:
        with pytest.raises(AuthError) as e:
            grant.check(perm, "t1")
        assert e.value.error_code == code, perm


def test_account_sas_tables_and_service() -> None:
    grant = account_grant(ResourceTypes(service=True, container=True), "rwdlc")
    for perm, table in [("l", None), ("c", "t1"), ("create_table", "t1"), ("delete_table", "t1"), ("d", "t1"),
                        ("service_read", None), ("service_write", None)]:
        grant.check(perm, table)
    with pytest.raises(AuthError) as e:
        grant.check("r", "t1", "p", "r")
    assert e.value.error_code == "AuthorizationResourceTypeMismatch"
    narrow = account_grant(ResourceTypes(container=True), "r")
    for perm, code in [("l", "AuthorizationPermissionMismatch"), ("c", "AuthorizationPermissionMismatch"),
                       ("service_read", "AuthorizationResourceTypeMismatch")]:
        with pytest.raises(AuthError) as e:
            narrow.check(perm, None)
        assert e.value.error_code == code, perm


def test_account_sas_failures() -> None:
    rt, perms = ResourceTypes(object=True), AccountSasPermissions(read=True)
    expired = generate_account_sas(DEV, rt, perms, datetime.now(UTC) - timedelta(seconds=1))
    assert code_of(lambda: grant_for(expired)) == "AuthenticationFailed"
    wrong_key = generate_account_sas(AzureNamedKeyCredential(DEV_ACCOUNT, OTHER_KEY), rt, perms, SOON)
    assert code_of(lambda: grant_for(wrong_key)) == "AuthenticationFailed"
    tampered_token = generate_account_sas(DEV, rt, perms, SOON).replace("sp=r", "sp=rwdlacu")
    assert code_of(lambda: grant_for(tampered_token)) == "AuthenticationFailed"
    blob_only = SharedAccessSignature(DEV).generate_account("b", rt, perms, SOON)
    assert code_of(lambda: grant_for(blob_only)) == "AuthorizationServiceMismatch"
    https = generate_account_sas(DEV, rt, perms, SOON, protocol="https")
    assert code_of(lambda: grant_for(https)) == "AuthorizationProtocolMismatch"


def test_account_sas_newer_version_signs_encryption_scope() -> None:
    rt, perms = ResourceTypes(object=True), AccountSasPermissions(read=True)
    token = SharedAccessSignature(DEV, x_ms_version="2019-02-02").generate_account("t", rt, perms, SOON)
    q = {k: v for k, v in parse_qs(token).items()}
    se, sv = q["se"][0], "2020-12-06"
    sts = f"{DEV_ACCOUNT}\nr\nt\no\n\n{se}\n\n\n{sv}\n\n"
    sig = base64.b64encode(hmac.new(base64.b64decode(DEV_KEY), sts.encode(), hashlib.sha256).digest()).decode()
    q.update(sv=[sv], sig=[sig])
    res = authenticate(ACCOUNTS, "GET", "/devstoreaccount1/t1()", q, {})
    assert res.sas is not None and res.sas.kind == "account"


@pytest.mark.serial  # a wall-clock bound: runs alone, after the parallel part
def test_shared_key_wins_over_sas_and_is_fast() -> None:
    import time

    req = sdk_request(SDK_CALLS["insert"])
    u = urlsplit(req.url)
    headers = {k.lower(): v for k, v in req.headers.items()}
    query = parse_qs("sig=garbage", keep_blank_values=True)
    now = datetime.strptime(headers["x-ms-date"], "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    t0 = time.perf_counter()
    for _ in range(2000):
        res = authenticate(ACCOUNTS, req.method, u.path, query, headers, now=now)
    per_call = (time.perf_counter() - t0) / 2000
    assert res.scheme == "SharedKey"
    assert per_call < 500e-6, f"{per_call * 1e6:.0f} µs per authentication"
