"""Unit tests of the pure parts of the REST frontend: URLs, payload encoding, tokens, headers, $batch
multipart, XML documents, and the ASGI app against a stub frontend (bad input never gives a 5xx)."""

from __future__ import annotations

import json
import math
import uuid

import pytest

from frontend.http import batch, odata, xmldocs
from frontend.http import entity_ops as ops
from frontend.http.odata import entity_path
from frontend.http.parse import parse_keys, parse_query, parse_resource
from rangetable.edm import etag_from_ticks, now_ticks, ticks_to_iso
from rangetable.errors import TableError
from rangetable.rest_json import typed_to_json

# --- URLs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path,kind,table,pk,rk", [
    ("/devstoreaccount1/Tables", "tables", None, None, None),
    ("/devstoreaccount1/Tables()", "tables", None, None, None),
    ("/devstoreaccount1/Tables('MyTable')", "table", "MyTable", None, None),
    ("/devstoreaccount1/Tables(%27MyTable%27)", "table", "MyTable", None, None),
    ("/devstoreaccount1/$batch", "batch", None, None, None),
    ("/devstoreaccount1/mytable", "entities", "mytable", None, None),
    ("/devstoreaccount1/mytable()", "entities", "mytable", None, None),
    ("/devstoreaccount1/mytable(PartitionKey='p%27%271',RowKey='r%201')", "entity", "mytable", "p'1", "r 1"),
    ("/devstoreaccount1/t(PartitionKey='a', RowKey='b')", "entity", "t", "a", "b"),
    ("/devstoreaccount1/t(RowKey='b',PartitionKey='a')", "entity", "t", "a", "b"),
    ("/devstoreaccount1/t(PartitionKey='',RowKey='')", "entity", "t", "", ""),
    ("/devstoreaccount1/t(PartitionKey='%E4%BD%A0%E5%A5%BD',RowKey='%25')", "entity", "t", "你好", "%"),
    ("/devstoreaccount1/t(PartitionKey='a%2Fb',RowKey='c')", "entity", "t", "a/b", "c"),
    ("/devstoreaccount1/t(PartitionKey='it''s',RowKey='x''''y')", "entity", "t", "it's", "x''y"),
    ("/devstoreaccount1/t(PartitionKey='a,RowKey=b',RowKey=')')", "entity", "t", "a,RowKey=b", ")"),
    ("/devstoreaccount1/", "service", None, None, None),
    ("/devstoreaccount1", "service", None, None, None),
    ("/devstoreaccount1/mytable/$changes", "changes", "mytable", None, None),
    ("/devstoreaccount1/mytable/%24changes/", "changes", "mytable", None, None),
    ("/devstoreaccount1-secondary/devstoreaccount1/", "service", None, None, None),
])
def test_parse_resource(path, kind, table, pk, rk):
    res = parse_resource(path, {})
    assert (res.kind, res.table, res.pk, res.rk, res.account) == (kind, table, pk, rk, "devstoreaccount1")


def test_parse_resource_secondary_and_host_style():
    assert parse_resource("/devstoreaccount1-secondary/", {}).secondary
    res = parse_resource("/mytable()", {}, host="acct.table.core.windows.net")
    assert (res.account, res.kind, res.table) == ("acct", "entities", "mytable")


@pytest.mark.parametrize("path", [
    "/", "/devstoreaccount1/t(PartitionKey='a',RowKey='b')x", "/devstoreaccount1/a/b", "/devstoreaccount1/t(PartitionKey='a')", "/devstoreaccount1/t(RowKey='a')",
    "/devstoreaccount1/t(PartitionKey='a',RowKey='b'", "/devstoreaccount1/t(PartitionKey='a',Foo='b')",
    "/devstoreaccount1/t(PartitionKey='a,RowKey='b')", "/devstoreaccount1/t(PartitionKey=a,RowKey=b)",
    "/devstoreaccount1/t(PartitionKey='%ff',RowKey='b')", "/devstoreaccount1/Tables('a'b')",
    "/devstoreaccount1/t(PartitionKey='a',RowKey='b',PartitionKey='c')", "/devstoreaccount1/(x)",
    "/devstoreaccount1/t x", "/devstoreaccount1/Tables(x)", "/devstoreaccount1/t/$change", "/devstoreaccount1/t()/$changes",
    "/devstoreaccount1/Tables/$changes", "/devstoreaccount1/$batch/$changes", "/devstoreaccount1/t/$changes/x",
])
def test_parse_resource_rejects(path):
    with pytest.raises(TableError) as ei:
        parse_resource(path, {})
    assert ei.value.status_code == 400


