"""rangetable export / import: the file formats (pure), and round trips through a real cluster — all.

The tests that start no process; those that do are in tests/integration/test_transfer.py.
"""
from __future__ import annotations

import io

import pytest

from rangetable.client.transfer_format import (
    columns_of,
    csv_header,
    csv_line,
    format_of,
    jsonl_line,
    parse_csv,
    parse_header,
    parse_jsonl,
    records,
    split_record,
)
from rangetable.errors import TableError
from tests.typed_samples import same_props, typed_props

N = 300


def sample(n: int = N) -> list[tuple[str, str, int, dict]]:
    return [(f"p{i // 25:02d}", f"r{i:04d}", 638000000000000000 + i, typed_props(i)) for i in range(n)]


def test_jsonl_round_trip_keeps_every_type() -> None:
    for pk, rk, ts, props in sample():
        line = jsonl_line(pk, rk, ts, props)
        assert line.endswith("\n") and line.count("\n") == 1
        got = parse_jsonl(line)
        assert got is not None and got[:2] == (pk, rk) and same_props(got[2], props), line


def test_csv_round_trip_keeps_every_type_and_absent_apart_from_empty() -> None:
    ents = sample()
    cols = columns_of(e[3] for e in ents)
    assert ("i32", 0) in cols and ("i32", 1) in cols  # one name stored with two types: two columns
    text = csv_header(cols) + "".join(csv_line(*e, cols) for e in ents)
    recs = list(records(io.BytesIO(text.encode())))
    assert sum(n for _, n in recs) == len(text.encode())
    back = [parse_csv(t, parse_header(recs[0][0])) for t, _ in recs[1:]]
    assert len(back) == len(ents)
    for got, (pk, rk, _ts, props) in zip(back, ents, strict=True):
        assert got is not None and got[:2] == (pk, rk) and same_props(got[2], props), (got, props)
    assert any(e[3]["s"][1] == "" for e in ents if "s" in e[3]) and any("s" not in e[3] for e in ents)


def test_split_record() -> None:
    assert split_record('a,"",,"x,""y""\nz"') == ["a", "", None, 'x,"y"\nz']
    assert split_record("") == [None]
    assert split_record("a,") == ["a", None]
    with pytest.raises(ValueError, match="unexpected"):
        split_record('"a"b')


def test_bad_input_names_its_position() -> None:
    cols = parse_header("PartitionKey,RowKey,Timestamp,n:Edm.Int32,s:Edm.String,n:Edm.String")
    with pytest.raises(TableError, match="record 7: 4 fields") as e:
        parse_csv("p,r,,1", cols, "record 7")
    assert e.value.error_code == "InvalidInput"
    with pytest.raises(TableError, match="record 8: .*not a valid Edm.Int32"):
        parse_csv("p,r,,x,,", cols, "record 8")
    with pytest.raises(TableError, match="two typed columns"):
        parse_csv("p,r,,1,,one", cols, "record 9")
    with pytest.raises(TableError, match="name:Edm.Type"):
        parse_header("PartitionKey,RowKey,qty:Edm.Money")
    with pytest.raises(TableError, match="PartitionKey and RowKey"):
        parse_header("RowKey,PartitionKey")
    with pytest.raises(TableError, match="line 3: not JSON"):
        parse_jsonl("{nope", "line 3")
    with pytest.raises(TableError, match="line 4: PropertiesNeedValue"):
        parse_jsonl('{"RowKey": "r"}', "line 4")
    assert parse_jsonl("  \n") is None
    assert format_of("x.CSV", None) == "csv" and format_of("x.json", None) == "jsonl"
