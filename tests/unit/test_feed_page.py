"""A change-feed page as readers outside the cluster see it (rangetable.feed_page): one JSON form for the native
client's records, the CLI's --json lines and the REST extension's NDJSON lines; where a reading starts; the
REST extension (frontend.http.changes_ops) against a stub native frontend. No processes."""

from __future__ import annotations

import asyncio
import json
import uuid

import msgpack
import pytest

from frontend.http import changes_ops
from frontend.http.app import RestApp
from frontend.http.parse import Request, parse
from rangetable import feed_cursor, feed_page
from rangetable.client.changes import ChangeFeed
from rangetable.edm import BINARY, DATETIME, DOUBLE, GUID, INT32, INT64, STRING, iso_to_ticks, ticks_to_iso
from rangetable.errors import TableError
from rangetable.keys import encode_key
from rangetable.rest_json import typed_to_json

TS = iso_to_ticks("2026-03-01T10:00:00.1234567Z")
PROPS = {"s": [STRING, "x"], "i": [INT32, 7], "big": [INT64, 2**40], "d": [DOUBLE, 1.5],
         "when": [DATETIME, iso_to_ticks("2020-01-02T03:04:05Z")], "g": [GUID, str(uuid.UUID(int=5))],
         "b": [BINARY, b"\x00\xff"]}
BEFORE = {"s": [STRING, "old"]}


def _value(ts: int, props: dict) -> bytes:
    return msgpack.packb([ts, props], use_bin_type=True)


def _records() -> list[list]:
    key = encode_key("p", "r")
    return [[TS, key, "replace", _value(TS, PROPS), _value(TS - 10, BEFORE)],
            [TS + 5, encode_key("p", "s"), "delete", None, None],
            [TS + 5, encode_key("q", "a"), "insert", _value(TS + 5, {}), None]]


def test_a_record_renders_its_entities_as_the_rest_api_does() -> None:
    rec = _records()[0]
    doc = feed_page.record_json(rec)
    assert doc == {"PartitionKey": "p", "RowKey": "r", "kind": "replace", "Timestamp": "2026-03-01T10:00:00.1234567Z",
                   "etag": "W/\"datetime'2026-03-01T10%3A00%3A00.1234567Z'\"",
                   "entity": typed_to_json("p", "r", TS, PROPS, "minimal"),
                   "before": typed_to_json("p", "r", TS - 10, BEFORE, "minimal"), "cursor": feed_cursor.encode((TS, rec[1]))}
    ent = doc["entity"]
    assert ent["big@odata.type"] == "Edm.Int64" and ent["big"] == str(2**40)
    assert ent["b@odata.type"] == "Edm.Binary" and ent["when@odata.type"] == "Edm.DateTime"
    assert "i@odata.type" not in ent and ent["i"] == 7
    assert json.loads(json.dumps(doc)) == doc  # JSON-ready
    assert feed_page.record_json(_records()[1])["entity"] is None


def test_the_native_client_and_the_rest_extension_share_one_json_form() -> None:
    answer = {"records": _records(), "cursor": [TS + 5, None], "resolved": TS + 9}
    page = ChangeFeed("t").read(answer)  # type: ignore[arg-type]
    assert [r.to_json() for r in page] == [feed_page.record_json(r) for r in _records()]
    assert page.to_json() == {"cursor": feed_cursor.encode((TS + 5, None)), "resolved": ticks_to_iso(TS + 9, full=True)}
    assert feed_page.end_json("c", None) == {"cursor": "c", "resolved": None}


