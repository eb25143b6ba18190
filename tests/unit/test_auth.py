"""Authentication (frontend.auth.authenticate): requests signed by the real azure-data-tables 12.7.0 code.

Shared Key requests are captured from the SDK's own clients (TableServiceClient / TableClient with
an AzureNamedKeyCredential, a transport that records the request instead of sending it); SAS
tokens come from generate_table_sas / generate_account_sas and reach us the way the SDK sends them
(AzureSasCredential appends the token to the URL). Nothing here does I/O.
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
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.pipeline.transport import HttpTransport
from azure.data.tables import (
    TableClient,
    TableCorsRule,
    TableServiceClient,
)

from frontend.auth.authenticate import DEV_ACCOUNT, DEV_KEY, Accounts, AuthError, AuthResult, authenticate

ENDPOINT = "http://127.0.0.1:10002/devstoreaccount1"
DEV = AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY)
OTHER_KEY = base64.b64encode(b"k" * 64).decode()
ACCOUNTS = Accounts.from_specs([])


class _Stop(Exception):
    pass


class Capture(HttpTransport):
    """A transport that records each request and stops the pipeline."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *args: object) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def send(self, request: Any, **kwargs: Any) -> Any:
        self.requests.append(request)
        raise _Stop()


def sdk_request(call: Callable[[TableServiceClient], Any], credential: Any = DEV) -> Any:
    """The request the SDK sends for ``call(service_client)``."""
    cap = Capture()
    svc = TableServiceClient(ENDPOINT, credential=credential, transport=cap, retry_total=0)
    with pytest.raises(_Stop):
        call(svc)
    return cap.requests[-1]


def sas_request(call: Callable[[TableClient], Any], token: str, table: str = "mytable") -> Any:
    """The request the SDK sends for ``call(table_client)`` authenticated by a SAS token."""
    cap = Capture()
    tc = TableClient(ENDPOINT, table, credential=AzureSasCredential(token), transport=cap, retry_total=0)
    with pytest.raises(_Stop):
        call(tc)
    return cap.requests[-1]


def auth(req: Any, now: datetime | None = None, accounts: Accounts = ACCOUNTS, **kw: Any) -> AuthResult:
    """Run authenticate() on a captured SDK request, the way the HTTP frontend calls it."""
    u = urlsplit(req.url)
    headers = {k.lower(): v for k, v in req.headers.items()}
    if now is None and "x-ms-date" in headers and "sig=" not in u.query:
        now = datetime.strptime(headers["x-ms-date"], "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    return authenticate(accounts, req.method, u.path, parse_qs(u.query, keep_blank_values=True), headers,
                        now=now, **kw)


def code_of(fn: Callable[[], Any]) -> str:
    with pytest.raises(AuthError) as e:
        fn()
    assert e.value.status_code in (400, 403)
    return e.value.error_code


# --- accounts ---------------------------------------------------------------------------------


def test_accounts_default_and_custom() -> None:
    assert ACCOUNTS.key(DEV_ACCOUNT) == base64.b64decode(DEV_KEY)
    assert ACCOUNTS.key("nobody") is None
    acc = Accounts.from_specs([f"alpha1:{OTHER_KEY}", f"beta22:{DEV_KEY}"])
    assert acc.names() == ["alpha1", "beta22"] and acc.key("alpha1") == b"k" * 64
    assert DEV_ACCOUNT not in acc


@pytest.mark.parametrize("spec", ["nocolon", ":key", "name:", "UPPER:" + DEV_KEY, "ab:" + DEV_KEY,
                                  "good1:not base64!", "dup11:" + DEV_KEY])
def test_accounts_malformed(spec: str) -> None:
    specs = [spec, spec] if spec.startswith("dup") else [spec]
    with pytest.raises(ValueError):
        Accounts.from_specs(specs)


# --- Shared Key: every SDK operation verifies -------------------------------------------------

