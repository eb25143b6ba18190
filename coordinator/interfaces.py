"""The narrow views of the coordinator that its parts take, as ``typing.Protocol``\\ s.

:class:`coordinator.server.Coordinator` is the one concrete class and satisfies every protocol here
structurally; ``server.py`` composes the parts and is the only module that imports it. Each part
names only what it uses, so no part imports ``server`` and ``coordinator/`` has no import cycle:

=========================  ===========================================================
protocol                   taken by
=========================  ===========================================================
:class:`MetaAccess`        :mod:`coordinator.acl`
:class:`KeyRegistry`       :mod:`coordinator.client_keys`
:class:`MapWriter`         :mod:`coordinator.operations`, :mod:`coordinator.backup`
:class:`CommandSource`     :class:`coordinator.controller.Controller`
:class:`SnapshotSource`    :class:`coordinator.map_snapshots.MapSnapshots`
:class:`MetricsSource`     :mod:`coordinator.metrics`
:class:`LeaseHolder`       :mod:`coordinator.leases`
:class:`BalancerHost`      :class:`coordinator.balancer_loop.BalancerLoop`
:class:`AdminHost`         :mod:`coordinator.admin_dispatch`
:class:`TakeoverHost`      :mod:`coordinator.takeover`
=========================  ===========================================================

The controller, the balancer loop and the map snapshots are seen through :class:`Commands`,
:class:`LoadSink` and :class:`MapAnswers`; :data:`~rangetable.messages.ControlCommand` is what the controller
sends it. Nothing here runs: the module holds types only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rangetable.messages import ControlCommand

if TYPE_CHECKING:
    import queue

    import zmq

    from coordinator.leadership.etcd_election import EtcdLeadership
    from coordinator.leadership.lock_election import Leadership
    from coordinator.map.deltas import DeltaLog, PendingChanges
    from coordinator.map.partition_map import PartitionMap
    from coordinator.map.server_info import ServerInfo
    from coordinator.map.table_settings import TableSettings
    from coordinator.standby.etcd_follower import EtcdFollower
    from coordinator.standby.warm import WarmFollower
    from rangetable.config import CoordinatorConfig
    from rangetable.curve import KeyRing
    from rangetable.errors import TableError
    from rangetable.kernel.gc_tuning import GcPauses

JobReply = Callable[[Any, "TableError | None"], None]  # how a controller job's result is answered


# --- the parts seen from outside ------------------------------------------------------------------


class MetaStoreLike(Protocol):
    """The meta store (RocksDB: :mod:`coordinator.meta.store`, or etcd: :mod:`coordinator.meta.etcd_store`)."""

    name: str

    def items(self, prefix: bytes = b"") -> list[tuple[bytes, Any]]:
        """Every record whose key starts with ``prefix``, in key order."""
        ...

    def commit(self, puts: dict[bytes, Any], deletes: Sequence[bytes] = ...) -> None:
        """Write ``puts`` and delete ``deletes`` in one durable write."""
        ...

    def checkpoint(self, path: str) -> dict[str, Any]:
        """A consistent copy of the store in ``path``."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...


class Commands(Protocol):
    """The controller thread as its callers see it: queue jobs, send commands to servers."""

    jobs: queue.Queue

    def submit(self, fn: Callable[..., Any], *args: Any, reply: JobReply | None = None,
               key: str | None = None) -> bool:
        """Queue a job (with ``key``, at most one such job waits at a time)."""
        ...

    def call(self, server: str, body: ControlCommand, timeout: float | None = None) -> Any:
        """Send one command to a partition server and wait for its answer."""
        ...

    def call_many(self, calls: list[tuple[str, ControlCommand]], timeout: float | None = None) -> list[Any]:
        """Send commands to partition servers at once; one result or TableError per call."""
        ...

    def start(self) -> None:
        """Start the thread (when this coordinator leads)."""
        ...


class LoadSink(Protocol):
    """The balancer loop as the coordinator's loop thread sees it."""

    def on_heartbeat(self, server: str, load: dict, now: float) -> None:
        """Record a server's load reports."""
        ...

    def on_server_dead(self, server: str) -> None:
        """Forget a dead server's load."""
        ...

    def control(self, req: dict) -> dict[str, Any]:
        """The ``balancer`` admin op."""
        ...


class MapAnswers(Protocol):
    """The packed whole-map answers for frontends."""

    def answer(self, ident: bytes, rid: bytes) -> bytes | None:
        """The packed answer now, or None when it is sent later."""
        ...


# --- views of the coordinator ---------------------------------------------------------------------


class MetaAccess(Protocol):
    """The map and the meta store, under the coordinator's lock."""

    lock: threading.RLock
    pmap: PartitionMap
    meta: MetaStoreLike | None  # None until this coordinator wins a term (a standby has none)

    def meta_store(self) -> MetaStoreLike:
        """The meta store of the term this coordinator leads; raises RuntimeError on a standby."""
        ...


