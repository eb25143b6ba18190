"""The balancer's process side: feeds load reports to the pure policy and carries out its actions.

:class:`BalancerLoop` collects every heartbeat's load report into a
:class:`~coordinator.balancer.load_history.LoadHistory`, runs :func:`~coordinator.balancer.policy.plan_actions`
every ``interval_s``, and hands splits, moves and merges to the controller (one job per range at a
time); hot-key and append-hotspot warnings become events. In dry-run mode every action is only an
event. Settings are persisted in the meta store and changed at run time with the ``balancer`` admin
op (``rangetable balancer …``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from coordinator.balancer.load_history import LoadHistory
from coordinator.balancer.policy import plan_actions
from coordinator.balancer.rounds import Action
from coordinator.balancer.settings import Settings
from coordinator.control import operations as ops
from coordinator.control import replica_move
from rangetable.errors import TableError

if TYPE_CHECKING:
    from coordinator.control.controller import Controller
    from coordinator.state.cluster import Cluster

log = logging.getLogger("rangetable.coordinator")
SETTINGS_KEY = b"balancer/settings"
FAILED_BACKOFF_S = 30.0
ROUND_SHARE = 10  # the pause between rounds is at least this many times the last round's duration


class BalancerLoop:
    """Load history, settings and the action loop of the balancer.

    It reads the map and the live servers of ``cl`` and hands its actions to ``controller``; its settings
    are those stored in the meta store open when it is made (the defaults on a standby, which has none).
    """

    def __init__(self, cl: Cluster, controller: Controller) -> None:
        self.cl = cl
        self.controller = controller
        self.settings = Settings()
        meta = cl.map.meta
        for k, v in meta.items(SETTINGS_KEY) if meta is not None else []:
            if k == SETTINGS_KEY:
                for name, value in v.items():
                    try:
                        self.settings.set(name, str(value))
                    except ValueError:
                        log.warning("ignoring stored balancer setting %s=%r", name, value)
        self.history = LoadHistory(window_s=max(180.0, 2 * self.settings.merge_cooldown_s))
        self.recent: dict[str, dict[str, float]] = {}
        self.in_flight = 0
        self.replica_jobs = 0  # replica moves queued, not yet recorded in the map
        self.busy: set[str] = set()  # ranges with a balancer job queued or running
        self.backoff: dict[str, float] = {}  # range -> monotonic time before which it is left alone
        self.last_run = 0.0
        self.last_actions: list[dict] = []
        self.round_ms = 0.0  # how long the last round took (plan_actions over the whole map)
        self.quiet_until = 0.0  # no round before (a new leader moves nothing before old leases surely lapsed)
        self.stopping = False
        self._thread: threading.Thread | None = None

    def start(self, quiet_until: float) -> None:
        """Run rounds in a thread of their own, so a round over 100,000 ranges (about 0.3 s) never
        holds up heartbeat answers in the coordinator's loop; none before ``quiet_until`` (monotonic)."""
        self.quiet_until = quiet_until
        self._thread = threading.Thread(target=self._run, name="balancer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.stopping:
            try:
                now = time.monotonic()
                if now >= self.quiet_until:  # a new leader moves nothing before old leases lapsed
                    self.tick(now)
            except Exception:
                log.exception("balancer round failed")
            time.sleep(0.1)

    def stop(self) -> None:
        """End the rounds (the thread ends within a tenth of a second, or at the end of a round)."""
        self.stopping = True

    def join(self, timeout: float) -> None:
        """Wait for the thread to end (after :meth:`stop`)."""
        if self._thread is not None:
            self._thread.join(timeout)

    # --- inputs -------------------------------------------------------------------------------

    def on_heartbeat(self, server: str, load: dict, now: float) -> None:
        """Record a server's per-range load reports (only the changed ones), and that the latest
        reports of its other open ranges still hold."""
        if load:
            self.history.add(now, server, load)
        self.history.confirm(now, server)

    def on_server_dead(self, server: str) -> None:
        """Forget a dead server's load."""
        self.history.forget_server(server)

    # --- the loop -----------------------------------------------------------------------------

    def tick(self, now: float) -> list[Action]:
        """Run one round when due; returns the actions it started (or logged, in dry-run mode)."""
        s = self.settings
        # A round walks the whole map (about 0.3 s for 100,000 ranges): at most 10% of the time
        # goes to rounds, so with a large map they come less often than interval_s (HBase's
        # balancer runs every 5 minutes; PD's schedulers sample regions instead of walking them all).
        if not s.enabled or now - self.last_run < max(s.interval_s, ROUND_SHARE * self.round_ms / 1000):
            return []
        self.last_run = now
        t0 = time.perf_counter()
        servers = self.cl.registry.servers
        with self.cl.map.lock:  # the records themselves are only read (operations re-check them under the lock)
            ranges = list(self.cl.map.pmap.ranges.values())
            live = [sid for sid, info in servers.items() if info.alive and info.endpoint]
            holders = [sid for sid, info in servers.items() if info.alive and info.endpoint and info.repl_endpoint]
            zones = {sid: info.zone for sid, info in servers.items() if info.zone}
        busy, backoff = self.busy, self.backoff
        ranges = [r for r in ranges if r["id"] not in busy and backoff.get(r["id"], 0) <= now]
        actions = plan_actions(ranges, live, self.history, s, now, self.recent, self.in_flight, zones, holders,
                               self.replica_jobs)
        self.round_ms = round((time.perf_counter() - t0) * 1000, 1)
        for a in actions:
            self._act(a, now)
        if actions:
            self.last_actions = [a.to_dict() for a in actions]
        return actions

    def _act(self, a: Action, now: float) -> None:
        events = self.cl.events
        if self.settings.dry_run:
            events.record("balancer_dry_run", action=a.kind, range=a.range, key=a.key, target=a.target, reason=a.reason)
            return
        if a.kind == "split" and a.key is None:
            last = self.history.latest(a.range)
            if last is not None and last.load.get("compacting"):
                return  # its size still counts the half a split dropped; wait for the compaction
        if a.kind in ("hot_key", "append_hotspot"):
            self.recent.setdefault(a.kind, {})[a.range] = now
            events.record(a.kind, range=a.range, key=a.key, reason=a.reason, **a.detail)
            return
        ids = [a.range] + ([a.detail["right"]] if a.kind == "merge" else [])
        self.busy.update(ids)
        moving = a.kind == "move" or (a.kind == "merge" and a.detail.get("needs_move"))
        if moving:
            self.in_flight += 1
        if a.kind == "replica_move":
            self.replica_jobs += 1
        self.controller.submit(self._job, a, ids, moving)

    def _job(self, a: Action, ids: list[str], moving: bool) -> None:
        cl, ctl = self.cl, self.controller
        reason = f"balancer: {a.reason}"
        try:
            if a.kind == "split":
                res = ops.split(cl, ctl, a.range, a.key, reason=reason)
                t = time.monotonic()
                for half in (res["left"], res["right"]):
                    self.recent.setdefault("split", {})[half] = t
            elif a.kind == "move":
                if a.target is None:  # the move rule always names one (balancer_moves.py)
                    raise TableError("InvalidInput", f"a move of {a.range} names no target server")
                ops.move(cl, ctl, a.range, a.target, reason=reason)
                self.recent.setdefault("move", {})[a.range] = time.monotonic()
            elif a.kind == "merge":
                res = ops.merge(cl, ctl, a.range, reason=reason, target=a.target)
                self.recent.setdefault("merge", {})[res["range"]] = time.monotonic()
            elif a.kind == "replica_move":  # rule 7: add a replica on the target, drop the source's once in sync
                if a.target is None:
                    raise TableError("InvalidInput", f"a replica move of {a.range} names no target server")
                self.recent.setdefault("replica_move", {})[a.range] = time.monotonic()
                replica_move.start(cl, ctl, a.range, a.detail["source"], a.target,
                                   self.settings.replica_move_timeout_s, reason=reason)
        except TableError as exc:
            log.warning("balancer %s of %s failed: %s", a.kind, a.range, exc)
            for rid in ids:
                self.backoff[rid] = time.monotonic() + FAILED_BACKOFF_S
        finally:
            self.busy.difference_update(ids)
            if moving:
                self.in_flight -= 1
            if a.kind == "replica_move":
                self.replica_jobs -= 1

    # --- control ------------------------------------------------------------------------------

    def control(self, req: dict) -> dict[str, Any]:
        """The ``balancer`` admin op: status, on, off, dry-run, set KEY VALUE."""
        action = req.get("action", "status")
        s = self.settings
        if action == "on":
            s.enabled, s.dry_run = True, False
        elif action == "off":
            s.enabled = False
        elif action == "dry-run":
            s.enabled, s.dry_run = True, True
        elif action == "set":
            try:
                s.set(str(req.get("key")), str(req.get("value")))
            except ValueError as exc:
                raise TableError("InvalidInput", str(exc)) from None
        elif action != "status":
            raise TableError("InvalidInput", f"unknown balancer action {action!r}")
        if action != "status":
            self.cl.map.meta_store().commit({SETTINGS_KEY: s.to_dict()})
        return {"settings": s.to_dict(), "in_flight": self.in_flight, "busy_ranges": sorted(self.busy),
                "round_ms": self.round_ms,
                "last_actions": self.last_actions}