SDK_CALLS: dict[str, Callable[[TableServiceClient], Any]] = {
    "create_table": lambda s: s.create_table("MyTable"),
    "delete_table": lambda s: s.delete_table("MyTable"),
    "list_tables": lambda s: list(s.query_tables("TableName ge 'a'", results_per_page=5)),
    "insert": lambda s: s.get_table_client("mytable").create_entity({"PartitionKey": "p'1", "RowKey": "r 1"}),
    "get_odd_keys": lambda s: s.get_table_client("mytable").get_entity("p'1%", "你好 /x"),
    "upsert_merge": lambda s: s.get_table_client("t1").upsert_entity({"PartitionKey": "a", "RowKey": "b", "n": 1}),
    "update_replace": lambda s: s.get_table_client("t1").update_entity({"PartitionKey": "a", "RowKey": "b"},
                                                                       mode="replace"),
    "delete_entity": lambda s: s.get_table_client("t1").delete_entity("a", "b"),
    "query": lambda s: list(s.get_table_client("t1").query_entities("n eq @n", parameters={"n": 5},
                                                                    select=["n"])),
    "get_acl": lambda s: s.get_table_client("t1").get_table_access_policy(),
    "set_acl": lambda s: s.get_table_client("t1").set_table_access_policy({"id1": None}),
    "get_properties": lambda s: s.get_service_properties(),
    "set_properties": lambda s: s.set_service_properties(cors=[TableCorsRule(["*"], ["GET"])]),
    "stats_secondary": lambda s: s.get_service_stats(),
    "batch": lambda s: s.get_table_client("t1").submit_transaction(
        [("create", {"PartitionKey": "b", "RowKey": "1"}), ("upsert", {"PartitionKey": "b", "RowKey": "2"}),
         ("delete", {"PartitionKey": "b", "RowKey": "3"})]),
}


@pytest.mark.parametrize("name", list(SDK_CALLS))
def test_shared_key_from_sdk_accepted(name: str) -> None:
    req = sdk_request(SDK_CALLS[name])
    assert auth(req) == AuthResult(DEV_ACCOUNT, None, "SharedKey")


def test_sdk_requests_look_as_expected() -> None:
    """The shapes the verifier relies on (raw path, secondary stats path, multipart content type)."""
    assert urlsplit(sdk_request(SDK_CALLS["get_odd_keys"]).url).path == \
        "/devstoreaccount1/mytable(PartitionKey='p%27%271%25',RowKey='%E4%BD%A0%E5%A5%BD%20%2Fx')"
    assert urlsplit(sdk_request(SDK_CALLS["stats_secondary"]).url).path == \
        "/devstoreaccount1-secondary/devstoreaccount1/"
    assert sdk_request(SDK_CALLS["batch"]).headers["Content-Type"].startswith("multipart/mixed; boundary=")


# The §8.1 vectors of the reference (dev key), recomputed by hand there.
VECTORS = [
    ("GET", "/devstoreaccount1/mytable(PartitionKey='p%27%271',RowKey='r%201')", "", "",
     "Sun, 22 Nov 2026 11:20:19 GMT", "6g0XxOfu4m6LfKIK77pq5+Jub8NaB1hkSKC+Ks+oXvM="),
    ("POST", "/devstoreaccount1/Tables", "", "application/json;odata=nometadata",
     "Sun, 22 Nov 2026 11:20:19 GMT", "cyQ4acNhlQLsG8GQt7HmKoGcPg15UdJ/zuxLac0pCdE="),
    ("GET", "/devstoreaccount1/mytable()", "$top=1&$select=a&$filter=a%20eq%201", "",
     "Sun, 22 Nov 2026 11:20:19 GMT", "Uu+/NZOG7NBCoOO/1HE6TpDGd+2JjXOMouQRIan0cos="),
    ("GET", "/devstoreaccount1/mytable", "comp=acl", "",
     "Sun, 22 Nov 2026 11:20:19 GMT", "jthieBpBilKQJPUPS/9T/8N2M8qxeMl/QSH53+ZhR44="),
    ("POST", "/devstoreaccount1/$batch", "", "multipart/mixed; boundary=batch_f82237c9-3714-42bd-bc34-fbc44ccf952b",
     "Sun, 22 Nov 2026 11:20:19 GMT", "1CxEQL68k9qgt6u7U7btsvZx4P6LYncogCAxmGvR+UU="),
    ("GET", "/devstoreaccount1/", "restype=service&comp=properties", "",
     "Sun, 22 Nov 2026 11:22:18 GMT", "o8vHKR+Eh1iKtVyMpq+Y+r7l0gS1/WzVMFUVXi35fpM="),
]


