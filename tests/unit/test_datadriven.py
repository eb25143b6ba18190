"""The pure cores as data-driven cases (tests/datadriven.py, files under tests/testdata/<core>/): ``$filter``
parsing (``filter``), query planning (``planner``), replica-set policy (``replica_sets``) and the HTTP
frontend's mapping of a REST request to a native one (``rest``). ``pytest
tests/unit/test_datadriven.py --rewrite`` writes each file again with the outputs the code gives now."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.replicas import sets as replica_sets
from frontend.http.parse import Request, refuse_secondary_write
from frontend.http.parse import parse as parse_request
from frontend.http.routes import plan_for, route
from rangetable.errors import TableError
from rangetable.filter_syntax import count_comparisons, describe, parse_filter, properties_used
from rangetable.planner import Plan, plan
from tests import datadriven
from tests.datadriven import Case


def _error(exc: TableError) -> str:
    return f"error: {exc.error_code}: {exc.message}"


def _names(text: str) -> list[str]:
    return [s for s in text.split(",") if s]


# --- filter: parse, then print the canonical form and what the filter reads ------------------------------------

def filter_case(c: Case) -> str:
    if c.command != "parse":
        raise ValueError(f"unknown command {c.command}")
    try:
        node = parse_filter("\n".join(c.input))
    except TableError as exc:
        return _error(exc)
    return (f"{describe(node)}\nuses: {', '.join(sorted(properties_used(node)))}\n"
            f"comparisons: {count_comparisons(node)}")


# --- planner: the scans a filter's plan reads ------------------------------------------------------------------

def _key(b: bytes | None) -> str:
    """An encoded key bound, readable: PartitionKey and RowKey parts split by ``/`` (the 0x00 byte), ``+`` for
    0x01 (just past a partition), ``∞`` for no bound."""
    if b is None:
        return "∞"
    return repr(b.decode("utf-8", "surrogatepass").replace("\x00", "/").replace("\x01", "+"))


def _plan(p: Plan) -> str:
    lines = [p.kind + (f" (partition {p.covers_single_partition!r})" if p.covers_single_partition is not None
                       else "")]
    lines += [f"  [{_key(s.lo)}, {_key(s.hi)})" for s in p.scans]
    return "\n".join(lines)


def planner_case(c: Case) -> str:
    if c.command != "plan":
        raise ValueError(f"unknown command {c.command}")
    text = "\n".join(c.input).strip()
    try:
        return _plan(plan(parse_filter(text) if text else None))
    except TableError as exc:
        return _error(exc)


# --- replica_sets: health, repair and promotion of one range's record -------------------------------------------

def _record(c: Case) -> dict:
    """The range record of a case's input: ``replicas=a,b,c insync=a,b state=serving primary=a``."""
    fields = dict(w.partition("=")[::2] for w in " ".join(c.input).split())
    replicas = _names(fields["replicas"])
    return {"id": "r1", "primary": fields.get("primary", replicas[0] if replicas else ""), "epoch": 3,
            "state": fields.get("state", "serving"), "replicas": replicas,
            "insync": _names(fields.get("insync", fields["replicas"]))}


def _pairs(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (p.split(":") for p in _names(text))}


def _show(value: object) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{k}: {_show(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def replica_sets_case(c: Case) -> str:
    rec = _record(c)
    if c.command == "health":
        return _show(replica_sets.health(rec, set(_names(c.arg("live"))), int(c.arg("want", "3"))))
    if c.command == "repair":
        counts = {k: int(v) for k, v in _pairs(c.arg("counts")).items()}
        out = replica_sets.repair(rec, int(c.arg("n", "3")), _pairs(c.arg("missing")), float(c.arg("grace", "10")),
                                  counts)
        return "nothing to do" if out is None else _show(out)
    if c.command == "promotion":
        positions = {k: int(v) for k, v in _pairs(c.arg("positions")).items()}
        return str(replica_sets.promotion(rec, positions, c.arg("prefer") or None))
    raise ValueError(f"unknown command {c.command}")


# --- rest: an HTTP request as the SDKs send it, and the native request the frontend maps it to --------------------

def rest_case(c: Case) -> str:
    """Input: the request line (``GET /account/table()?$filter=…``), ``Name: value`` header lines, then the JSON
    body if any. Output: the resource the URL names, and the native request of a point operation or query (or
    the handler that answers any other request), or Azure's error."""
    if c.command != "request":
        raise ValueError(f"unknown command {c.command}")
    method, target = c.input[0].split(" ", 1)
    path, _, query = target.partition("?")
    headers, body = {"host": "127.0.0.1:10002"}, []
    for line in c.input[1:]:
        if body or line.startswith(("{", "[")):
            body.append(line)
        else:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    rq = Request(method, path, query, headers)
    rq.body = "\n".join(body).encode()
    try:
        verb, comp = parse_request(rq, too_big=False)  # the stages of frontend/http/app.py, in its order
        res = rq.res
        assert res is not None
        refuse_secondary_write(res, verb)
        out = [f"resource: {res.kind}" + "".join(f" {k}={v!r}" for k, v in (
            ("account", res.account), ("table", res.table), ("pk", res.pk), ("rk", res.rk)) if v is not None)
            + (" (secondary)" if res.secondary else "")]
        plan_of = plan_for(res, verb, comp)
        if plan_of is None:
            out.append(f"handler: {route(res, verb, comp).__name__}" + (f" comp={comp}" if comp else ""))
        else:
            native, _ = plan_of(rq)
            out.append("native: " + json.dumps(native, sort_keys=True, default=repr))
        return "\n".join(out)
    except TableError as exc:
        return _error(exc)


HANDLERS: dict[str, Callable[[Case], str]] = {
    "filter": filter_case, "planner": planner_case, "replica_sets": replica_sets_case, "rest": rest_case}

CASES = [pytest.param(core, path, id=f"{core}/{path.name}") for core in HANDLERS for path in datadriven.files(core)]


@pytest.mark.parametrize("core, path", CASES)
def test_cases(core: str, path: Path, rewrite: bool) -> None:
    datadriven.run(path, HANDLERS[core], rewrite)


def test_every_core_has_cases() -> None:
    assert {core for core, _ in (p.values for p in CASES)} == set(HANDLERS)


def test_a_file_reads_back_as_it_was_written() -> None:
    text = "# a comment\n\nparse\nPartitionKey eq 'a'\n----\nPartitionKey eq 'a'\nuses: PartitionKey\n\n# end\n"
    cases, tail = datadriven.parse(text)
    assert [(c.command, c.input, c.expected) for c in cases] == [
        ("parse", ["PartitionKey eq 'a'"], ["PartitionKey eq 'a'", "uses: PartitionKey"])]
    assert datadriven.render(cases, tail) == text


def test_a_mismatch_fails_with_a_diff_and_rewrite_mends_it(tmp_path: Path) -> None:
    f = tmp_path / "cases.txt"
    f.write_text("parse\nRowKey eq 'b'\n----\nwrong\n")
    with pytest.raises(AssertionError, match=r"(?s)-wrong.*\+RowKey eq 'b'"):
        datadriven.run(f, filter_case)
    datadriven.run(f, filter_case, rewrite=True)
    datadriven.run(f, filter_case)
    assert f.read_text() == "parse\nRowKey eq 'b'\n----\nRowKey eq 'b'\nuses: RowKey\ncomparisons: 1\n"