def test_parse_keys_and_entity_path_round_trip():
    for pk, rk in [("a", "b"), ("it's", "''"), ("", ""), ("a b,c", "x=y)"), ("你好", "%20")]:
        path = entity_path("t", pk, rk)
        res = parse_resource("/acct/" + path, {})
        assert (res.pk, res.rk) == (pk, rk)
        q = "'" * 2
        assert parse_keys(f"PartitionKey='{pk.replace(q[0], q)}',RowKey='{rk.replace(q[0], q)}'") == (pk, rk)


@pytest.mark.parametrize("qs,want", [
    ("", {}), ("a=1&b=", {"a": ["1"], "b": [""]}), ("$filter=PartitionKey%20eq%20%27a%27", {"$filter": ["PartitionKey eq 'a'"]}),
    ("x=%E4%BD%A0", {"x": ["你"]}), (b"comp=acl", {"comp": ["acl"]}),
])
def test_parse_query(qs, want):
    assert parse_query(qs) == want


def test_parse_query_rejects_bad_utf8():
    with pytest.raises(TableError):
        parse_query("x=%ff")


# --- payloads -----------------------------------------------------------------------------------------


TS = 638500000001234567
PROPS = {
    "S": [0, 'quote " and \u00e9 \U0001f600'], "I": [1, -7], "L": [2, 2**40], "D": [3, 5.0], "Dx": [3, 1e300],
    "Nan": [3, math.nan], "Inf": [3, math.inf], "NInf": [3, -math.inf], "B": [4, False],
    "T": [5, 637000000000000000], "T7": [5, 637000000001234567], "G": [6, str(uuid.UUID(int=5))], "X": [7, b"\x00\xff"],
}


@pytest.mark.parametrize("level", ["nometadata", "minimalmetadata", "fullmetadata"])
@pytest.mark.parametrize("select", [None, ["S", "L", "Missing", "Timestamp"], ["PartitionKey"], ["*"]])
def test_entity_text_matches_typed_to_json(level, select):
    got = json.loads(odata.entity_text(["p'k", "r/k", TS, PROPS], level, select=select, base="http://h/acct",
                                       account="acct", table="tbl"))
    want = typed_to_json("p'k", "r/k", TS, PROPS, metadata=level, select=select)
    body = {k: v for k, v in got.items() if not k.startswith("odata.")}
    assert list(body) == list(want)
    for k, v in want.items():
        assert body[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(body[k]))
    if level == "nometadata":
        assert not [k for k in got if k.startswith("odata.")]
    else:
        assert got["odata.etag"] == etag_from_ticks(TS)
    if level == "fullmetadata":
        assert got["odata.type"] == "acct.tbl" and got["odata.editLink"] == "tbl(PartitionKey='p''k',RowKey='r%2Fk')"
        assert got["odata.id"] == "http://h/acct/" + got["odata.editLink"]


@pytest.mark.parametrize("ticks", [0, 1, TS, now_ticks(), 3155378975999999999],
                         ids=["zero", "one", "ts", "now", "max"])  # now_ticks() differs between xdist workers
def test_iso_and_etag_match_edm(ticks):
    assert odata.iso_ticks(ticks) == ticks_to_iso(ticks, full=True)
    assert odata.iso_ticks(ticks, full=False) == ticks_to_iso(ticks)
    assert odata.etag_of(ticks) == etag_from_ticks(ticks)


def test_feeds_and_tables():
    feed = json.loads(odata.entity_feed([["p", "r", TS, {}]], "minimalmetadata", "http://h/a", "a", "t", None))
    assert feed["odata.metadata"] == "http://h/a/$metadata#t" and feed["value"][0]["RowKey"] == "r"
    assert json.loads(odata.table_feed(["x"], "nometadata", "b", "a")) == {"value": [{"TableName": "x"}]}
    full = json.loads(odata.table_single("x", "fullmetadata", "http://h/a", "a"))
    assert full["odata.editLink"] == "Tables('x')" and full["odata.metadata"].endswith("#Tables/@Element")


