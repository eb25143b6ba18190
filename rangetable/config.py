"""One config object per process.

Every field has a default here, a CLI flag (``--field-name``, wired by ``cli/``) and an environment
variable ``RANGETABLE_FIELD_NAME``. Precedence: flag, then environment, then default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from rangetable.data_dir import FALLBACK_DATA_DIR

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")  # a config class (a dataclass)


@dataclass
class CoordinatorConfig:
    """Settings of the coordinator (partition manager)."""

    data_dir: str = FALLBACK_DATA_DIR
    bind: str = "tcp://127.0.0.1:10010"  # ROUTER: heartbeats, admin, map snapshots
    pub_bind: str = "tcp://127.0.0.1:10011"  # PUB: partition-map updates (Clone pattern)
    advertise: str = ""  # the ROUTER's address for other hosts (tcp://HOST[:PORT]); empty = --bind
    pub_advertise: str = ""  # the PUB's address published in the map for frontends; empty = --pub-bind
    lease_s: float = 2.0  # a partition server's lease, renewed by every heartbeat answer
    lease_grace_s: float = 0.5  # extra wait past a lapsed lease before reassigning its ranges
    command_timeout_s: float = 10.0  # how long a load/unload/split/merge command may take
    leader_timeout_s: float = 0.8  # a standby takes over when the leader's beat is this stale (it paused)
    restart_on_deposed: bool = True  # a deposed leader re-runs itself as a standby (off: it just stops)
    meta: str = ""  # etcd://HOST:PORT[,HOST:PORT...][/prefix]: election and meta store in etcd; empty = the data root (lock files)
    cold_takeover: bool = False  # a standby keeps no warm copy of the meta store: a new leader loads cold (to measure)
    metrics: str = ""  # HOST:PORT of the Prometheus /metrics endpoint; empty = none
    keys_dir: str = ""  # CURVE keys (rangetable/curve.py); empty = <data-dir>/keys
    # After a start, servers known from before get this much longer to check in before they are
    # declared dead (HBase's master likewise waits for region servers at start-up): 1,000 servers
    # re-registering at once on a busy host may take longer than one lease.
    startup_grace_s: float = 0.0
    replicas: int = 1  # copies of each range on distinct servers (1: one copy, under the shared data root)
    min_insync: int = 2  # a replicated range refuses writes with fewer in-sync replicas (Kafka's min.insync.replicas)
    rereplicate_after_s: float = 10.0  # a replica on a server dead this long is rebuilt on another server
    source: str = ""  # the connection file of the cluster this one follows (a secondary cluster); empty = none
    geo_lag_alarm_s: float = 60.0  # a secondary cluster: a table further behind its source than this raises an alarm


@dataclass
class PartitionServerConfig:
    """Settings of a partition server."""

    data_dir: str = FALLBACK_DATA_DIR
    coordinator: str = "tcp://127.0.0.1:10010"  # every coordinator's endpoint, comma-separated
    bind: str = "tcp://127.0.0.1:0"  # 0 = any free port; the server reports its endpoint
    advertise: str = ""  # the address other hosts reach it at (tcp://HOST[:PORT]); empty = --bind
    server_id: str = ""  # stable name; empty = derived from the host name and port
    heartbeat_s: float = 0.5
    sync: bool = False  # fsync every write before acknowledging it (survives machine loss)
    scan_budget_ms: int = 200  # a scan page stops after this long and returns a resume key
    partition_target: float = 0.0  # entities/s per PartitionKey before ServerBusy (Azure: 2000); 0 = off
    request_window_s: float = 600.0  # a retried write is answered from its record for this long …
    request_window_max: int = 100_000  # … while its range holds at most this many records …
    request_window_mb: int = 64  # … of at most this many MiB together (oldest purged first)
    block_cache_mb: int = 128  # one RocksDB block cache shared by every range of the process
    memtable_budget_mb: int = 256  # memtables of every range of the process together (a write-buffer manager)
    ring_budget_mb: int = 16  # replica-log rings of every replicated range of the process together
    metrics: str = ""  # HOST:PORT of the Prometheus /metrics endpoint; empty = none
    keys_dir: str = ""  # CURVE keys (rangetable/curve.py); empty = <data-dir>/keys
    alive_file: str = ""  # touched on every lease renewal, for a liveness probe (rangetable/kernel/watchdog.py)
    replication: str = ""  # bind address of the replication endpoint (a cluster with --replicas > 1); empty = none
    advertise_replication: str = ""  # the address other servers reach that endpoint at; empty = as bound
    replica_lag_s: float = 1.0  # an in-sync follower this far behind is reported, and dropped by the coordinator
    rebuild_mb_s: float = 100.0  # a lost replica rebuilt here pulls its primary's checkpoint at most this fast (0: no limit)
    zone: str = ""  # a failure-domain label (rack, zone): replicas of a range go to distinct zones


@dataclass
class FrontendConfig:
    """Settings of a frontend."""

    coordinator: str = "tcp://127.0.0.1:10010"  # every coordinator's endpoint, comma-separated
    native: str = "tcp://127.0.0.1:10012"  # ROUTER for native clients
    frontend_id: str = ""
    deadline_s: float = 10.0  # internal retries across moves stop here; the client then gets ServerBusy
    attempt_timeout_s: float = 2.0  # one try at a partition server; then the map is refreshed and it retries
    page_budget_ms: int = 1000  # a query page stops early after this long, with a continuation
    http: str = "127.0.0.1:10002"  # HOST:PORT of the Azure Table REST listener (`rangetable http-frontend`)
    accounts: str = ""  # NAME:KEY[,NAME:KEY...]; empty = devstoreaccount1 with its well-known key
    http_server: str = "builtin"  # builtin (frontend/http/listener.py), granian or uvicorn (ASGI)
    reuse_port: bool = False  # SO_REUSEPORT: several HTTP frontends share one port, the kernel spreads connections
    metrics: str = ""  # HOST:PORT of the Prometheus /metrics endpoint; empty = none
    cert: str = ""  # PEM certificate: the REST endpoint speaks HTTPS (with --key; Azurite's flag names)
    key: str = ""  # PEM private key of --cert
    oauth: str = ""  # "basic": accept well-formed bearer tokens for the storage audience (HTTPS only; Azurite's flag)
    keys_dir: str = FALLBACK_DATA_DIR + "/keys"  # CURVE keys (rangetable/curve.py): this role's pair, the others' public keys
    source: str = ""  # the connection file of the cluster this one follows (a secondary: reads only); empty = none


@dataclass
class DashboardConfig:
    """Settings of the web dashboard (``rangetable dashboard``)."""

    data_dir: str = FALLBACK_DATA_DIR  # where cluster.json names the coordinator, when --coordinator is empty
    coordinator: str = ""  # empty = the coordinator of cluster.json in --data-dir
    dashboard: str = "127.0.0.1:10081"  # HOST:PORT of the page (0 = any free port; browsers refuse 10080)
    interval_s: float = 1.0  # how often it polls the coordinator's status, events and load reports
    history_s: float = 3600.0  # how much heatmap history it keeps (history_s / interval_s columns)
    lease_s: float = 2.0  # the cluster's lease, to show which servers hold one
    keys_dir: str = ""  # CURVE keys (it asks the coordinator with the admin key); empty = <data-dir>/keys
    metrics: str = ""  # HOST:PORT of the Prometheus /metrics endpoint; empty = none


def env_name(cls: type, name: str) -> str:
    """The environment variable for a config field."""
    return "RANGETABLE_" + name.upper()


def _convert(raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


def load(cls: type[T], **overrides: Any) -> T:
    """Build a config: explicit (non-None) overrides, then RANGETABLE_* variables, then defaults."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        default = f.default
        if overrides.get(f.name) is not None:
            values[f.name] = overrides[f.name]
            continue
        raw = os.environ.get(env_name(cls, f.name))
        if raw is not None:
            values[f.name] = _convert(raw, default)
    return cls(**values)


__all__ = ["CoordinatorConfig", "DashboardConfig", "PartitionServerConfig", "FrontendConfig", "load", "env_name", "field"]
