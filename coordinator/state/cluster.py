"""What a multi-step change of the cluster works with: :class:`Cluster`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator.state.events import EventLog
    from coordinator.state.maps import MapService
    from coordinator.state.registry import ServerRegistry
    from rangetable.config import CoordinatorConfig
    from rangetable.curve import KeyRing


@dataclass(frozen=True)
class Cluster:
    """The coordinator's state objects with its configuration and keys: the map (committed and published
    through it), the registered servers, the event log. The operations, replica jobs, backups, the balancer
    loop and the request dispatch take this; none of them knows the coordinator process."""

    cfg: CoordinatorConfig
    keys: KeyRing  # the coordinator's secret derives each replicated configuration's token
    map: MapService
    registry: ServerRegistry
    events: EventLog