@pytest.mark.parametrize("accept,fmt,want", [
    (None, None, "minimalmetadata"), ("application/json", None, "minimalmetadata"),
    ("application/json;odata=nometadata", None, "nometadata"), ("application/json; odata=fullmetadata", None, "fullmetadata"),
    ("application/json;odata=fullmetadata", "application/json;odata=nometadata", "nometadata"),
    ("*/*", None, "minimalmetadata"), ("application/json;odata=minimalmetadata;charset=utf-8", None, "minimalmetadata"),
])
def test_metadata_level(accept, fmt, want):
    assert odata.metadata_level(accept, fmt) == want


@pytest.mark.parametrize("accept,code", [("application/atom+xml", "AtomFormatNotSupported"),
                                         ("application/json;odata=verbose", "InvalidInput")])
def test_metadata_level_rejects(accept, code):
    with pytest.raises(TableError) as ei:
        odata.metadata_level(accept)
    assert ei.value.error_code == code


@pytest.mark.parametrize("text", ["", "a", "p'1", "你好", "x/y+z=", "a" * 600])
def test_tokens_round_trip(text):
    tok = odata.encode_token(text)
    assert tok and tok.isascii() and " " not in tok and odata.decode_token(tok) == text


@pytest.mark.parametrize("bad", ["", "abc", "1!@@@", "1!/w=="])
def test_token_rejects(bad):
    with pytest.raises(TableError):
        odata.decode_token(bad)


@pytest.mark.parametrize("body,code", [(b"{", "InvalidInput"), (b"[]", "InvalidInput"), (b'{"a":1,"a":2}', "DuplicatePropertiesSpecified"),
                                       (b'{"a":NaN}', "InvalidInput"), (b"\xff", "InvalidInput"), (b"[" * 100000, "InvalidInput")])
def test_parse_json_object_rejects(body, code):
    with pytest.raises(TableError) as ei:
        odata.parse_json_object(body)
    assert ei.value.error_code == code


def test_error_bodies():
    e = TableError("EntityAlreadyExists")
    doc = json.loads(odata.error_json(e, "rid", "now", index=3))
    assert doc["odata.error"]["code"] == "EntityAlreadyExists"
    assert doc["odata.error"]["message"]["value"].startswith("3:The specified entity already exists.\nRequestId:rid")
    assert b"<Code>EntityAlreadyExists</Code>" in odata.error_xml(e, "rid", "now", "d<etail")


# --- headers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("headers,want", [({}, None), ({"prefer": "return-no-content"}, "return-no-content"),
                                          ({"prefer": " Return-Content "}, "return-content")])
def test_prefer(headers, want):
    assert ops.prefer(headers) == want


def test_prefer_rejects_garbage():
    with pytest.raises(TableError):
        ops.prefer({"prefer": "odata.maxpagesize=5"})


@pytest.mark.parametrize("method,headers,kind", [
    ("PUT", {}, "insert_or_replace"), ("PUT", {"if-match": "*"}, "replace"), ("PATCH", {}, "insert_or_merge"),
    ("MERGE", {"if-match": 'W/"x"'}, "merge"), ("DELETE", {"if-match": "*"}, "delete"),
])
def test_write_op_if_match_table(method, headers, kind):
    res = parse_resource("/a/t(PartitionKey='p',RowKey='r')", {})
    op = ops.write_op(method, headers, res, b'{"PartitionKey":5,"RowKey@odata.type":"Edm.DateTime","A":1}')
    assert (op["op"], op["pk"], op["rk"]) == (kind, "p", "r")
    assert op["if_match"] == headers.get("if-match")


@pytest.mark.parametrize("method,headers,code", [
    ("DELETE", {}, "MissingRequiredHeader"), ("PUT", {"if-none-match": "*"}, "InvalidInput"),
    ("GET", {}, "MethodNotAllowed"),
])
def test_write_op_rejects(method, headers, code):
    res = parse_resource("/a/t(PartitionKey='p',RowKey='r')", {})
    with pytest.raises(TableError) as ei:
        ops.write_op(method, headers, res, b"{}")
    assert ei.value.error_code == code


