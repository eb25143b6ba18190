"""Finding the leading coordinator among several (used by partition servers, frontends and the CLI).

Every process is given the list of coordinator endpoints (``--coordinator a,b,c``, comma-separated,
also ``RANGETABLE_COORDINATOR`` and ``cluster.json``). It talks to one of them at a time: a standby
answers ``NotLeader`` naming the leader when it knows it, and an endpoint that stays silent is
left for the next one in the list. :class:`LeaderTracker` is that policy, free of sockets.
"""

from __future__ import annotations

import re

from rangetable.errors import TableError

_HINT = re.compile(r"the leader is (\S+)")


def split_endpoints(spec: str) -> list[str]:
    """The endpoints of a comma-separated list (blanks and duplicates dropped, order kept)."""
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return out


def not_leader(me: str, leader: str | None) -> TableError:
    """The answer of a standby (or a deposed leader), naming the leader when known."""
    tail = f"; the leader is {leader}" if leader and leader != me else "; no leader is known yet"
    return TableError("NotLeader", f"coordinator {me} does not lead{tail}")


def leader_hint(exc: TableError) -> str | None:
    """The leader's endpoint named by a ``NotLeader`` answer, if any."""
    if exc.error_code != "NotLeader":
        return None
    m = _HINT.search(exc.message)
    return m.group(1) if m else None


class LeaderTracker:
    """Which coordinator endpoint to talk to now."""

    def __init__(self, endpoints: list[str] | str) -> None:
        self.endpoints = split_endpoints(endpoints) if isinstance(endpoints, str) else list(endpoints)
        if not self.endpoints:
            raise ValueError("no coordinator endpoint given")
        self.current = self.endpoints[0]

    @property
    def several(self) -> bool:
        """True when there is more than one coordinator to choose from."""
        return len(self.endpoints) > 1

    def on_silence(self) -> str:
        """The current endpoint did not answer in time: move to the next one in the list."""
        if self.current in self.endpoints:
            i = self.endpoints.index(self.current)
            self.current = self.endpoints[(i + 1) % len(self.endpoints)]
        else:
            self.current = self.endpoints[0]
        return self.current

    def on_not_leader(self, exc: TableError) -> str:
        """A ``NotLeader`` answer: follow its hint, or move on when it has none."""
        hint = leader_hint(exc)
        if hint and hint != self.current:
            if hint not in self.endpoints:  # a leader we were not told about (a coordinator added later)
                self.endpoints.append(hint)
            self.current = hint
            return hint
        return self.on_silence()
