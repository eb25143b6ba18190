"""The XML documents of the non-OData operations: table ACLs, service properties, service stats.

Stored forms (what travels to the coordinator) are plain dicts:

* ACL: ``{id: {"start": str | None, "expiry": str | None, "permission": str | None} | None}`` — an
  identifier without ``<AccessPolicy>`` maps to None.
* Service properties: ``{"logging": {...}, "hour_metrics": {...}, "minute_metrics": {...},
  "cors": [rule, ...]}``; inside a section the XML element names are the keys, with text values. A
  Set sends only the sections it carries (the coordinator keeps the others, as Azure does).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any
from xml.sax.saxutils import escape

from rangetable.errors import TableError

XML_HEAD = '<?xml version="1.0" encoding="utf-8"?>'
MAX_POLICIES = 5
MAX_ID_LEN = 64
TABLE_PERMISSIONS = "raud"
_SECTIONS = {"Logging": "logging", "HourMetrics": "hour_metrics", "MinuteMetrics": "minute_metrics"}
_CORS_FIELDS = ("AllowedOrigins", "AllowedMethods", "MaxAgeInSeconds", "ExposedHeaders", "AllowedHeaders")

DEFAULT_PROPERTIES: dict[str, Any] = {
    "logging": {"Version": "1.0", "Delete": "false", "Read": "false", "Write": "false",
                "RetentionPolicy": {"Enabled": "false"}},
    "hour_metrics": {"Version": "1.0", "Enabled": "false", "RetentionPolicy": {"Enabled": "false"}},
    "minute_metrics": {"Version": "1.0", "Enabled": "false", "RetentionPolicy": {"Enabled": "false"}},
    "cors": [],
}


def _bad(message: str) -> TableError:
    return TableError("InvalidXmlDocument", message)


def _parse(body: bytes, root: str) -> ET.Element:
    if len(body) > 1024 * 1024:
        raise TableError("RequestBodyTooLarge")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:  # no entity expansion tricks
        raise _bad("DTDs are not allowed.")
    try:
        el = ET.fromstring(body)
    except ET.ParseError as exc:
        raise _bad(f"XML specified is not syntactically valid: {exc}") from None
    if el.tag != root:
        raise _bad(f"The root element must be <{root}>.")
    return el


def _text(el: ET.Element | None) -> str | None:
    if el is None:
        return None
    return (el.text or "").strip()


# --- ACL ------------------------------------------------------------------------------------------


def parse_acl(body: bytes) -> dict[str, dict[str, str | None] | None]:
    """Parse a Set Table ACL body; 400 InvalidXmlDocument for > 5 policies, bad ids or permissions."""
    if not body.strip():
        return {}
    root = _parse(body, "SignedIdentifiers")
    out: dict[str, dict[str, str | None] | None] = {}
    for si in root:
        if si.tag != "SignedIdentifier":
            raise _bad(f"Unexpected element <{si.tag}>.")
        ident = _text(si.find("Id"))
        if not ident or len(ident) > MAX_ID_LEN:
            raise _bad("A signed identifier needs an Id of 1 to 64 characters.")
        ap = si.find("AccessPolicy")
        if ap is None:
            out[ident] = None
            continue
        perm = _text(ap.find("Permission"))
        if perm and any(c not in TABLE_PERMISSIONS for c in perm):
            raise _bad(f"The permission {perm!r} is not valid for a table (use r, a, u, d).")
        out[ident] = {"start": _text(ap.find("Start")) or None, "expiry": _text(ap.find("Expiry")) or None,
                      "permission": perm or None}
    if len(out) > MAX_POLICIES:
        raise _bad("At most 5 stored access policies may be set on a table.")
    return out


def format_acl(acl: dict[str, Any]) -> bytes:
    """The Get Table ACL body."""
    parts = [XML_HEAD, "<SignedIdentifiers>"]
    for ident, pol in (acl or {}).items():
        parts.append(f"<SignedIdentifier><Id>{escape(ident)}</Id>")
        if pol and any(pol.values()):  # an identifier set without a policy reads back without one
            parts.append("<AccessPolicy>")
            for key, tag in (("start", "Start"), ("expiry", "Expiry"), ("permission", "Permission")):
                if pol.get(key):
                    parts.append(f"<{tag}>{escape(str(pol[key]))}</{tag}>")
            parts.append("</AccessPolicy>")
        parts.append("</SignedIdentifier>")
    parts.append("</SignedIdentifiers>")
    return "".join(parts).encode()


# --- service properties ------------------------------------------------------------------------------


def _section(el: ET.Element) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for child in el:
        out[child.tag] = _section(child) if len(child) else _text(child)
    return out


def parse_properties(body: bytes) -> dict[str, Any]:
    """Parse a Set Service Properties body into the stored form (only the sections present)."""
    root = _parse(body, "StorageServiceProperties")
    out: dict[str, Any] = {}
    for child in root:
        if child.tag in _SECTIONS:
            out[_SECTIONS[child.tag]] = _section(child)
        elif child.tag == "Cors":
            rules = []
            for rule in child:
                if rule.tag != "CorsRule":
                    raise _bad(f"Unexpected element <{rule.tag}> in <Cors>.")
                r = {f: _text(rule.find(f)) or "" for f in _CORS_FIELDS}
                if not r["AllowedOrigins"] or not r["AllowedMethods"]:
                    raise _bad("A CORS rule needs AllowedOrigins and AllowedMethods.")
                try:
                    int(r["MaxAgeInSeconds"] or 0)
                except ValueError:
                    raise _bad("MaxAgeInSeconds must be an integer.") from None
                rules.append(r)
            if len(rules) > 5:
                raise _bad("At most 5 CORS rules may be set.")
            out["cors"] = rules
        elif child.tag == "DefaultServiceVersion":
            out["default_service_version"] = _text(child)
        else:
            raise _bad(f"Unexpected element <{child.tag}>.")
    return out


def with_defaults(props: dict[str, Any] | None) -> dict[str, Any]:
    """Stored properties with the defaults filled in for sections never set."""
    return {**DEFAULT_PROPERTIES, **(props or {})}


def _dict_xml(d: dict[str, Any]) -> str:
    out = []
    for k, v in d.items():
        if v is None:
            continue
        out.append(f"<{k}>{_dict_xml(v) if isinstance(v, dict) else escape(str(v))}</{k}>")
    return "".join(out)


def format_properties(props: dict[str, Any] | None) -> bytes:
    """The Get Service Properties body."""
    p = with_defaults(props)
    parts = [XML_HEAD, "<StorageServiceProperties>"]
    for tag, key in _SECTIONS.items():
        section = p.get(key)
        parts.append(f"<{tag}>{_dict_xml(section if isinstance(section, dict) else {})}</{tag}>")
    parts.append("<Cors>")
    for r in p.get("cors") or []:
        parts.append("<CorsRule>" + "".join(f"<{f}>{escape(str(r.get(f, '')))}</{f}>" for f in _CORS_FIELDS)
                     + "</CorsRule>")
    parts.append("</Cors>")
    if p.get("default_service_version"):
        parts.append(f"<DefaultServiceVersion>{escape(str(p['default_service_version']))}</DefaultServiceVersion>")
    parts.append("</StorageServiceProperties>")
    return "".join(parts).encode()


def format_stats(last_sync: str) -> bytes:
    """The Get Service Stats body (``last_sync`` as RFC 1123; empty: a secondary cluster still copying, whose
    status is Azure's ``bootstrap``)."""
    status = "live" if last_sync else "bootstrap"
    return (f"{XML_HEAD}<StorageServiceStats><GeoReplication><Status>{status}</Status>"
            f"<LastSyncTime>{escape(last_sync)}</LastSyncTime></GeoReplication></StorageServiceStats>").encode()


# --- CORS -------------------------------------------------------------------------------------------


def _split(v: str) -> list[str]:
    return [x.strip() for x in (v or "").split(",") if x.strip()]


def cors_match(props: dict[str, Any] | None, origin: str, method: str,
               request_headers: list[str] | None = None) -> dict[str, Any] | None:
    """The first CORS rule allowing ``origin``/``method`` (and preflight ``request_headers``), or None."""
    for rule in (props or {}).get("cors") or []:
        origins = _split(rule.get("AllowedOrigins", ""))
        if "*" not in origins and origin.lower() not in (o.lower() for o in origins):
            continue
        if method.upper() not in (m.upper() for m in _split(rule.get("AllowedMethods", ""))):
            continue
        if request_headers and not _headers_allowed(rule, request_headers):
            continue
        return rule
    return None


def _headers_allowed(rule: dict[str, Any], requested: list[str]) -> bool:
    allowed = [h.lower() for h in _split(rule.get("AllowedHeaders", ""))]
    for h in requested:
        h = h.lower()
        if "*" in allowed or h in allowed:
            continue
        if any(a.endswith("*") and h.startswith(a[:-1]) for a in allowed):
            continue
        return False
    return True
