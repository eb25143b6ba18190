"""One write of an index's entries, spread over the ranges of the index's table, every range at once.

The applier hands the frontend a set of entries (entity key of the entry → its kept properties, or None for a
delete), its claim and the feed position of the last base record they come from. The write asks each range
that holds some of the keys to apply its share (``index_apply``, :mod:`partition_server.store.index_state`),
all at once; a share whose answer failed or never came (the range moved, split, merged or lost its primary)
is cut again by the map of then and asked again, with the same claim and position — a range that applied it
already skips it. The write is done when every key was answered for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frontend.routing import MapCache, Route
from rangetable.errors import TableError
from rangetable.keys import range_bounds


@dataclass
class IndexWrite:
    """Entries of one applier batch being written (see the module docstring)."""

    table: str  # the index's table
    claim: int
    pos: list | None  # [Timestamp, key] of the last base record, or None (the build's snapshot)
    pending: dict[bytes, dict | None]  # keys not yet answered for
    asked: dict[int, list[bytes]] = field(default_factory=dict)  # part id -> its keys, while awaited
    applied: int = 0  # parts a range applied
    skipped: int = 0  # parts a range had applied already
    _ids: int = 0

    @classmethod
    def from_request(cls, req: dict) -> IndexWrite:
        """The write an ``index_write`` request asks for; InvalidInput when malformed."""
        ops, claim, pos = req.get("ops"), req.get("claim"), req.get("pos")
        if not isinstance(ops, list) or type(claim) is not int:
            raise TableError("InvalidInput", "index_write needs ops and a claim")
        pending: dict[bytes, dict | None] = {}
        for op in ops:
            if not (isinstance(op, list | tuple) and len(op) == 2 and isinstance(op[0], bytes)):
                raise TableError("InvalidInput", "an index op is [key, properties or nil]")
            pending[op[0]] = op[1]
        return cls(req["table"], claim, pos, pending)

    @property
    def done(self) -> bool:
        """True once every key was answered for."""
        return not self.pending

    def parts(self, cache: MapCache) -> list[tuple[Route, int, dict[str, Any]]]:
        """The shares to ask now (keys neither answered nor awaited), cut by the ranges of ``cache``: each with
        its route, part id and partition-server request. Nothing is noted as asked until :meth:`sent`."""
        flying = {k for keys in self.asked.values() for k in keys}
        out: list[tuple[Route, int, dict[str, Any]]] = []
        keys = sorted(k for k in self.pending if k not in flying)
        i = 0
        while i < len(keys):
            route = cache.route_key(self.table, keys[i])
            _, hi = range_bounds(route.range["low"], route.range["high"])
            j = i + 1
            while j < len(keys) and (hi is None or keys[j] < hi):
                j += 1
            self._ids += 1
            share = keys[i:j]
            out.append((route, self._ids, {
                "op": "index_apply", "range": route.range["id"], "epoch": route.range["epoch"],
                "ops": [[k, self.pending[k]] for k in share], "claim": self.claim, "pos": self.pos}))
            i = j
        return out

    def sent(self, part: int, body: dict[str, Any]) -> None:
        """Note part ``part`` as asked."""
        self.asked[part] = [op[0] for op in body["ops"]]

    def failed(self, part: int) -> None:
        """Part ``part`` got no usable answer: its keys are asked again."""
        self.asked.pop(part, None)

    def take(self, part: int, answer: dict[str, Any]) -> None:
        """Part ``part``'s answer: ``{"applied": bool}`` (False: the range had applied it already)."""
        self.answered(part, bool(answer["applied"]))

    def result(self) -> dict[str, int]:
        """The answer once :attr:`done`: the parts the ranges applied and those they had applied already."""
        return {"applied": self.applied, "skipped": self.skipped}

    def answered(self, part: int, applied: bool) -> None:
        """Part ``part`` was applied (or had been)."""
        keys = self.asked.pop(part, None)
        if keys is None:
            return  # given up on meanwhile, and maybe asked again
        for k in keys:
            self.pending.pop(k, None)
        if applied:
            self.applied += 1
        else:
            self.skipped += 1
