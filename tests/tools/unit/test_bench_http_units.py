"""`rangetable bench http --endpoint … --pid …`: measuring another Table endpoint (e.g. Azurite).

The tests that start no process; those that do are in tests/tools/integration/test_bench_http_units.py.
"""
from __future__ import annotations

import os

import pytest

from cli.bench.http import external_doc, server_pids, wrong_key
from cli.bench.proc import cpu_seconds

CONN = ("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
        "TableEndpoint=http://127.0.0.1:10012/devstoreaccount1;")


def test_external_doc_describes_the_endpoint_and_its_processes():
    doc = external_doc(CONN, [os.getpid()])
    assert doc["http"] == "http://127.0.0.1:10012/devstoreaccount1"
    assert doc["connection_string"] == CONN
    assert server_pids(doc) == [os.getpid()]  # counted as the server, like an HTTP frontend of ours
    assert server_pids(doc, ("http-frontend",)) == [os.getpid()]
    assert cpu_seconds(server_pids(doc)) > 0


@pytest.mark.parametrize(("conn", "pids", "message"), [
    ("AccountName=x;AccountKey=a2V5", [1], "names no TableEndpoint"),
    (CONN, [], "give the server's process ids"),
    (CONN, [2 ** 22 + 12345], "is running"),
])
def test_external_doc_refuses_what_it_cannot_measure(conn, pids, message):
    with pytest.raises(ValueError, match=message):
        external_doc(conn, pids)


def test_wrong_key_changes_only_the_key():
    bad = wrong_key(CONN)
    fields = dict(f.split("=", 1) for f in bad.split(";") if f)
    good = dict(f.split("=", 1) for f in CONN.split(";") if f)
    assert fields.keys() == good.keys()
    assert fields["AccountKey"] != good["AccountKey"] and len(fields["AccountKey"]) == len(good["AccountKey"])
    assert {k: v for k, v in fields.items() if k != "AccountKey"} == {k: v for k, v in good.items() if k != "AccountKey"}
