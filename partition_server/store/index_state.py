"""What a range remembers of the applier of a change feed that writes into it: ``msgpack([claim, position])``,
written in the same WriteBatch as what it applied — under ``META_INDEX`` in a range of an index's entries
table, under ``META_SOURCE`` in a range of a secondary cluster (:meth:`RangeStore.apply_source
<partition_server.store.range_store.RangeStore.apply_source>`).

* ``claim`` — the fencing token (Kleppmann's) of the applier that wrote last: the coordinator numbers each
  grant of an index's claim above every earlier one, and a range refuses a batch under a lower claim
  (``IndexFenced``), so an applier that lost its claim and still runs can write nothing a newer one wrote.
* ``position`` — the change-feed position ``[Timestamp, entity key]`` of the last base record whose entries
  the range applied. A batch at or below it was applied already and is skipped, so an applier that resumes
  from an older cursor after a crash, or a second one racing it, never applies a base change twice or out
  of order. Batches of the online build's snapshot carry no position.

A split's halves keep the parent's state; a merge keeps the higher claim and the lower position
(:func:`merged`): the half that was further along applies a suffix again, harmless because every entry write is
the state its record left (a put of the entry, or its delete).
"""

from __future__ import annotations

from typing import Any

from rangetable import protocol
from rangetable.errors import TableError

Position = tuple[int, bytes]


def unpack(raw: bytes | None) -> tuple[int, Position | None]:
    """(claim, position or None) of a stored ``META_INDEX`` (None: never written)."""
    if raw is None:
        return 0, None
    claim, pos = protocol.unpack(raw)
    return claim, None if pos is None else (pos[0], pos[1])


def pack(claim: int, pos: Position | None) -> bytes:
    """The stored form."""
    return protocol.pack([claim, None if pos is None else list(pos)])


def admit(stored: tuple[int, Position | None], claim: int, pos: Position | None, fenced: str = "IndexFenced") -> bool:
    """Whether a batch of ``claim`` at ``pos`` is applied on a range holding ``stored``: the error ``fenced``
    (IndexFenced for an index's applier, SourceFenced for a secondary cluster's) under a lower claim; False
    (skip) at or below the stored position; True otherwise."""
    held, last = stored
    if claim < held:
        raise TableError(fenced, f"claim {claim} is below the range's {held}: a newer applier holds it")
    return pos is None or last is None or pos > last


def after(stored: tuple[int, Position | None], claim: int, pos: Position | None) -> tuple[int, Position | None]:
    """The state once an admitted batch is applied."""
    last = stored[1]
    return max(claim, stored[0]), (pos if pos is not None and (last is None or pos > last) else last)


def check(claim: Any, pos: Any) -> tuple[int, Position | None]:
    """A request's claim and position, checked (InvalidInput)."""
    if type(claim) is not int or claim < 0:
        raise TableError("InvalidInput", "claim must be a whole number")
    if pos is None:
        return claim, None
    if not (isinstance(pos, list | tuple) and len(pos) == 2 and type(pos[0]) is int and isinstance(pos[1], bytes)):
        raise TableError("InvalidInput", "position must be [Timestamp, key]")
    return claim, (pos[0], pos[1])


def merged(left: bytes | None, right: bytes | None) -> bytes | None:
    """A merged range's state: the higher claim, the lower position (None when neither half has one)."""
    if left is None and right is None:
        return None
    (lc, lp), (rc, rp) = unpack(left), unpack(right)
    pos = None if lp is None or rp is None else min(lp, rp)
    return pack(max(lc, rc), pos)
