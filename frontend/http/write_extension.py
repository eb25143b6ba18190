"""rangetable's REST extension of entity writes: conditions on column values and atomic counters.

No Azure service has these; they ride on headers an unchanged Azure SDK can send per call
(``headers=`` in Python, ``requestOptions.customHeaders`` in JavaScript) and per operation of a
``$batch`` (the part's own headers). ``docs/http.md`` ("Conditions and counters") documents them:

* ``x-rangetable-condition``: a condition on the current entity in the ``$filter`` language,
  percent-encoded as in a URL's query where it is not ASCII (``%25`` for a ``%``);
* ``x-rangetable-expect``: ``exists``, ``absent`` or ``ignore``;
* ``x-rangetable-counters``: a JSON object of signed amounts, typed as in an entity body
  (``{"stock": -1}``, ``{"big": "5", "big@odata.type": "Edm.Int64"}``); the answer carries the new
  values in a header of the same name, in the same form.

The partition server checks them (:mod:`rangetable.write_conditions`); this module only moves them
between headers and the native write operation.

A write that carries the extension is made exactly-once under the client's own retries too: its
request id on the partition server is taken from ``x-ms-client-request-id`` (:func:`retry_id`), which
the Azure SDKs set once per call and keep across their retries (a retried decrement neither counts
twice nor fails its condition on its own first application). Other writes keep Azure's behaviour (a
retry the frontend did not make is a new request).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from rangetable.entity import RESERVED_NAMES
from rangetable.errors import TableError
from rangetable.rest_json import json_to_typed, typed_to_json
from rangetable.write_conditions import FIELDS

CONDITION = "x-rangetable-condition"
EXPECT = "x-rangetable-expect"
COUNTERS = "x-rangetable-counters"
HEADERS = (CONDITION, EXPECT, COUNTERS)
COUNTERS_HEADER = COUNTERS.encode()
MAX_CLIENT_ID = 128  # a longer x-ms-client-request-id is not used as a request id


def _bad(name: str, why: str) -> TableError:
    return TableError("InvalidHeaderValue", f"The value of {name} {why}.")


def condition_text(value: str) -> str:
    """The condition of an ``x-rangetable-condition`` value (read as Latin-1 by the listener): its
    bytes as UTF-8, then percent-decoded."""
    try:
        text = value if value.isascii() else value.encode("latin-1").decode("utf-8")
        return unquote(text, errors="strict")
    except UnicodeError:
        raise _bad(CONDITION, "is not UTF-8 (percent-encode the condition)") from None


def counters(value: str) -> dict[str, list[Any]]:
    """The typed amounts of an ``x-rangetable-counters`` value (a JSON object)."""
    try:
        doc = json.loads(value)
    except ValueError:
        raise _bad(COUNTERS, "is not a JSON object") from None
    if not isinstance(doc, dict) or not doc:
        raise _bad(COUNTERS, "is not a non-empty JSON object")
    reserved = RESERVED_NAMES.intersection(doc)
    if reserved:
        raise TableError("InvalidInput", f"{sorted(reserved)[0]!r} cannot be a counter.")
    _, _, amounts = json_to_typed(doc, pk="", rk="")
    if not amounts:
        raise _bad(COUNTERS, "names no counter")
    return amounts


def add_extension(op: dict, headers: Mapping[str, str]) -> dict:
    """``op`` (a native write operation) with the extension headers found in ``headers`` added."""
    cond = headers.get(CONDITION)
    if cond is not None:
        op["cond"] = condition_text(cond)
    expect = headers.get(EXPECT)
    if expect is not None:
        op["expect"] = expect.strip().lower()
    amounts = headers.get(COUNTERS)
    if amounts is not None:
        op["incr"] = counters(amounts)
    return op


def counter_values(op: Mapping[str, Any], ent: list | None) -> str | None:
    """The ``x-rangetable-counters`` answer of a write ``op`` that counted, from the entity it wrote
    (wire form): the new values as JSON, typed as in an entity body; None when it counted nothing."""
    incr = op.get("incr")
    if not incr or ent is None:
        return None
    doc = typed_to_json("", "", 0, ent[3], "minimal", select=list(incr))
    return json.dumps(doc, separators=(",", ":"))


def retry_id(headers: Mapping[str, str], account: str, ops: list[dict]) -> str | None:
    """The request id under which the partition server answers a retry of these write ops once: from
    the ``x-ms-client-request-id`` header, when one of the ops carries the extension (else None: a new
    id per try)."""
    crid = headers.get("x-ms-client-request-id")
    if not crid or len(crid) > MAX_CLIENT_ID or all(FIELDS.isdisjoint(op) for op in ops):
        return None
    return f"rest/{account}/{crid}"
