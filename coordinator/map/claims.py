"""Claims: who does a job that one process at a time may do, on the coordinator. Pure data, no sockets.

A claim is a lease of ``ttl_s`` seconds granted to one holder at a time, renewed by that holder in memory, with a
claim number that grows with every new grant and is persisted (``<prefix><table lower>/<name lower>`` →
``{"claim", "holder", "ttl_s"}``) before the grant is answered, so it is a fencing token across leader changes:
whatever the holder writes carries the number, and a store that saw a higher one refuses it. Two kinds:

* an index's applier (``indexclaim/<table>/<index>``: :mod:`frontend.indexes.applier`). A claim record outlives
  its index (one small key per index name ever declared), so a re-declared index keeps counting up from the old
  numbers;
* a secondary cluster's applier of one table (``sourceclaim/<table>/``, the name empty:
  :mod:`frontend.geo.applier`, ``docs/geo.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rangetable.errors import TableError

CLAIM_PREFIX = b"indexclaim/"  # an index's applier
SOURCE_CLAIM_PREFIX = b"sourceclaim/"  # a secondary table's applier
MAX_CLAIM_TTL_S = 300.0


def _pair(table: str, name: str) -> str:
    return f"{table.lower()}/{name.lower()}"


def claim_key(table: str, name: str, prefix: bytes = CLAIM_PREFIX) -> bytes:
    """Meta-store key of a claim's last number and holder (case-insensitive)."""
    return prefix + _pair(table, name).encode()


@dataclass(slots=True)
class Claim:
    """A live grant: its fencing number, holder, and when its lease runs out (monotonic seconds)."""

    number: int
    holder: str
    until: float