class EventRecorder(Protocol):
    """Durable coordinator events."""

    def event(self, kind: str, **fields: Any) -> None:
        """Record one event."""
        ...

    def record_events(self, items: list[dict]) -> None:
        """Record several events in one durable write."""
        ...


class ServerLookup(Protocol):
    """One registered partition server's state, by id."""

    def is_alive(self, server: str | None) -> bool:
        """True for a registered server not declared dead."""
        ...

    def server_endpoint(self, server: str) -> str | None:
        """The data endpoint of a registered server."""
        ...

    def server_incarnation(self, server: str) -> str | None:
        """The incarnation id a server registered with."""
        ...


class ServerDirectory(ServerLookup, Protocol):
    """The registered partition servers."""

    servers: dict[str, ServerInfo]

    def pick_server(self) -> str | None:
        """The live server with the fewest ranges."""
        ...

    def live_servers(self) -> list[str]:
        """Ids of the live servers."""
        ...


class Notifier(Protocol):
    """The inproc socket into the coordinator's loop (replies, ``publish``, ``hugz``, ``led``)."""

    def notify(self, frames: list[bytes]) -> None:
        """Hand frames to the loop thread."""
        ...


class MapWriter(MetaAccess, EventRecorder, ServerDirectory, Protocol):
    """What a multi-step change of the map uses (:mod:`coordinator.operations`, backups)."""

    cfg: CoordinatorConfig
    table_settings: TableSettings
    keys: KeyRing  # the coordinator's secret derives each replicated configuration's token

    def commit(self, writes: tuple[dict, list]) -> None:
        """Persist a map change, then have the loop publish it."""
        ...


class KeyRegistry(MetaAccess, EventRecorder, Notifier, Protocol):
    """What the client-key ops use."""

    keys: KeyRing
    keys_version: int


class Fenced(Protocol):
    """A leader that steps down as soon as a later term exists."""

    term: int

    def fence(self) -> None:
        """Step down at once when a later term exists."""
        ...


class CommandSource(ServerLookup, Fenced, Protocol):
    """What the controller needs to reach partition servers, fenced by the leader's term."""

    lock: threading.RLock
    ctx: zmq.Context
    keys: KeyRing
    cfg: CoordinatorConfig


class SnapshotSource(Notifier, Protocol):
    """What the map-snapshot thread reads."""

    lock: threading.RLock
    pmap: PartitionMap
    servers: dict[str, ServerInfo]
    pub_endpoint: str
    stopping: bool

    def map_key(self) -> tuple[int, int]:
        """What identifies the current map state."""
        ...


class MetricsSource(Protocol):
    """What ``/metrics`` reads."""

    lock: threading.RLock
    pmap: PartitionMap
    servers: dict[str, ServerInfo]
    event_counts: dict[str, int]
    term: int
    cfg: CoordinatorConfig


class LeaseHolder(MapWriter, Protocol):
    """What heartbeats and dead-server checks use (:mod:`coordinator.leases`)."""

    changes: PendingChanges
    registrations: dict[bytes, dict]
    @property
    def balancer_loop(self) -> LoadSink:
        """The balancer thread (fed every heartbeat's load)."""
        ...

    @property
    def controller(self) -> Commands:
        """The controller thread (runs multi-step changes)."""
        ...

    term: int


class BalancerHost(MapWriter, Protocol):
    """What the balancer loop uses (it runs operations with the same coordinator)."""

    stopping: bool
    quiet_until: float

    @property
    def controller(self) -> Commands:
        """The controller thread (runs the balancer's actions)."""
        ...


class AdminHost(LeaseHolder, KeyRegistry, Protocol):
    """What the request dispatch uses (it hands the coordinator on to the op it runs)."""

    deltas: DeltaLog
    published: int
    pub_endpoint: str
    gc: GcPauses
    events: list[dict]
    endpoint: str
    takeover: dict

    @property
    def map_snapshots(self) -> MapAnswers:
        """Packed whole-map answers."""
        ...

    def publish(self) -> None:
        """Send what changed since the last delta."""
        ...


class TakeoverHost(MapWriter, Notifier, Fenced, Protocol):
    """What taking over a term uses (:mod:`coordinator.takeover`)."""

    leadership: Leadership | EtcdLeadership | None
    follower: WarmFollower | EtcdFollower | None
    takeover: dict
    stopping: bool
    events: list[dict]
    event_seq: int
    keys_version: int
    published: int
    known_servers: dict[str, dict]
    quiet_until: float

    @property
    def controller(self) -> Commands:
        """The controller thread (started once the map is loaded)."""
        ...

    def election(self) -> Leadership | EtcdLeadership:
        """The election this coordinator takes part in; raises RuntimeError before it serves."""
        ...

    def step_down(self) -> None:
        """Stop leading without acting."""
        ...

    def start_balancer(self) -> None:
        """Start the balancer loop on the loaded map."""
        ...
