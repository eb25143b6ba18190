"""Pure parts of issue #14's Azure compatibility: the x-ms-version table, If-Match forms, CORS Vary,
the read-only secondary rule."""

from __future__ import annotations

import pytest

from frontend.http import entity_ops, render
from frontend.http.parse import (
    DEFAULT_VERSION,
    SUPPORTED_VERSIONS,
    VERSION_HEADERS,
    check_version,
    parse_resource,
    refuse_secondary_write,
)
from rangetable.errors import TableError


@pytest.mark.parametrize("version", ["2019-02-02", "2020-12-06", "2009-09-19", "2025-11-05", "2019-07-07"])
def test_known_versions_are_served(version):
    assert check_version(version) == version and VERSION_HEADERS[version] == version.encode()


def test_missing_version_is_the_default():
    assert check_version(None) == DEFAULT_VERSION == "2019-02-02" and DEFAULT_VERSION in SUPPORTED_VERSIONS


@pytest.mark.parametrize("version", ["2099-01-01", "abc", "2019-02-03", " 2019-02-02", "2019-2-2", "x" * 500])
def test_unknown_versions_are_refused(version):
    with pytest.raises(TableError) as ei:
        check_version(version)
    assert (ei.value.error_code, ei.value.status_code) == ("InvalidHeaderValue", 400)
    assert len(ei.value.message) < 300


@pytest.mark.parametrize("sent,passed", [
    ('W/"datetime\'2024\'"', 'W/"datetime\'2024\'"'), ('w/"datetime\'2024\'"', 'W/"datetime\'2024\'"'),
    (' w/"x" ', 'W/"x"'), ("*", "*"), ('"datetime\'2024\'"', '"datetime\'2024\'"'), ("bare", "bare"),
])
def test_if_match_weak_prefix_is_case_insensitive(sent, passed):
    assert entity_ops.if_match({"if-match": sent}) == passed


def test_cors_no_match_only_varies():
    assert render.cors_headers(render.NO_MATCH, "http://x") == [(b"vary", b"Origin")]
    exact = dict(render.cors_headers({"AllowedOrigins": "http://x", "ExposedHeaders": "x-ms-*"}, "http://x"))
    assert exact[b"vary"] == b"Origin" and exact[b"access-control-allow-origin"] == b"http://x"
    assert b"vary" not in dict(render.cors_headers({"AllowedOrigins": "*"}, "http://y"))


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_secondary_serves_reads(method):
    refuse_secondary_write(parse_resource("/devstoreaccount1-secondary/t()", {}), method)
    refuse_secondary_write(parse_resource("/devstoreaccount1/t()", {}), "POST")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "MERGE", "DELETE"])
def test_secondary_refuses_writes(method):
    with pytest.raises(TableError) as ei:
        refuse_secondary_write(parse_resource("/devstoreaccount1-secondary/t(PartitionKey='p',RowKey='r')", {}), method)
    assert (ei.value.error_code, ei.value.status_code) == ("InsufficientAccountPermissions", 403)
