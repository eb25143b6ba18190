"""An index's progress row: where its applier stands, kept in the index's own table (PartitionKey ``""``, below
every entry) and written like an entry (under the applier's claim), so it moves with the entries it describes.
The applier resumes from it; a query through the index reads it to know how far the index is applied."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from rangetable.edm import STRING
from rangetable.keys import encode_key

PROGRESS_PK, PROGRESS_RK = "", "progress"
PROGRESS_KEY = encode_key(PROGRESS_PK, PROGRESS_RK)


@dataclass
class Progress:
    """An applier's progress row (one JSON property ``state``)."""

    phase: str  # "build" (the base table is scanned) or "feed" (the feed is applied)
    start: list  # P0: the feed position the build started at
    scan: list | None = None  # the build's continuation token (None: from the start)
    cursor: list | None = None  # the feed position applied up to
    built: int = 0  # base entities the build read
    applied: int = 0  # feed records applied
    blind: int = 0  # of them, changes without a before-image: their old entries may be left (a check finds them)
    resolved: int | None = None  # the base table's resolved Timestamp at the last page, once at the live edge
    saved: float = 0.0  # unix time of the write

    def props(self) -> dict[str, list]:
        """The row's properties."""
        self.saved = time.time()
        return {"state": [STRING, json.dumps(asdict(self), default=_jsonable)]}

    @classmethod
    def from_props(cls, props: dict) -> Progress:
        """The inverse of :meth:`props`."""
        d = json.loads(props["state"][1])
        for k in ("start", "cursor", "scan"):
            if isinstance(d.get(k), list) and len(d[k]) == 2 and isinstance(d[k][1], dict):
                d[k] = [d[k][0], bytes.fromhex(d[k][1]["hex"])]
        return cls(**d)


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"hex": v.hex()}
    raise TypeError(type(v).__name__)