class Claims:
    """Every claim of one kind on the leader: the persisted numbers and holders, and the live leases (memory)."""

    def __init__(self, prefix: bytes = CLAIM_PREFIX) -> None:
        self.prefix = prefix  # the meta-store keys of this kind's records
        self.persisted: dict[str, dict[str, Any]] = {}  # "table/name" lower -> {"claim", "holder", "ttl_s"}
        self.live: dict[str, Claim] = {}
        self.since = -math.inf  # when this leader took over: earlier grants may still be live until ttl after
        self.progress: dict[str, dict[str, Any]] = {}  # "table/name" lower -> what its holder last reported
        self.reported_at: dict[str, float] = {}  # "table/name" lower -> when (monotonic seconds)

    def load(self, items: list[tuple[bytes, Any]], now: float) -> None:
        """Install the claim records of the meta store at a takeover (``now``: its monotonic time)."""
        self.persisted = {k[len(self.prefix):].decode(): dict(v) for k, v in items if k.startswith(self.prefix)}
        self.live = {}
        self.since = now

    def forget(self, table: str, name: str) -> None:
        """The index is gone: its live lease with it (its number stays, so a new index counts on)."""
        self.live.pop(_pair(table, name), None)
        self.progress.pop(_pair(table, name), None)
        self.reported_at.pop(_pair(table, name), None)

    def end_all(self) -> None:
        """Every live lease ends now (the work they were for stopped: a secondary cluster became a primary); the
        numbers stay, so a later grant counts on above every earlier one."""
        self.live.clear()

    def report(self, table: str, name: str, holder: str, progress: Any, now: float) -> dict[str, Any] | None:
        """Keep what the claim's ``holder`` reports of its work at ``now`` (``{"phase", "built", "applied",
        "lag_s", ...}``: shown by ``index list``); None when it is not the holder or the report is not a map."""
        key = _pair(table, name)
        cur = self.live.get(key)
        if cur is None or cur.holder != holder or not isinstance(progress, dict):
            return None
        kept = {k: v for k, v in progress.items() if isinstance(k, str) and isinstance(v, int | float | str | None)}
        self.progress[key] = {**kept, "holder": holder}
        self.reported_at[key] = now
        return self.progress[key]

    def lag_of(self, table: str, name: str, now: float) -> float | None:
        """How far behind its table an index is, as back-pressure judges it at ``now``: its holder's last
        reported ``lag_s`` while the lease runs; once the lease ran out, that lag plus the time since the report
        (nobody applies the index: it falls behind by the clock). None before any report since this leader
        took over."""
        key = _pair(table, name)
        got, at = self.progress.get(key), self.reported_at.get(key)
        lag = None if got is None else got.get("lag_s")
        if at is None or isinstance(lag, bool) or not isinstance(lag, int | float):
            return None
        cur = self.live.get(key)
        return float(lag) if cur is not None and now < cur.until else float(lag) + now - at

    def lapsed(self, now: float) -> list[tuple[str, str]]:
        """The ("table", "name") pairs (lower case) whose holder reported and whose lease has run out."""
        out = []
        for key in self.reported_at:
            cur = self.live.get(key)
            if cur is None or now >= cur.until:
                table, _, name = key.partition("/")
                out.append((table, name))
        return out

    def progress_of(self, table: str, name: str, now: float) -> dict[str, Any]:
        """The last report of an index's holder (``{}``: none since this leader took over), its ``holder`` None
        once the lease ran out (nobody applies the index now), and then its ``lag_s`` as :meth:`lag_of` judges
        it (growing by the clock)."""
        key = _pair(table, name)
        got = self.progress.get(key)
        if got is None:
            return {}
        cur = self.live.get(key)
        if cur is not None and now < cur.until:
            return got
        lag = self.lag_of(table, name, now)
        return {**got, "holder": None, **({} if lag is None else {"lag_s": round(lag, 1)})}

    def holds(self, table: str, name: str, number: int, now: float) -> bool:
        """True when claim ``number`` is the live one at ``now`` (its lease runs)."""
        cur = self.live.get(_pair(table, name))
        return cur is not None and cur.number == number and now < cur.until

    def claim(self, table: str, name: str, holder: Any, ttl_s: Any, now: float,
              persist: Callable[[dict[bytes, Any]], None]) -> dict[str, Any]:
        """Grant, renew or refuse ``holder`` the claim of an index for ``ttl_s`` seconds at ``now``.

        Same holder: the lease is extended, the number kept. Nobody (or an expired lease): a new grant with
        the next number, handed to ``persist`` (the meta-store puts) before it is installed; but a leader
        that took over less than ``ttl_s`` (or the last grant's ttl) ago grants nothing to a holder other
        than the last persisted one. Refused: ``granted`` False, the current claim and holder, and in
        ``ttl_s`` how long until asking again may succeed."""
        if not isinstance(holder, str) or not holder:
            raise TableError("InvalidInput", "holder must be a non-empty string")
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not 0 < ttl_s <= MAX_CLAIM_TTL_S:
            raise TableError("InvalidInput", f"ttl_s must be a number of seconds in (0, {MAX_CLAIM_TTL_S:g}]")
        ttl = float(ttl_s)
        key = _pair(table, name)
        cur, last = self.live.get(key), self.persisted.get(key, {})
        if cur is not None and cur.holder == holder:
            cur.until = now + ttl
            return _answer(cur, True, ttl)
        if cur is not None and now < cur.until:
            return _answer(cur, False, cur.until - now)
        if cur is None and last.get("holder") is not None:  # granted by an earlier leader (or before a restart)
            if last["holder"] == holder:  # the same holder carries on with its number
                claim = self.live[key] = Claim(int(last["claim"]), holder, now + ttl)
                return _answer(claim, True, ttl)
            wait_until = self.since + max(ttl, float(last.get("ttl_s", 0.0)))
            if now < wait_until:
                return {"claim": int(last["claim"]), "holder": last["holder"], "granted": False,
                        "ttl_s": round(wait_until - now, 3)}
        number = int(last.get("claim", 0)) + 1
        record = {"claim": number, "holder": holder, "ttl_s": ttl}
        persist({claim_key(table, name, self.prefix): record})
        self.persisted[key] = record
        claim = self.live[key] = Claim(number, holder, now + ttl)
        return _answer(claim, True, ttl)


def _answer(claim: Claim, granted: bool, ttl_s: float) -> dict[str, Any]:
    return {"claim": claim.number, "holder": claim.holder, "granted": granted, "ttl_s": round(ttl_s, 3)}
