"""What one balancer round works on: the actions it returns and its view of each range.

Pure data shared by the rules (:mod:`coordinator.balancer.splits`, :mod:`coordinator.balancer.moves`,
:mod:`coordinator.balancer.merges`); :func:`coordinator.balancer.policy.plan_actions` builds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from coordinator.balancer.load_history import LoadHistory
from coordinator.balancer.settings import Settings


@dataclass(frozen=True)
class Action:
    """One thing to do: split (at ``key``; None = data median), move (to ``target``), merge (with
    ``detail["right"]``, dropping boundary ``key``, onto ``target``), or a warning event
    (``hot_key`` / ``append_hotspot``, ``key`` = the hot key)."""

    kind: str
    range: str
    key: str | None = None
    target: str | None = None
    reason: str = ""
    detail: dict = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for events and the CLI."""
        return asdict(self)


@dataclass
class RangeView:
    """What the policy knows about one range this round."""

    rec: Mapping[str, Any]
    score: float  # current load (0 when unknown or stale)
    bytes: int
    fresh: bool  # has a report within the stale bound
    eligible: bool  # serving, on a live server
    hot_now: bool = True  # its latest report is above hot_rps (else no load rule can apply)

    @property
    def id(self) -> str:
        """The range id."""
        return self.rec["id"]

    @property
    def order(self) -> tuple[str, str, str]:
        """Table (case-insensitive), low key, id: the order rules walk ranges in."""
        return (self.rec["table"].lower(), self.rec["low"], self.rec["id"])


Recent = Mapping[str, Mapping[str, float]]


@dataclass
class Round:
    """The inputs of one round, shared by the rules."""

    history: LoadHistory
    st: Settings
    now: float
    recent: Recent
    stale_s: float
    acted: set[str] = field(default_factory=set)

    def recently(self, kind: str, rid: str, span: float) -> bool:
        """True when ``recent[kind][rid]`` is less than ``span`` seconds ago."""
        t = self.recent.get(kind, {}).get(rid)
        return t is not None and self.now - t < span
