"""Unit tests of the native client's pure parts: filter parameters, paging, ETag conditions,
transaction tuples, error types, cluster.json lookup, and the transport's timeout handling."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

import msgpack
import pytest
import zmq

from rangetable import (
    EdmType,
    EntityProperty,
    MatchConditions,
    NoRetry,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    TableClient,
    TableError,
    TableServiceClient,
    TableTransactionError,
    TransactionOperation,
    UpdateMode,
    curve,
)
from rangetable.client.models import if_match, specific_error, transaction_error
from rangetable.client.paging import ItemPaged, format_literal, parameter_filter_substitution, select_list
from rangetable.client.transport import Transport
from rangetable.client.wire import batch_op, entity_token, write_metadata
from rangetable.edm import datetime_to_ticks, etag_from_ticks

sdk_serialize = pytest.importorskip("azure.data.tables._serialize")

# --- parameter substitution --------------------------------------------------------------------

SAME_AS_SDK = [
    ("Name eq @name", {"name": "O'Brien"}),
    ("Age gt @age and Age lt @hi", {"age": 30, "hi": -(2**31)}),
    ("Big eq @big", {"big": 2**40}),
    ("Neg eq @n", {"n": -(2**40)}),
    ("Score ge @s", {"s": 1.5}),
    ("Flag eq @f or Other eq @t", {"f": False, "t": True}),
    ("Id eq @g", {"g": uuid.UUID("12345678-1234-5678-1234-567812345678")}),
    ("Data eq @b", {"b": b"\x00\x01\xfe"}),
    ("When lt @d", {"d": datetime(2021, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)}),
    ("When lt @d", {"d": datetime(2021, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=2)))}),
    ("PartitionKey eq @pk and RowKey eq @rk", {"pk": "a b", "rk": "''"}),
    ("Name eq 'x'", {"unused": 1}),
]


@pytest.mark.parametrize("query, params", SAME_AS_SDK)
def test_substitution_matches_sdk(query: str, params: dict) -> None:
    expected = sdk_serialize._parameter_filter_substitution(params, query)
    assert parameter_filter_substitution(params, query) == expected


def test_substitution_examples() -> None:
    assert parameter_filter_substitution({"n": "it's"}, "Name eq @n") == "Name eq 'it''s'"
    assert parameter_filter_substitution({"v": 2**31}, "V eq @v") == "V eq 2147483648L"
    assert parameter_filter_substitution({"v": 2**31 - 1}, "V eq @v") == "V eq 2147483647"
    assert parameter_filter_substitution({"b": b"\xab\xcd"}, "B eq @b") == "B eq X'abcd'"
    assert parameter_filter_substitution({"a": 5}, "(Age gt @a)") == "(Age gt 5)"
    assert parameter_filter_substitution({"a": 5}, "(Age gt @a))") == "(Age gt 5))"
    assert parameter_filter_substitution(None, "A eq @a") == "A eq @a"
    assert parameter_filter_substitution({"a": 1}, "A  eq @a") == "A  eq 1"


def test_substitution_divergences_from_sdk_are_fixes() -> None:
    # the SDK tests `val in [True, False]`, so 1 becomes "true"; and it lets 2**31..2**32-1 through
    # without the L suffix although they do not fit Int32
    assert parameter_filter_substitution({"v": 1}, "V eq @v") == "V eq 1"
    assert parameter_filter_substitution({"v": 0}, "V eq @v") == "V eq 0"
    assert parameter_filter_substitution({"v": 3_000_000_000}, "V eq @v") == "V eq 3000000000L"


def test_naive_datetime_is_utc_and_exact_ticks_are_kept() -> None:
    naive = datetime(2020, 1, 2, 3, 4, 5)
    assert format_literal(naive) == "datetime'2020-01-02T03:04:05.000000Z'"
    from rangetable.values import TablesDatetime

    exact = TablesDatetime.from_ticks(datetime_to_ticks(naive) + 1234567)
    assert format_literal(exact) == "datetime'2020-01-02T03:04:05.1234567Z'"


def test_missing_parameter_is_key_error() -> None:
    with pytest.raises(KeyError):
        parameter_filter_substitution({"a": 1}, "A eq @b")


def test_str_enum_parameter_uses_its_value() -> None:
    assert format_literal(UpdateMode.MERGE) == "'merge'"


def test_select_list() -> None:
    assert select_list(None) is None
    assert select_list("a, b,c") == ["a", "b", "c"]
    assert select_list(["a", "b"]) == ["a", "b"]
    assert select_list("") is None


# --- paging ------------------------------------------------------------------------------------


def fake_fetch(pages: dict):
    """pages: token -> (next token, items); records the tokens asked for."""
    asked: list = []

    def fetch(token):
        asked.append(token)
        return pages[token]

    return fetch, asked


def test_item_paged_iterates_all_pages_including_empty_ones() -> None:
    fetch, asked = fake_fetch({None: ("t1", [1, 2]), "t1": ("t2", []), "t2": (None, [3])})
    assert list(ItemPaged(fetch)) == [1, 2, 3]
    assert asked == [None, "t1", "t2"]


def test_by_page_and_continuation_tokens() -> None:
    fetch, asked = fake_fetch({None: ("t1", [1, 2]), "t1": (None, [3])})
    pages = ItemPaged(fetch).by_page()
    first = next(pages)
    assert list(first) == [1, 2]
    assert pages.continuation_token == "t1" == first.continuation_token
    second = next(pages)
    assert list(second) == [3]
    assert pages.continuation_token is None
    with pytest.raises(StopIteration):
        next(pages)
    resumed = ItemPaged(fetch).by_page(continuation_token="t1")
    assert [list(p) for p in resumed] == [[3]]
    assert asked == [None, "t1", "t1"]


def test_nothing_is_fetched_before_iteration() -> None:
    fetch, asked = fake_fetch({None: (None, [])})
    paged = ItemPaged(fetch)
    assert asked == []
    assert list(paged) == []
    assert asked == [None]


def test_entity_tokens() -> None:
    assert entity_token(None) is None
    assert entity_token({"PartitionKey": "p", "RowKey": "r"}) == ["p", "r"]
    assert entity_token(("p", "r")) == ["p", "r"]
    with pytest.raises(ValueError):
        entity_token("nonsense")


# --- ETag conditions, transaction tuples, errors -----------------------------------------------


def test_if_match_follows_sdk_rules() -> None:
    etag = etag_from_ticks(637000000000000000)
    assert if_match(None, None) == "*"
    assert if_match(None, MatchConditions.Unconditionally) == "*"
    assert if_match(etag, MatchConditions.IfNotModified) == etag
    with pytest.raises(ValueError):
        if_match(None, MatchConditions.IfNotModified)
    with pytest.raises(ValueError):
        if_match(etag, MatchConditions.Unconditionally)
    with pytest.raises(ValueError):
        if_match(etag, MatchConditions.IfModified)


def test_if_match_takes_etag_from_entity_metadata() -> None:
    from rangetable.values import TableEntity

    e = TableEntity(PartitionKey="p", RowKey="r")
    e._metadata = {"etag": "W/\"datetime'x'\"", "timestamp": None}
    assert if_match(None, MatchConditions.IfNotModified, e) == "W/\"datetime'x'\""


def test_if_match_accepts_azure_core_match_conditions() -> None:
    core = pytest.importorskip("azure.core")
    assert if_match("e", core.MatchConditions.IfNotModified) == "e"
    assert if_match(None, core.MatchConditions.Unconditionally) == "*"


def test_batch_op_shapes() -> None:
    e = {"PartitionKey": "p", "RowKey": "r", "N": 1}
    assert batch_op(("create", e)) == {"op": "insert", "pk": "p", "rk": "r", "props": {"N": [1, 1]}, "if_match": None}
    assert batch_op(("upsert", e))["op"] == "insert_or_merge"
    assert batch_op(("upsert", e, {"mode": UpdateMode.REPLACE}))["op"] == "insert_or_replace"
    assert batch_op((TransactionOperation.UPDATE, e))["if_match"] == "*"
    assert batch_op(("Update", e, {"mode": "replace"}))["op"] == "replace"
    upd = batch_op(("update", e, {"etag": "x", "match_condition": MatchConditions.IfNotModified}))
    assert (upd["op"], upd["if_match"]) == ("merge", "x")
    d = batch_op(("delete", e))
    assert (d["op"], d["props"], d["if_match"]) == ("delete", {}, "*")
    with pytest.raises(ValueError, match="Unrecognized"):
        batch_op(("frobnicate", e))
    with pytest.raises(ValueError, match="PartitionKey"):
        batch_op(("create", {"RowKey": "r"}))
    with pytest.raises(TypeError):
        batch_op("create")


def test_error_types_by_status() -> None:
    cases = {
        "EntityNotFound": ResourceNotFoundError,
        "ResourceNotFound": ResourceNotFoundError,
        "TableNotFound": ResourceNotFoundError,
        "TableAlreadyExists": ResourceExistsError,
        "EntityAlreadyExists": ResourceExistsError,
        "UpdateConditionNotSatisfied": ResourceModifiedError,
    }
    for code, cls in cases.items():
        err = specific_error(TableError(code, "msg"))
        assert type(err) is cls and isinstance(err, TableError)
        assert (err.error_code, err.message) == (code, "msg")
    plain = TableError("InvalidInput")
    assert specific_error(plain) is plain
    busy = specific_error(TableError("ServerBusy"))
    assert busy.retriable and busy.status_code == 503


def test_transaction_error_carries_index() -> None:
    err = transaction_error(TableError("EntityAlreadyExists", index=3))
    assert isinstance(err, TableTransactionError) and isinstance(err, TableError)
    assert (err.index, err.status_code, err.error_code) == (3, 409, "EntityAlreadyExists")
    whole = TableError("TableNotFound")
    assert transaction_error(whole) is whole


def test_write_metadata() -> None:
    ts = datetime_to_ticks(datetime(2024, 5, 6, tzinfo=UTC)) + 7
    md = write_metadata(["p", "r", ts, {}])
    assert md["etag"] == etag_from_ticks(ts)
    assert md["timestamp"].ticks == ts
    assert write_metadata(None)["etag"] is None


def test_entity_property_and_edm_type_are_sdk_shaped() -> None:
    p = EntityProperty(5, EdmType.INT64)
    assert p.value == 5 and p.edm_type == "Edm.Int64"


# --- construction ------------------------------------------------------------------------------


def test_from_cluster_reads_native_endpoint(tmp_path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"native": "tcp://127.0.0.1:1"}))
    with TableServiceClient.from_cluster(tmp_path) as svc:
        assert svc.endpoint == "tcp://127.0.0.1:1"
        t = svc.get_table_client("abc")
        assert (t.table_name, t.endpoint) == ("abc", "tcp://127.0.0.1:1")
    with TableClient.from_cluster("xyz", data_dir=tmp_path) as t:
        assert t.table_name == "xyz"
    with pytest.raises(FileNotFoundError):
        TableServiceClient.from_cluster(tmp_path / "missing")


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        TableServiceClient("localhost:10012")
    with pytest.raises(ValueError):
        TableClient("tcp://127.0.0.1:1", "")


# --- transport against a real ZeroMQ ROUTER --------------------------------------------------


class Router:
    """A ROUTER that answers hello at once and delays other replies by ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        server, client = curve.KeyPair.generate(), curve.KeyPair.generate()
        curve.secure_server(self.sock, server, "unit-router")
        curve.guard(self.sock.context).allow("unit-router", lambda: {client.user_id})
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        curve.remember(self.endpoint, server.public, client)
        self.seen: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        pending: list[tuple[float, list[bytes]]] = []
        while not self.stop.is_set():
            if self.sock.poll(10):
                ident, rid, body = self.sock.recv_multipart()
                req = msgpack.unpackb(body)
                self.seen.append(req)
                if req["op"] == "hello":
                    reply = {"ok": {"version": 1, "max_message": 1 << 20, "frontend": "t"}}
                    self.sock.send_multipart([ident, rid, msgpack.packb(reply)])
                else:
                    reply = {"ok": {"echo": req.get("n")}}
                    pending.append((time.monotonic() + self.delay, [ident, rid, msgpack.packb(reply)]))
            now = time.monotonic()
            for item in [p for p in pending if p[0] <= now]:
                pending.remove(item)
                self.sock.send_multipart(item[1])
        self.sock.close(linger=0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def test_transport_handshake_and_reply() -> None:
    router = Router(delay=0.0)
    try:
        t = Transport(router.endpoint, timeout=5)
        assert t.request({"op": "x", "n": 1}) == {"echo": 1}
        assert t.request({"op": "x", "n": 2}) == {"echo": 2}
        assert [r["op"] for r in router.seen] == ["hello", "x", "x"]
        assert t.server_info["version"] == 1
        with pytest.raises(TableError) as info:
            t.request({"op": "x", "blob": b"\0" * (2 << 20)})
        assert info.value.error_code == "RequestBodyTooLarge"
        t.close()
        with pytest.raises(ValueError):
            t.request({"op": "x"})
    finally:
        router.close()


def test_timeout_reconnects_and_never_misattributes_a_late_reply() -> None:
    router = Router(delay=0.4)
    try:
        t = Transport(router.endpoint, timeout=0.2)
        with pytest.raises(TableError) as info:
            t.request({"op": "x", "n": 1})
        assert info.value.error_code == "OperationTimedOut" and info.value.retriable
        time.sleep(0.3)  # the late reply to n=1 is sent now, to the closed socket
        t.timeout = 2.0
        assert t.request({"op": "x", "n": 2}) == {"echo": 2}
        t.close()
    finally:
        router.close()


def test_endpoint_without_a_known_key_is_refused_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("RANGETABLE_DATA_DIR", str(tmp_path))  # no cluster.json there
    with TableServiceClient("tcp://127.0.0.1:7", timeout=0.2, retry_policy=NoRetry()) as svc:
        with pytest.raises(ValueError, match="no CURVE key known for tcp://127.0.0.1:7"):
            list(svc.list_tables())


def test_unreachable_endpoint_times_out() -> None:
    curve.remember("tcp://127.0.0.1:9", curve.KeyPair.generate().public, curve.KeyPair.generate())
    with TableServiceClient("tcp://127.0.0.1:9", timeout=0.2, retry_policy=NoRetry()) as svc:
        t0 = time.monotonic()
        with pytest.raises(TableError) as info:
            list(svc.list_tables())
        assert info.value.error_code == "OperationTimedOut"
        assert time.monotonic() - t0 < 2