def vector_args(v: tuple, sig: str | None = None, date_header: str = "x-ms-date") -> tuple:
    method, path, query, ctype, date, good = v
    headers = {date_header: date, "authorization": f"SharedKey {DEV_ACCOUNT}:{sig or good}"}
    if ctype:
        headers["content-type"] = ctype
    now = datetime.strptime(date, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    return method, path, parse_qs(query, keep_blank_values=True), headers, None, now


@pytest.mark.parametrize("v", VECTORS, ids=[v[1] for v in VECTORS])
def test_reference_vectors(v: tuple) -> None:
    assert authenticate(ACCOUNTS, *vector_args(v)).scheme == "SharedKey"
    assert authenticate(ACCOUNTS, *vector_args(v, date_header="date")).account == DEV_ACCOUNT  # Date only
    bad = vector_args(v, sig=v[5][:-2] + ("A=" if v[5][-2] != "A" else "B="))
    assert code_of(lambda: authenticate(ACCOUNTS, *bad)) == "AuthenticationFailed"


def lite_header(date: str, resource: str, key: str = DEV_KEY) -> str:
    mac = hmac.new(base64.b64decode(key), f"{date}\n{resource}".encode(), hashlib.sha256).digest()
    return f"SharedKeyLite {DEV_ACCOUNT}:{base64.b64encode(mac).decode()}"


def test_shared_key_lite() -> None:
    date = "Sun, 22 Nov 2026 11:20:19 GMT"
    now = datetime(2026, 11, 22, 11, 25, tzinfo=UTC)
    headers = {"x-ms-date": date, "authorization": lite_header(date, "/devstoreaccount1/devstoreaccount1/t1?comp=acl")}
    res = authenticate(ACCOUNTS, "PUT", "/devstoreaccount1/t1", {"comp": ["acl"]}, headers, now=now)
    assert res.scheme == "SharedKeyLite"
    headers["authorization"] = lite_header(date, "/devstoreaccount1/devstoreaccount1/t1")  # no ?comp
    assert code_of(lambda: authenticate(ACCOUNTS, "PUT", "/devstoreaccount1/t1", {"comp": ["acl"]}, headers,
                                        now=now)) == "AuthenticationFailed"


# --- Shared Key failures ------------------------------------------------------------------------


def tampered(req: Any) -> Any:
    kind, sig = req.headers["Authorization"].rsplit(":", 1)
    req.headers["Authorization"] = f"{kind}:{'A' if sig[0] != 'A' else 'B'}{sig[1:]}"
    return req


FAILURES: dict[str, Callable[[], Any]] = {
    "tampered signature": lambda: auth(tampered(sdk_request(SDK_CALLS["insert"]))),
    "wrong key": lambda: auth(sdk_request(SDK_CALLS["insert"], AzureNamedKeyCredential(DEV_ACCOUNT, OTHER_KEY))),
    "unknown account": lambda: auth(sdk_request(SDK_CALLS["insert"]), accounts=Accounts.from_specs([f"xyz:{DEV_KEY}"])),
    "signer is another account": lambda: auth(
        sdk_request(SDK_CALLS["insert"], AzureNamedKeyCredential("alpha1", DEV_KEY)),
        accounts=Accounts.from_specs([f"alpha1:{DEV_KEY}", f"{DEV_ACCOUNT}:{DEV_KEY}"])),
    "stale date": lambda: auth(sdk_request(SDK_CALLS["insert"]), now=datetime.now(UTC) + timedelta(minutes=20)),
    "date in the future": lambda: auth(sdk_request(SDK_CALLS["insert"]), now=datetime.now(UTC) - timedelta(minutes=16)),
    "no credentials": lambda: authenticate(ACCOUNTS, "GET", "/devstoreaccount1/Tables", {}, {}),
    "bearer": lambda: authenticate(ACCOUNTS, "GET", "/devstoreaccount1/Tables", {}, {"authorization": "Bearer x.y.z"}),
    "malformed header": lambda: authenticate(ACCOUNTS, "GET", "/devstoreaccount1/Tables", {},
                                             {"authorization": "SharedKey devstoreaccount1", "x-ms-date": "x"}),
    "no date": lambda: authenticate(ACCOUNTS, "GET", "/devstoreaccount1/Tables", {},
                                    {"authorization": "SharedKey devstoreaccount1:abc="}),
    "garbage date": lambda: authenticate(ACCOUNTS, "GET", "/devstoreaccount1/Tables", {},
                                         {"authorization": "SharedKey devstoreaccount1:abc=", "date": "yesterday"}),
    "other verb": lambda: auth(_with(sdk_request(SDK_CALLS["get_acl"]), method="PUT")),
    "other path": lambda: auth(_with(sdk_request(SDK_CALLS["get_acl"]), url=ENDPOINT + "/t2?comp=acl")),
    "other comp": lambda: auth(_with(sdk_request(SDK_CALLS["get_acl"]), url=ENDPOINT + "/t1?comp=list")),
}


def _with(req: Any, **changes: Any) -> Any:
    for k, v in changes.items():
        setattr(req, k, v)
    return req


@pytest.mark.parametrize("name", list(FAILURES))
def test_shared_key_failures(name: str) -> None:
    assert code_of(FAILURES[name]) == "AuthenticationFailed"


def test_failure_carries_detail() -> None:
    with pytest.raises(AuthError) as e:
        auth(tampered(sdk_request(SDK_CALLS["insert"])))
    assert e.value.status_code == 403 and "string to sign" in e.value.detail
    assert e.value.message.startswith("Server failed to authenticate the request.")


def test_skew_within_limit_is_fine() -> None:
    req = sdk_request(SDK_CALLS["insert"])
    assert auth(req, now=datetime.now(UTC) + timedelta(minutes=14)).account == DEV_ACCOUNT
