"""Raw HTTP helpers for the REST tests: a keep-alive client that signs like the SDK does.

The signing here is written from the reference (§8.1), independently of ``frontend/auth/authenticate.py``:
``SharedKey``: ``VERB\\nContent-MD5\\nContent-Type\\nDate\\n/account/raw-path[?comp=v]``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs, urlsplit

DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def sign(string_to_sign: str, key: str = DEV_KEY) -> str:
    """Base64 HMAC-SHA256 of a string-to-sign."""
    mac = hmac.new(base64.b64decode(key), string_to_sign.encode("utf-8"), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


class Reply:
    """A raw HTTP response."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)

    @property
    def code(self) -> str | None:
        """The x-ms-error-code header."""
        return self.headers.get("x-ms-error-code")

    def __repr__(self) -> str:
        return f"<Reply {self.status} {self.code or ''} {self.body[:300]!r}>"


class Raw:
    """One keep-alive connection to an HTTP frontend, signing every request with Shared Key."""

    def __init__(self, account_url: str, key: str = DEV_KEY, account: str = DEV_ACCOUNT) -> None:
        u = urlsplit(account_url)
        self.host, self.port, self.prefix = u.hostname, u.port, u.path.rstrip("/")
        self.key, self.account = key, account
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def request(self, method: str, path: str, body: bytes | str | dict | None = None,
                headers: dict[str, str] | None = None, *, sign_as: str | None = "SharedKey",
                date: str | None = None, prefix: bool = True) -> Reply:
        """Send a request to ``{account URL}{path}`` (path as sent: percent-encoded, with query)."""
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        full = (self.prefix if prefix else "") + path
        h = {"x-ms-version": "2019-02-02", "DataServiceVersion": "3.0", "Accept": "application/json;odata=minimalmetadata"}
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        h = {k: v for k, v in h.items() if v is not None}
        d = date or formatdate(usegmt=True)
        h.setdefault("x-ms-date", d)
        if sign_as:
            raw_path, _, qs = full.partition("?")
            comp = parse_qs(qs).get("comp")
            resource = f"/{self.account}{raw_path}" + (f"?comp={comp[0]}" if comp else "")
            lower = {k.lower(): v for k, v in h.items()}
            if sign_as == "SharedKey":
                sts = f"{method}\n{lower.get('content-md5', '')}\n{lower.get('content-type', '')}\n{h['x-ms-date']}\n{resource}"
            else:
                sts = f"{h['x-ms-date']}\n{resource}"
            h["Authorization"] = f"{sign_as} {self.account}:{sign(sts, self.key)}"
        try:
            self.conn.request(method, full, body=body, headers=h)
            resp = self.conn.getresponse()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.conn.request(method, full, body=body, headers=h)
            resp = self.conn.getresponse()
        data = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    def get(self, path: str, **kw: Any) -> Reply:
        """GET."""
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        """POST."""
        return self.request("POST", path, body, **kw)


def batch_body(boundary: str, changeset: str, parts: list[tuple[str, str, dict[str, str], str | None]],
               base: str) -> bytes:
    """A $batch body in the SDK's exact shape: one changeset, Content-IDs from 0, CRLF line ends."""
    out = [f"--{boundary}", f"Content-Type: multipart/mixed; boundary={changeset}", ""]
    for i, (method, path, headers, body) in enumerate(parts):
        out += [f"--{changeset}", "Content-Type: application/http", "Content-Transfer-Encoding: binary",
                f"Content-ID: {i}", "", f"{method} {base}{path} HTTP/1.1"]
        hs = {"x-ms-version": "2019-02-02", "DataServiceVersion": "3.0",
              "Accept": "application/json;odata=minimalmetadata", **headers}
        if body is not None:
            hs["Content-Type"] = "application/json"
            hs["Content-Length"] = str(len(body.encode()))
        out += [f"{k}: {v}" for k, v in hs.items()]
        out += ["", body or ""]
    out += [f"--{changeset}--", "", f"--{boundary}--", ""]
    return "\r\n".join(out).encode()


def assert_secondary_refuses_writes(t: Any, pk: str, rk: str) -> None:
    """Every kind of write through ``t``, an azure-data-tables TableClient on the ``-secondary`` endpoint, is
    refused with 403 InsufficientAccountPermissions (insert, upsert and delete of the entity (pk, rk), which
    exists, and a transaction)."""
    import pytest
    from azure.core.exceptions import HttpResponseError

    for write in (lambda: t.create_entity({"PartitionKey": pk, "RowKey": rk + "-new"}),
                  lambda: t.upsert_entity({"PartitionKey": pk, "RowKey": rk, "A": -1}),
                  lambda: t.delete_entity(pk, rk),
                  lambda: t.submit_transaction([("upsert", {"PartitionKey": pk, "RowKey": rk + "-tx"})])):
        with pytest.raises(HttpResponseError) as ei:
            write()
        assert ei.value.status_code == 403
        assert ei.value.response.headers["x-ms-error-code"] == "InsufficientAccountPermissions"

