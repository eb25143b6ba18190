"""A secondary index's definition: its name, the properties it is keyed on, what it keeps, its state.

Pure, shared by the coordinator (which stores definitions and moves their state), the frontends (whose
planner reads them from the partition map) and the CLI and clients (which check what users type).

An index ``NAME`` of table ``T`` is *declared* on one to :data:`MAX_ON` properties (``--on a,b``) and keeps
the keys of the base entity plus the properties named in ``include`` (``[]``: none, ``"all"``: every one).
Its entries live in a table of their own, :func:`index_table` (``T$NAME``: ``$`` is never in a user's table
name), split, moved, replicated and balanced like any table's ranges. A definition is ``building`` until its
online build has caught up with the base table, then ``ready``; only a ``ready`` index answers queries.

The wire and meta-store form is a dict ``{"name", "on": [..], "include": [..] | "all", "state", "table"}``
(:meth:`IndexDef.to_wire`), with ``check`` (``{"id", "repair"}``: a check asked for, which the applier runs)
and ``last_check`` (the last check's report) when there are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rangetable.errors import TableError

MAX_ON = 4  # properties an index is keyed on
MAX_INDEXES = 8  # indexes per table
SEPARATOR = "$"  # between a table's name and its index's in the index's table name
STATES = ("building", "ready")
LAG_BOUND_S = 10.0  # a ready index further behind its table than this holds the table's writes (back-pressure)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")
_RESERVED = frozenset({"PartitionKey", "RowKey", "Timestamp"})


@dataclass(frozen=True, slots=True)
class IndexDef:
    """One declared index of a table."""

    table: str  # the base table
    name: str
    on: tuple[str, ...]
    include: tuple[str, ...] | None  # None: every property
    state: str = "building"
    behind_s: float = 0.0  # set by the coordinator while the index is over LAG_BOUND_S behind: writes wait
    check: dict[str, Any] | None = field(default=None, compare=False)  # a check asked for: {"id", "repair"}
    last_check: dict[str, Any] | None = field(default=None, compare=False)  # the last check's report

    @property
    def entries_table(self) -> str:
        """The table that holds this index's entries."""
        return index_table(self.table, self.name)

    @property
    def ready(self) -> bool:
        """True once the online build has caught up: queries may use the index."""
        return self.state == "ready"

    def to_wire(self) -> dict[str, Any]:
        """The dict form kept in the meta store and the partition map."""
        out: dict[str, Any] = {"table": self.table, "name": self.name, "on": list(self.on),
                               "include": "all" if self.include is None else list(self.include), "state": self.state}
        if self.behind_s:
            out["behind_s"] = self.behind_s
        for k in ("check", "last_check"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> IndexDef:
        """The inverse of :meth:`to_wire` (trusted input: the coordinator checked it)."""
        inc = d.get("include", [])
        return cls(d["table"], d["name"], tuple(d["on"]), None if inc == "all" else tuple(inc),
                   d.get("state", "building"), float(d.get("behind_s", 0.0)), d.get("check"), d.get("last_check"))


def index_table(table: str, name: str) -> str:
    """The name of the table holding index ``name`` of ``table``."""
    return f"{table}{SEPARATOR}{name}"


def is_index_table(table: str) -> bool:
    """True for a table that holds an index's entries (never a user's table: its name has ``$``)."""
    return SEPARATOR in table


def base_of(index_table_name: str) -> tuple[str, str]:
    """(base table, index name) of an index's table."""
    table, _, name = index_table_name.partition(SEPARATOR)
    return table, name


def _props(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [p.strip() for p in value.split(",") if p.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise TableError("InvalidInput", f"{what} must be a list of property names.")
    for p in value:
        if p in _RESERVED:
            raise TableError("InvalidInput", f"{p} cannot be {what}: the table's keys already order it.")
        if not p.isidentifier() or len(p) > 255:
            raise TableError("PropertyNameInvalid", f"The property name {p!r} is invalid.")
    if len(set(value)) != len(value):
        raise TableError("DuplicatePropertiesSpecified", f"A property is named twice in {what}.")
    return tuple(value)


def check_def(table: str, name: Any, on: Any, include: Any = None) -> IndexDef:
    """A new definition from what a user typed (``on``/``include``: lists, or comma-separated text;
    ``include`` ``"all"`` keeps every property, None or ``[]`` none); raises TableError(InvalidInput,
    InvalidResourceName, PropertyNameInvalid, DuplicatePropertiesSpecified) with the reason."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise TableError("InvalidResourceName", f"Index name {name!r}: a letter, then up to 62 letters or digits.")
    keyed = _props(on, "an indexed property")
    if not 1 <= len(keyed) <= MAX_ON:
        raise TableError("InvalidInput", f"An index is keyed on 1 to {MAX_ON} properties, not {len(keyed)}.")
    kept: tuple[str, ...] | None
    if isinstance(include, str) and include.strip().lower() == "all":
        kept = None
    elif include is None or include == "" or include == []:
        kept = ()
    else:
        kept = tuple(p for p in _props(include, "an included property") if p not in keyed)
    return IndexDef(table, name, keyed, kept)


def holding_writes(ready: bool, behind_s: float, lag_s: float, bound_s: float = LAG_BOUND_S) -> float:
    """The ``behind_s`` an index's definition should carry once its applier reports ``lag_s``: the lag while a
    ready index is over ``bound_s`` behind (writes to its table wait), 0 once it is back under half the bound
    (so writes do not flap at the bound), else unchanged. A building index holds nothing: its table's writes
    go on while it catches up."""
    if not ready:
        return 0.0
    if lag_s > bound_s or (behind_s and lag_s > bound_s / 2):
        return round(max(lag_s, bound_s), 1) if not behind_s or abs(lag_s - behind_s) >= bound_s else behind_s
    return 0.0


def find(defs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The definition named ``name`` (case-insensitive) among a table's, or None."""
    low = name.lower()
    return next((d for d in defs if d["name"].lower() == low), None)