@pytest.mark.parametrize("text,want", [(None, None), ("", None), ("A", ["A"]), (" A , B ,", ["A", "B"]), ("*", None)])
def test_parse_select(text, want):
    assert ops.parse_select(text) == want


@pytest.mark.parametrize("text,ok", [("1", True), ("1000", True), ("0", True), ("-1", False), ("1001", False), ("x", False)])
def test_parse_top(text, ok):
    if ok:
        assert ops.parse_top(text) == int(text)
    else:
        with pytest.raises(TableError):
            ops.parse_top(text)


# --- $batch multipart ---------------------------------------------------------------------------------

SDK_BATCH = (
    "--batch_f8\r\nContent-Type: multipart/mixed; boundary=changeset_21\r\n\r\n"
    "--changeset_21\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: 0\r\n\r\n"
    "POST http://127.0.0.1:1/devstoreaccount1/mytable HTTP/1.1\r\nContent-Type: application/json\r\n"
    "Content-Length: 32\r\nAccept: application/json;odata=minimalmetadata\r\n\r\n"
    '{"PartitionKey": "b", "RowKey": "1"}\r\n'
    "--changeset_21\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: 1\r\n\r\n"
    "DELETE http://127.0.0.1:1/devstoreaccount1/mytable(PartitionKey='b',RowKey='4') HTTP/1.1\r\nIf-Match: *\r\n\r\n\r\n"
    "--changeset_21--\r\n\r\n--batch_f8--\r\n"
)


@pytest.mark.parametrize("eol", ["\r\n", "\n"])
def test_parse_sdk_batch(eol):
    body = SDK_BATCH.replace("Content-Length: 32", "Content-Length: 36").replace("\r\n", eol).encode()
    b = batch.parse_batch("multipart/mixed; boundary=batch_f8", body)
    assert b.singles == [] and [s.method for s in b.changeset] == ["POST", "DELETE"]
    post, delete = b.changeset
    assert json.loads(post.body) == {"PartitionKey": "b", "RowKey": "1"} and post.content_id == "0"
    assert delete.headers["if-match"] == "*" and delete.body == b"" and delete.url.endswith("RowKey='4')")


def test_parse_batch_pretty_json_with_crlf_inside():
    pretty = '{\r\n  "PartitionKey": "b",\r\n  "RowKey": "1"\r\n}'
    body = SDK_BATCH.replace('{"PartitionKey": "b", "RowKey": "1"}', pretty).replace(
        "Content-Length: 32", f"Content-Length: {len(pretty)}")
    b = batch.parse_batch("multipart/mixed; boundary=batch_f8", body.encode())
    assert json.loads(b.changeset[0].body) == {"PartitionKey": "b", "RowKey": "1"}


def test_parse_batch_without_content_length_and_quoted_boundary():
    body = SDK_BATCH.replace("Content-Length: 32\r\n", "").encode()
    b = batch.parse_batch('multipart/mixed; boundary="batch_f8"', body)
    assert json.loads(b.changeset[0].body)["RowKey"] == "1"


@pytest.mark.parametrize("ctype,body", [
    (None, SDK_BATCH), ("application/json", SDK_BATCH), ("multipart/mixed", SDK_BATCH),
    ("multipart/mixed; boundary=other", SDK_BATCH), ("multipart/mixed; boundary=batch_f8", SDK_BATCH[:200]),
    ("multipart/mixed; boundary=batch_f8", "--batch_f8--\r\n"),
    ("multipart/mixed; boundary=batch_f8", SDK_BATCH.replace("POST http", "POSThttp")),
    ("multipart/mixed; boundary=batch_f8", SDK_BATCH.replace("Content-Length: 32", "Content-Length: -1")),
    ("multipart/mixed; boundary=batch_f8", SDK_BATCH.replace("Content-Length: 32", "\x0bContent-Length: 32")),
    ("multipart/mixed; boundary=batch_f8", SDK_BATCH.replace("Content-Length: 32", ": 32")),
    ("multipart/mixed; boundary=batch_f8", SDK_BATCH.replace("Content-Type: application/http", "Content-Type: text/plain", 1)),
    ("multipart/mixed; boundary=batch_f8", SDK_BATCH.replace("--batch_f8--", "--batch_f8\r\nContent-Type: multipart/mixed;"
                                                             " boundary=c2\r\n\r\n--c2--\r\n--batch_f8--")),
])
def test_parse_batch_rejects(ctype, body):
    with pytest.raises(TableError) as ei:
        batch.parse_batch(ctype, body.encode())
    assert ei.value.status_code == 400


