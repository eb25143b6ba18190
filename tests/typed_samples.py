"""Entities carrying all eight EDM types with their edge values, and a typed dump of a table, for the
round-trip tests of backup/restore and export/import."""

from __future__ import annotations

import math
from typing import Any

from cli.coordinator_client import call
from rangetable.edm import BINARY, BOOLEAN, DATETIME, DOUBLE, GUID, INT32, INT64, STRING

_DOUBLES = [0.0, -0.0, 1.5, -2.25e-300, 1.7976931348623157e308, 5e-324, 1e16, float("nan"), float("inf"),
            float("-inf"), 3.0, 0.1]
_STRINGS = ["", "plain", "comma, and \"quotes\"", "line\nbreak\r\nand tab\t", "ünïcødé ✓ 𝄞", "  padded  ", "\\N",
            "null", "123", "true"]
_BINARIES = [b"", b"\x00\x01\xff", bytes(range(256)), b"plain text", b"\n,\""]


def typed_props(i: int) -> dict[str, list[Any]]:
    """Properties of entity ``i``: every EDM type, cycling through edge values; some properties are
    left out on some entities (a sparse table, as Azure tables often are)."""
    props: dict[str, list[Any]] = {
        "s": [STRING, _STRINGS[i % len(_STRINGS)]],
        "i32": [INT32, [0, -1, 2**31 - 1, -(2**31), 42][i % 5]],
        "i64": [INT64, [0, 2**63 - 1, -(2**63), 2**40 + i, -7][i % 5]],
        "d": [DOUBLE, _DOUBLES[i % len(_DOUBLES)]],
        "b": [BOOLEAN, i % 2 == 0],
        "dt": [DATETIME, [504911232000000000, 3155378975999999999, 638000000000000001 + i * 1234567][i % 3]],
        "g": [GUID, f"{i:08x}-0000-4000-8000-{i * 7919:012x}"],
        "bin": [BINARY, _BINARIES[i % len(_BINARIES)]],
    }
    if i % 7 == 3:
        del props["s"], props["bin"]
    if i % 11 == 5:
        props["extra"] = [INT32, i]  # a property only some entities have
    if i % 13 == 6:
        props["i32"] = [STRING, "same name, another type"]
    return props


def dump(native: str, table: str, page: int = 1000) -> dict[tuple[str, str], tuple[int, dict]]:
    """Every entity of a table as ``{(pk, rk): (Timestamp ticks, typed props)}`` through the native
    query op (typed pairs exactly as stored)."""
    out: dict[tuple[str, str], tuple[int, dict]] = {}
    token = None
    while True:
        res = call(native, {"op": "query", "table": table, "top": page, "next": token}, timeout=30)
        for pk, rk, ts, props in res["entities"]:
            out[(pk, rk)] = (ts, props)
        token = res["next"]
        if token is None:
            return out


def same_props(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> bool:
    """Typed properties equal: same names, same type codes, same values (NaN equals NaN, -0.0 is not 0.0)."""
    if a.keys() != b.keys():
        return False
    for k, (code, v) in a.items():
        code2, v2 = b[k]
        if code != code2 or type(v) is not type(v2):
            return False
        if code == DOUBLE:
            if not (v == v2 or (math.isnan(v) and math.isnan(v2))) or math.copysign(1, v) != math.copysign(1, v2):
                return False
        elif v != v2:
            return False
    return True
