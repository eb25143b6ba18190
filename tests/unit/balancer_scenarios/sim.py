"""A tiny simulated cluster for multi-round balancer scenarios: heartbeats, rounds, instant actions.

A workload is a function ``t -> {PartitionKey: requests/s}``. Every ``hb_s`` each live server
reports each range it owns (the load of the workload's keys inside it, a 64-key sample drawn in
proportion, its data size); every ``settings.interval_s`` the balancer runs and its actions are
applied at once (a split without a key cuts at the data median of ``data_keys``).
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.balancer.load_history import LoadHistory
from coordinator.balancer.policy import plan_actions
from coordinator.balancer.rounds import Action
from coordinator.balancer.settings import Settings
from tests.unit.balancer_scenarios import R

Workload = Callable[[float], dict[str, float]]


def inside(key: str, r: dict) -> bool:
    """True when ``key`` falls in the range's [low, high)."""
    return key >= r["low"] and (r["high"] is None or key < r["high"])


def proportional_sample(load: dict[str, float], n: int = 64) -> list[str]:
    """About ``n`` keys, each repeated in proportion to its load (deterministic)."""
    total = sum(load.values())
    if total <= 0:
        return []
    return [k for k, w in sorted(load.items()) for _ in range(max(1, round(n * w / total)) if w > 0 else 0)][:n]


class Sim:
    """One table on ``servers``, all of it first in one range on the first server."""

    def __init__(self, servers: list[str], workload: Workload, settings: Settings | None = None,
                 data_keys: list[str] | None = None, hb_s: float = 0.5, bytes_per_key: int = 1024) -> None:
        self.servers = servers
        self.workload = workload
        self.settings = settings or Settings()
        self.data_keys = sorted(data_keys or [])
        self.hb_s = hb_s
        self.bytes_per_key = bytes_per_key
        self.ranges: list[dict] = [R("r0001", "", None, servers[0])]
        self.next_id = 2
        self.history = LoadHistory()
        self.recent: dict[str, dict[str, float]] = {}
        self.log: list[tuple[float, Action]] = []

    def run(self, until: float) -> list[tuple[float, Action]]:
        """Advance to ``until`` seconds; returns every action taken, with its time."""
        steps = int(round(until / self.hb_s))
        every = max(1, int(round(self.settings.interval_s / self.hb_s)))
        for i in range(1, steps + 1):
            t = i * self.hb_s
            self.heartbeats(t)
            if i % every == 0:
                for a in plan_actions(self.ranges, self.servers, self.history, self.settings, t, self.recent, 0):
                    self.apply(t, a)
        return self.log

    def heartbeats(self, t: float) -> None:
        """Every server reports its ranges."""
        load = self.workload(t)
        for s in self.servers:
            report = {}
            for r in (r for r in self.ranges if r["primary"] == s):
                mine = {k: w for k, w in load.items() if inside(k, r)}
                size = sum(inside(k, r) for k in self.data_keys) * self.bytes_per_key
                report[r["id"]] = {"reads_s": sum(mine.values()), "bytes": size, "sample": proportional_sample(mine)}
            self.history.add(t, s, report)

    def new_id(self) -> str:
        """A fresh range id."""
        rid = f"r{self.next_id:04d}"
        self.next_id += 1
        return rid

    def apply(self, t: float, a: Action) -> None:
        """Carry out one action at once and record it in ``recent``."""
        r = next(r for r in self.ranges if r["id"] == a.range)
        self.log.append((t, a))
        if a.kind == "split":
            key = a.key
            if key is None:
                ks = [k for k in self.data_keys if inside(k, r) and k > r["low"]]
                if not ks:
                    return
                key = ks[len(ks) // 2]
            left, right = R(self.new_id(), r["low"], key, r["primary"]), R(self.new_id(), key, r["high"], r["primary"])
            self.ranges[self.ranges.index(r):self.ranges.index(r) + 1] = [left, right]
            for half in (left, right):
                self.recent.setdefault("split", {})[half["id"]] = t
        elif a.kind == "move":
            r["primary"] = a.target
            self.recent.setdefault("move", {})[r["id"]] = t
        elif a.kind == "merge":
            b = next(x for x in self.ranges if x["id"] == a.detail["right"])
            merged = R(self.new_id(), r["low"], b["high"], a.target)
            i = self.ranges.index(r)
            self.ranges[i:i + 2] = [merged]
            self.recent.setdefault("merge", {})[merged["id"]] = t
        else:
            self.recent.setdefault(a.kind, {})[r["id"]] = t

    def kinds(self) -> list[str]:
        """The kinds of the actions taken so far, in order."""
        return [a.kind for _, a in self.log]

    def server_loads(self, t: float) -> dict[str, float]:
        """Requests/s each server carries under the workload at ``t`` (per the current map)."""
        load = self.workload(t)
        return {s: sum(w for k, w in load.items() for r in self.ranges if r["primary"] == s and inside(k, r))
                for s in self.servers}