def test_format_batch_response_parses_back():
    import email

    parts = [batch.SubResponse(201, [("ETag", 'W/"x"'), ("Content-Type", "application/json")], b'{"a":1}', "0"),
             batch.SubResponse(204, [], b"", "1")]
    ctype, body = batch.format_batch(parts)
    assert ctype.startswith("multipart/mixed; boundary=batchresponse_")
    msg = email.message_from_bytes(f"Content-Type: {ctype}\r\n\r\n".encode() + body)
    inner = msg.get_payload()[0]
    http_parts = inner.get_payload()
    assert len(http_parts) == 2
    first = http_parts[0].get_payload()
    assert first.startswith("HTTP/1.1 201 Created\r\nContent-ID: 0") and first.rstrip().endswith('{"a":1}')


# --- XML documents ------------------------------------------------------------------------------------

ACL = (b'<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>a</Id><AccessPolicy>'
       b"<Start>2020-01-01T00:00:00Z</Start><Expiry>2030-01-01T00:00:00Z</Expiry><Permission>ra</Permission>"
       b"</AccessPolicy></SignedIdentifier><SignedIdentifier><Id>b</Id></SignedIdentifier></SignedIdentifiers>")


def test_acl_round_trip():
    acl = xmldocs.parse_acl(ACL)
    assert acl == {"a": {"start": "2020-01-01T00:00:00Z", "expiry": "2030-01-01T00:00:00Z", "permission": "ra"}, "b": None}
    assert xmldocs.parse_acl(xmldocs.format_acl(acl)) == acl
    assert xmldocs.parse_acl(b"") == {}


@pytest.mark.parametrize("body", [
    b"<x/>", b"<SignedIdentifiers><Nope/></SignedIdentifiers>", b"not xml",
    ACL.replace(b"<Permission>ra", b"<Permission>rw"), ACL.replace(b"<Id>a</Id>", b"<Id>" + b"x" * 65 + b"</Id>"),
    b"<SignedIdentifiers>" + b"".join(b"<SignedIdentifier><Id>%d</Id></SignedIdentifier>" % i for i in range(6))
    + b"</SignedIdentifiers>", b'<!DOCTYPE x [<!ENTITY a "b">]><SignedIdentifiers/>',
])
def test_acl_rejects(body):
    with pytest.raises(TableError) as ei:
        xmldocs.parse_acl(body)
    assert ei.value.error_code == "InvalidXmlDocument"


PROPS_XML = (b'<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0</Version>'
             b"<Delete>true</Delete><Read>false</Read><Write>true</Write><RetentionPolicy><Enabled>true</Enabled>"
             b"<Days>7</Days></RetentionPolicy></Logging><Cors><CorsRule><AllowedOrigins>http://a.com,http://b.com"
             b"</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods><MaxAgeInSeconds>5</MaxAgeInSeconds>"
             b"<ExposedHeaders>x-ms-*</ExposedHeaders><AllowedHeaders>x-ms-meta-*,accept</AllowedHeaders></CorsRule>"
             b"</Cors></StorageServiceProperties>")


def test_service_properties_round_trip_and_cors():
    p = xmldocs.parse_properties(PROPS_XML)
    assert set(p) == {"logging", "cors"} and p["logging"]["RetentionPolicy"]["Days"] == "7"
    again = xmldocs.parse_properties(xmldocs.format_properties(p))
    assert again["logging"] == p["logging"] and again["cors"] == p["cors"] and "hour_metrics" in again
    assert xmldocs.cors_match(p, "http://b.com", "put", ["x-ms-meta-foo", "Accept"]) is not None
    assert xmldocs.cors_match(p, "http://c.com", "GET") is None
    assert xmldocs.cors_match(p, "http://a.com", "DELETE") is None
    assert xmldocs.cors_match(p, "http://a.com", "GET", ["x-other"]) is None
    assert b"<Status>live</Status>" in xmldocs.format_stats("Sun, 22 Nov 2026 11:20:19 GMT")