def test_where_a_reading_starts() -> None:
    assert feed_page.parse_start("now") == "now" and feed_page.parse_start("beginning") == "beginning"
    assert feed_page.parse_start("2026-03-01T12:00:00+02:00") == iso_to_ticks("2026-03-01T10:00:00Z")
    with pytest.raises(ValueError):
        feed_page.parse_start("yesterday")
    assert feed_page.first(TS) == (TS - 1, None)  # the changes at or after TS
    assert feed_page.first("now", feed_cursor.encode((TS, b"k"))) == (TS, b"k")  # a cursor wins
    with pytest.raises(TableError):
        feed_page.first("later")
    assert feed_page.request("t", 5, "now") == {"op": "changes", "table": "t", "top": 5, "start": "now"}
    assert feed_page.request("t", 5, (TS, None)) == {"op": "changes", "table": "t", "top": 5, "after": [TS, None]}
    for bad in (0, feed_page.MAX_TOP + 1, True):
        with pytest.raises(TableError):
            feed_page.check_top(bad)


def _request(qs: str) -> Request:
    rq = Request("GET", "/devstoreaccount1/t/$changes", qs, {})
    parse(rq, False)
    return rq


@pytest.mark.parametrize("qs,want", [
    ("", {"start": "beginning", "top": feed_page.DEFAULT_TOP}),
    ("from=now&top=3", {"start": "now", "top": 3}),
    ("from=2026-03-01T10:00:00.1234567Z", {"after": [TS - 1, None], "top": feed_page.DEFAULT_TOP}),
    (f"cursor={feed_cursor.encode((TS, b'k'))}&from=now", {"after": [TS, b"k"], "top": feed_page.DEFAULT_TOP}),
])
def test_the_query_parameters_of_a_page(qs: str, want: dict) -> None:
    assert changes_ops.page_request("t", _request(qs)) == {"op": "changes", "table": "t", **want}


@pytest.mark.parametrize("qs", ["top=0", "top=10001", "top=x", "from=soon", "cursor=", "cursor=c1.AAAA", "cursor=nope"])
def test_bad_query_parameters_are_400_invalid_query_parameter_value(qs: str) -> None:
    with pytest.raises(TableError) as e:
        changes_ops.page_request("t", _request(qs))
    assert (e.value.error_code, e.value.status_code) == ("InvalidQueryParameterValue", 400)


class FeedFrontend:
    """Answers a ``changes`` request with the records above (and the request it got)."""

    def __init__(self) -> None:
        self.asked: list[dict] = []

    async def request(self, req: dict, timeout: float | None = None) -> dict:
        self.asked.append(req)
        if req["table"] == "gone":
            raise TableError("TableNotFound")
        return {"records": _records(), "cursor": [TS + 5, None], "resolved": None}


def _get(app: RestApp, path: str) -> tuple[int, dict, bytes]:
    raw_path, _, qs = path.partition("?")
    rq = Request("GET", raw_path, qs, {"host": "127.0.0.1"})
    resp = asyncio.run(app.respond(rq))
    return resp.status, {k.decode(): v.decode() for k, v in resp.headers}, resp.body


def test_a_page_over_http_is_ndjson_ending_in_the_cursor_line() -> None:
    app = RestApp(FeedFrontend())
    app.security.enabled = False
    status, headers, body = _get(app, "/devstoreaccount1/t/$changes?top=3")
    assert status == 200 and headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert lines[:-1] == [feed_page.record_json(r) for r in _records()]
    assert lines[-1] == {"cursor": feed_cursor.encode((TS + 5, None)), "resolved": None}
    assert headers["x-ms-continuation-cursor"] == lines[-1]["cursor"]
    status, headers, body = _get(app, "/devstoreaccount1/gone/$changes")
    assert status == 404 and headers["x-ms-error-code"] == "TableNotFound"
    status, headers, _ = _get(app, "/devstoreaccount1/t/$changes?top=0")
    assert status == 400 and headers["x-ms-error-code"] == "InvalidQueryParameterValue"
    status, headers, _ = _get(app, "/devstoreaccount1/t/$changes")
    assert status == 200
    rq = Request("POST", "/devstoreaccount1/t/$changes", "", {"host": "127.0.0.1"})
    assert asyncio.run(app.respond(rq)).status == 405
