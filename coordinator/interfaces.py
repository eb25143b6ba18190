"""The coordinator process as the two parts that act for it see it, as ``typing.Protocol``\\ s.

:class:`coordinator.server.Coordinator` satisfies both structurally; ``server.py`` composes the parts and
is the only module that imports it, so neither part imports ``server`` and ``coordinator/`` has no import
cycle. Every other part takes the objects it uses (:mod:`coordinator.state`, the controller, the balancer
loop, the map snapshots), not the process.

=========================  ===========================================================
protocol                   taken by
=========================  ===========================================================
:class:`TakeoverHost`      :mod:`coordinator.takeover`
:class:`AdminHost`         :mod:`coordinator.admin_dispatch`
=========================  ===========================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coordinator.answerer import Answerer
    from coordinator.backup import BackupSessions
    from coordinator.control.balancer_loop import BalancerLoop
    from coordinator.control.controller import Controller
    from coordinator.leadership.etcd_election import EtcdLeadership
    from coordinator.leadership.lock_election import Leadership
    from coordinator.map_snapshots import MapSnapshots
    from coordinator.standby.etcd_follower import EtcdFollower
    from coordinator.standby.warm import WarmFollower
    from coordinator.state.cluster import Cluster
    from rangetable.config import CoordinatorConfig
    from rangetable.kernel.gc_tuning import GcPauses


class Process(Protocol):
    """What both parts read of the process: the state objects, the term it leads, the loop's inbox."""

    cfg: CoordinatorConfig
    cluster: Cluster
    term: int  # the term this coordinator leads (0: a standby)
    takeover: dict  # how the last takeover went (status, logs)

    def notify(self, frames: list[bytes]) -> None:
        """Hand frames to the loop thread (replies, ``publish``, ``hugz``, ``led``)."""
        ...


class TakeoverHost(Process, Protocol):
    """What taking over a term uses (:mod:`coordinator.takeover`): the election, the standby's warm copy,
    and the steps that make this process the leader."""

    follower: WarmFollower | EtcdFollower | None
    stopping: bool
    keys_version: int  # the client keys' version (sent on every hugz), loaded with the meta store

    def election(self) -> Leadership | EtcdLeadership:
        """The election this coordinator takes part in; raises RuntimeError before it serves."""
        ...

    def fence(self) -> None:
        """Step down at once when a later term exists."""
        ...

    def step_down(self) -> None:
        """Stop leading without acting."""
        ...

    def lead(self, quiet_until: float) -> None:
        """Start the balancer loop (no round before ``quiet_until``) and the controller."""
        ...


class AdminHost(Process, Protocol):
    """What the request dispatch uses (:mod:`coordinator.admin_dispatch`): the threads it hands work to,
    and what ``status`` reports of the process."""

    endpoint: str
    pub_endpoint: str
    gc: GcPauses

    @property
    def controller(self) -> Controller:
        """The controller thread (runs multi-step changes)."""
        ...

    @property
    def balancer_loop(self) -> BalancerLoop:
        """The balancer loop (fed every heartbeat's load; the ``balancer`` op)."""
        ...

    @property
    def map_snapshots(self) -> MapSnapshots:
        """Packed whole-map answers."""
        ...

    @property
    def answerer(self) -> Answerer:
        """The thread that answers requests needing the map's lock (never the loop)."""
        ...

    @property
    def backups(self) -> BackupSessions:
        """The backups under way."""
        ...

    def publish(self) -> None:
        """Send what changed since the last delta."""
        ...

    def keys_changed(self, version: int) -> None:
        """The client keys changed: send their version on a ``hugz`` now."""
        ...
