"""The shapes of the msgpack maps that cross a process boundary, as ``TypedDict`` s.

:mod:`rangetable.protocol` carries every one of them as ``[request_id, body]`` (``docs/protocol.md``
describes each op in prose); this module only names their fields and types, for type checkers and
readers. Nothing here runs on a request path: a ``TypedDict`` is a plain ``dict`` at run time. The one
function, :func:`is_replicated`, is the one fact both the coordinator and the partition servers read off a
:class:`RangeRecord`.

Each class says who sends it and who receives it. The hops:

* client → frontend (native endpoint): :data:`NativeRequest`, answered with a :data:`Reply`;
* frontend → partition server: :class:`RangeGetRequest`, :class:`RangeWriteRequest`,
  :class:`RangeBatchRequest`, :class:`ScanRequest`;
* coordinator → partition server: :data:`ControlCommand`;
* partition server → coordinator: :class:`Heartbeat`, answered with a :class:`LeaseAnswer`;
* coordinator → frontend: :class:`MapSnapshot` (``map``), :class:`MapDelta` and :class:`Hugz` (PUB).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

# --- values and replies ------------------------------------------------------------------------

TypedProps = dict[str, list[Any]]
"""An entity's properties: name → ``[type code, value]`` (codes in :mod:`rangetable.edm`)."""

WireEntity = list[Any]
"""An entity on the wire: ``[PartitionKey, RowKey, Timestamp ticks, TypedProps]``."""

WriteKind = Literal["insert", "replace", "merge", "delete", "insert_or_replace", "insert_or_merge"]


class WriteOp(TypedDict):
    """One write: sent by the client (and the frontend, unchanged) to the partition server that
    applies it, alone in a ``write`` or as an operation of a ``batch``."""

    op: WriteKind
    pk: str
    rk: str
    props: NotRequired[TypedProps]  # a delete may leave it out: the partition server reads none for one
    if_match: str | None  # None: unconditional; "*": the entity must exist; else its ETag
    # rangetable's extension (rangetable/write_conditions.py): checked with the write, atomically
    expect: NotRequired[str | None]  # "exists" | "absent" | "ignore"
    cond: NotRequired[str | None]  # a condition on the current entity, in the $filter language
    incr: NotRequired[TypedProps | None]  # counters: name -> [Int32/Int64/Double code, signed amount]


class WireError(TypedDict):
    """A failure, as every server sends it in an :class:`ErrorReply` and every asker raises it again
    as a :class:`rangetable.errors.TableError`."""

    code: str  # Azure's error code name (rangetable/errors.py)
    message: str
    index: NotRequired[int]  # the failing operation of a batch


class OkReply(TypedDict):
    """A success: sent by whichever process answers a request, received by the asker."""

    ok: Any


class ErrorReply(TypedDict):
    """A failure: sent by whichever process answers a request, received by the asker."""

    error: WireError


Reply = OkReply | ErrorReply

# --- client → frontend (native endpoint) -------------------------------------------------------


class HelloRequest(TypedDict):
    """Sent by the native client's transport before its first request; received by a frontend."""

    op: Literal["hello"]
    version: int


class HelloAnswer(TypedDict):
    """A frontend's answer to :class:`HelloRequest`, received by the client's transport."""

    version: int
    max_message: int
    frontend: str


class TableRequest(TypedDict):
    """``create_table`` / ``delete_table``: sent by the client, relayed by a frontend to the coordinator."""

    op: Literal["create_table", "delete_table", "get_table"]
    table: str
    settings: NotRequired[dict[str, Any]]  # create_table: {"ttl_s", "reads", "writes"} (rangetable.table_settings)
    rid: NotRequired[str]  # create_table: the request id, the same on every retry (a retry answers as the first did)


class SetTableRequest(TypedDict):
    """``set_table``: change a table's TTL / reserved throughput; sent by the client, relayed by a
    frontend to the coordinator, answered with the settings in force."""

    op: Literal["set_table"]
    table: str
    settings: dict[str, Any]  # the fields to change: "ttl_s", "reads", "writes"


class ListTablesRequest(TypedDict):
    """Sent by the client, relayed by a frontend to the coordinator; answered with :class:`ListTablesAnswer`."""

    op: Literal["list_tables"]
    filter: NotRequired[str]
    top: NotRequired[int]
    next: NotRequired[str]


class ListTablesAnswer(TypedDict):
    """The coordinator's page of table names, received by the client."""

    tables: list[str]
    next: str | None


class GetRequest(TypedDict):
    """One entity by key: sent by the client, received by a frontend (which routes it on)."""

    op: Literal["get"]
    table: str
    pk: str
    rk: str
    select: NotRequired[list[str]]


class WriteRequest(TypedDict):
    """One write: sent by the client, received by a frontend; ``rid`` makes a retry apply at most once."""

    op: Literal["write"]
    table: str
    write: WriteOp
    rid: NotRequired[str]


class BatchRequest(TypedDict):
    """An entity group transaction: sent by the client (and bulk imports), received by a frontend.
    ``echo: False`` asks for the shared Timestamp only, not the entities."""

    op: Literal["batch"]
    table: str
    ops: list[WriteOp]
    rid: NotRequired[str]
    echo: NotRequired[bool]


class QueryRequest(TypedDict):
    """A page of a query: sent by the client, received by a frontend; answered with :class:`QueryAnswer`."""

    op: Literal["query"]
    table: str
    filter: NotRequired[str | None]  # an absent optional field and None mean the same
    select: NotRequired[list[str] | None]
    top: NotRequired[int | None]
    next: NotRequired[list[str | None] | None]  # [PartitionKey, RowKey] of the first entity not yet returned
    staleness: NotRequired[float]  # seconds an answer through an index may lag (absent: read-your-writes)


class QueryAnswer(TypedDict):
    """A frontend's page of entities, received by the client; the query is done when ``next`` is None."""

    entities: list[WireEntity]
    next: list[str] | None
    plan: NotRequired[dict[str, Any]]  # through an index: which, its scans, the wait for it (frontend/indexes/query.py)


class MapRequest(TypedDict):
    """``map`` (the whole partition map) or ``map_version``: sent by the CLI or a bench to a frontend,
    or by a frontend to the coordinator (with ``since``: a :class:`MapDelta` when it can)."""

    op: Literal["map", "map_version"]
    since: NotRequired[int]


class MapVersionAnswer(TypedDict):
    """A frontend's answer to ``map_version``: how far its map is, without the map."""

    version: int
    ranges: int


class ChangesPageRequest(TypedDict):
    """A page of a table's change feed: after the position ``after`` (``[Timestamp, key or nil]``), else from
    ``start`` (``"beginning"`` or ``"now"``); sent by the client, received by a frontend
    (``frontend/changes.py``); answered with :class:`ChangesPage`."""

    op: Literal["changes"]
    table: str
    top: int
    start: NotRequired[str]
    after: NotRequired[list]
    need: NotRequired[int]  # the ``high`` of the reader's previous page: ranges below it close first
    lo: NotRequired[str]  # the PartitionKeys [lo, hi) only (a consumer group's span); hi nil: to the end
    hi: NotRequired[str | None]


class ChangesPage(TypedDict):
    """A frontend's page of a table's feed: records ``[ts, key, kind, value, before]`` in position order, the
    position after them, the table's resolved Timestamp when the page reached the live edge (else nil), and
    ``high``, the highest frontier a range answered (the next page's ``need``)."""

    records: list[list]
    cursor: list
    resolved: int | None
    high: int


NativeRequest = (
    HelloRequest | TableRequest | ListTablesRequest | GetRequest | WriteRequest | BatchRequest | QueryRequest
    | MapRequest | SetTableRequest | ChangesPageRequest
)
"""What a native client sends to a frontend."""

# --- frontend → partition server ---------------------------------------------------------------


class RangeGetRequest(TypedDict):
    """Sent by a frontend to the partition server that owns the key's range at ``epoch``."""

    op: Literal["get"]
    range: str
    epoch: int
    pk: str
    rk: str
    select: list[str] | None
    at: NotRequired[int]  # a secondary cluster's read: as of this cut (partition_server/store/cut.py)


class RangeWriteRequest(TypedDict):
    """Sent by a frontend to the primary of the key's range; answered with the entity written (or None)."""

    op: Literal["write"]
    range: str
    epoch: int
    write: WriteOp
    rid: NotRequired[str | None]


class RangeBatchRequest(TypedDict):
    """Sent by a frontend to the primary of the partition's range."""

    op: Literal["batch"]
    range: str
    epoch: int
    ops: list[WriteOp]
    rid: NotRequired[str | None]
    echo: NotRequired[bool]


class ScanRequest(TypedDict):
    """A page of a range's keys in ``[lo, hi)`` (and then in each of ``spans``, further spans of the
    range in key order): sent by a frontend to the range's primary."""

    op: Literal["scan"]
    range: str
    epoch: int
    lo: bytes
    hi: bytes | None
    spans: NotRequired[list[tuple[bytes, bytes | None]]]
    filter: str | None
    select: list[str] | None
    limit: int
    budget_ms: float
    feed: NotRequired[dict[str, Any]]  # a ChangesRequest's fields but op, range and epoch: answered beside
    at: NotRequired[int]  # a secondary cluster's read: as of this cut (partition_server/store/cut.py)


class ScanAnswer(TypedDict):
    """A partition server's page of a range, received by the frontend; ``next`` is the key to go on from;
    ``feed``: the answer to the request's ``feed``, when it had one."""

    entities: list[WireEntity]
    next: bytes | None
    feed: NotRequired[ChangesAnswer]


class ChangesRequest(TypedDict):
    """A page of a range's change feed: the records of entity keys in ``[lo, hi)`` after position ``after``
    (``[Timestamp, key or nil]``; nil: from the oldest kept), at or below ``upto`` (nil: the range's resolved
    Timestamp). ``close``: the range first moves its resolved Timestamp to now when it lags (``need``: the
    highest frontier the reader saw elsewhere; ``partition_server/store/feed.py: should_close``); ``cut``: a
    secondary cluster's table, read up to its cut, which is the frontier (``docs/geo.md``). Sent by a frontend to
    the range's primary (``partition_server/store/feed.py``)."""

    op: Literal["changes"]
    range: str
    epoch: int
    lo: bytes
    hi: bytes | None
    after: list | None
    upto: int | None
    limit: int
    close: bool
    need: NotRequired[int | None]
    cut: NotRequired[int | None]


class SourceApplyRequest(TypedDict):
    """A secondary cluster's applier writes its source's feed records into a range: ``records`` as a
    :class:`ChangesAnswer` holds them, in position order, all in the range; ``pos`` the position
    ``[Timestamp, key]`` through which the range then holds every change of its span (``b"\xff"`` as the key:
    all of that Timestamp); ``claim`` the applier's fencing token; ``trim`` a Timestamp below every cut a reader
    may still use (the undo records at or below it are deleted, reads below it refused: ``RangeStore.trim_undo``).
    Answered ``{"applied": n}`` (``RangeStore.apply_source``)."""

    op: Literal["source_apply"]
    range: str
    epoch: int
    records: list[list]
    pos: list
    claim: int
    trim: NotRequired[int]


class SourceCopyRequest(TypedDict):
    """A secondary cluster's first copy of a table: ``values`` ``[key, stored value]`` of entities the source's
    scan read, all in the range, put as they are (``RangeStore.copy_source``); ``claim`` the applier's fencing
    token; ``floor`` the Timestamp the copy starts the feed from (the range's feed floor is raised to it).
    Answered ``{"applied": n}``."""

    op: Literal["source_copy"]
    range: str
    epoch: int
    values: list[list]
    claim: int
    floor: NotRequired[int]


class ChangesAnswer(TypedDict):
    """A range's feed page: ``records`` ``[ts, key, kind, value, before]`` in position order (``value`` and
    ``before``: stored values ``msgpack([ts, props])`` or nil); every record of the span at or below
    ``frontier`` was in it or an earlier page; ``more``: records follow before the resolved Timestamp;
    ``floor``: at or below it records may be missing (retention)."""

    records: list[list]
    frontier: int
    more: bool
    floor: int
    last: int  # the range's last Timestamp (an index query's freshness check bounds its later rounds by it)


# --- coordinator → partition server (control) --------------------------------------------------


class RangeRecord(TypedDict):
    """A range of a table, as the coordinator sends it in control commands, lease answers and maps."""

    id: str
    table: str
    low: str
    high: str | None  # None: to the end of the key space
    epoch: int
    path: str
    primary: NotRequired[str | None]  # the server that serves it (in the map; in control commands, of a replicated range only)
    state: NotRequired[str]  # "serving" or the operation holding the range (in the map)
    replicas: NotRequired[list[str]]  # a replicated range: the servers holding a copy (primary included) …
    insync: NotRequired[list[str]]  # … those every acknowledged write has reached (one of them the primary) …
    min_insync: NotRequired[int]  # … how many must be in sync for a write …
    peers: NotRequired[dict[str, str]]  # … each replica's replication endpoint …
    dropped: NotRequired[list[str]]  # … followers just dropped from the in-sync set (no longer joining) …
    token: NotRequired[str]  # … the configuration's secret token, carried by every replication message …
    rebuild: NotRequired[bool]  # … and for a new replica: pull a checkpoint from the primary (partition_server/replication/snapshot.py)
    create: NotRequired[bool]  # a new range's first configuration: its primary may start on an empty directory


def is_replicated(record: Mapping[str, Any]) -> bool:
    """True for a range kept as a replica set (a cluster started with ``--replicas`` > 1): its record, in the map
    and in control commands alike, names its replicas."""
    return "replicas" in record


class LoadCommand(TypedDict):
    """Sent by the coordinator to the server that should serve ``range``; answered once it serves."""

    op: Literal["load"]
    range: RangeRecord
    version: int
    term: NotRequired[int]  # every command carries the sending leader's term (added by the controller)
    settings: NotRequired[dict[str, dict[str, int]]]  # every table's settings (rangetable.table_settings)
    settings_v: NotRequired[int]  # and their version


class TableSettingsCommand(TypedDict):
    """Sent by the coordinator to every live server when a table's settings change; answered once
    every open range applies them."""

    op: Literal["table_settings"]
    settings: dict[str, dict[str, int]]  # table (lower case) -> {"ttl_s", "reads", "writes"}, zeros left out
    settings_v: int
    term: NotRequired[int]


class UnloadCommand(TypedDict):
    """Sent by the coordinator to the server that should stop serving a range."""

    op: Literal["unload"]
    range: str
    epoch: int
    version: NotRequired[int]
    term: NotRequired[int]


class RangeCommand(TypedDict):
    """``prepare`` (flush before a move or split) or ``split_key`` (a key near the median): sent by the
    coordinator to the range's primary."""

    op: Literal["prepare", "split_key"]
    range: str
    epoch: int
    term: NotRequired[int]


class SealCommand(TypedDict):
    """``seal``: sent by the coordinator to each replica of a replicated range before it names a new primary;
    the replica refuses batches of epochs below ``epoch`` from then on and answers ``{"seq", "epoch"}``, the
    last batch it holds (``path``: where its copy is, when it is not open)."""

    op: Literal["seal"]
    range: str
    epoch: int
    path: NotRequired[str]
    term: NotRequired[int]


class SplitCommand(TypedDict):
    """Sent by the coordinator to the primary of ``range``: write both halves, cut at ``key``."""

    op: Literal["split"]
    range: str
    epoch: int
    key: str
    left: RangeRecord
    right: RangeRecord
    version: int  # the map version the split commits (a partition server takes it from any command)
    seq: NotRequired[int]  # to a follower of a replicated range: split after this batch (the primary's last)
    counts: NotRequired[list[list[int]]]  # with seq: the halves' [entities, bytes] at that batch, as the primary counted them
    term: NotRequired[int]


class MergeCommand(TypedDict):
    """Sent by the coordinator to the primary of two adjacent ranges: write them as ``out``."""

    op: Literal["merge"]
    left: RangeRecord
    right: RangeRecord
    out: RangeRecord
    version: int  # the map version the merge commits
    term: NotRequired[int]


class DestroyTarget(TypedDict):
    """The part of a range record a ``destroy`` needs."""

    id: str
    path: str


class DestroyCommand(TypedDict):
    """Sent by the coordinator to a server holding a range's files that no longer belong there."""

    op: Literal["destroy"]
    range: RangeRecord | DestroyTarget
    term: NotRequired[int]


class BackupOpenCommand(TypedDict):
    """Sent by the coordinator (a backup job) to a range's primary: checkpoint it for backup ``backup``."""

    op: Literal["backup_open"]
    range: str
    epoch: int
    backup: str
    term: NotRequired[int]


class BackupOpenAnswer(TypedDict):
    """A partition server's answer to :class:`BackupOpenCommand` (its chunks leave once batch ``seq`` is committed)."""

    id: str
    files: list[list[Any]]  # [name, size]
    seq: int
    store_epoch: int
    ms: float
    bytes: int
    last_ts: int
    entities_estimate: int


class BackupChunkCommand(TypedDict):
    """Relayed by the coordinator for ``rangetable backup``: one chunk of a backup's checkpoint file."""

    op: Literal["backup_chunk"]
    range: str
    backup: str
    id: str
    file: str
    offset: int
    term: NotRequired[int]


class BackupCloseCommand(TypedDict):
    """Sent by the coordinator when a backup ends: delete its checkpoints."""

    op: Literal["backup_close"]
    backup: str
    term: NotRequired[int]


ControlCommand = (
    LoadCommand | UnloadCommand | RangeCommand | SplitCommand | MergeCommand | DestroyCommand | BackupOpenCommand
    | BackupChunkCommand | BackupCloseCommand | TableSettingsCommand | SealCommand
)
"""What the coordinator sends a partition server (only the coordinator's key may)."""

# --- partition server → coordinator (heartbeats) -----------------------------------------------


class Heartbeat(TypedDict):
    """Sent by every partition server to the coordinator every ``heartbeat_interval``.

    ``ranges`` lists every open range as ``[range id, epoch, state]``; ``load`` holds the load reports
    (field → number, zero fields left out) of the ranges whose report changed, by range id.
    """

    op: Literal["heartbeat"]
    server: str
    endpoint: str
    incarnation: str
    pid: NotRequired[int]
    ranges: list[list[Any]]
    load: dict[str, dict[str, float | bool | list[str]]]  # numbers, "compacting", the key "sample"
    pending: NotRequired[int]
    settings_v: NotRequired[int]  # the version of the table settings the server holds
    repl_endpoint: NotRequired[str]  # a replicated cluster: the server's replication endpoint …
    repl: NotRequired[dict[str, dict[str, Any]]]  # … its replicated ranges' progress (Replicator.report) …
    zone: NotRequired[str]  # … and its failure-domain label
    geo: NotRequired[int]  # the epoch of the geo role it enforces (coordinator/map/geo_role.py)


class LeaseAnswer(TypedDict):
    """The coordinator's answer to a :class:`Heartbeat`: the lease runs ``lease_s`` from when the
    heartbeat was sent, unless ``term`` is lower than one the server has seen."""

    lease_s: float
    version: int
    term: int
    settings: NotRequired[dict[str, dict[str, int]]]  # the table settings, when the server's are older
    settings_v: NotRequired[int]
    shares: NotRequired[dict[str, list[float]]]  # range id -> [reads/s, writes/s] of reserved throughput
    geo: NotRequired[dict[str, Any]]  # the geo role: {"epoch", "writes": "all" or "source"} (coordinator/map/geo_role.py)


# --- coordinator → frontends (the partition map) -----------------------------------------------


class MapSnapshot(TypedDict):
    """The whole partition map: the coordinator's answer to ``map``, received by frontends and the CLI."""

    version: int
    ranges: list[RangeRecord]
    servers: dict[str, str]  # server id → endpoint
    tables: list[str]
    indexes: NotRequired[dict[str, list[dict]]]  # base table lower -> index definitions (rangetable/index_def.py)
    pub: NotRequired[str]  # the coordinator's PUB endpoint for deltas


class MapDelta(TypedDict):
    """What changed in the map after ``prev``: published by the coordinator as ``[b"delta", body]``
    (or the answer to ``map {since}``), applied by frontends at a version in ``[prev, version]``."""

    prev: int
    version: int
    ranges: list[RangeRecord]
    removed: list[str]  # range ids
    servers: dict[str, str | None]  # None: the server left
    tables: NotRequired[list[str]]  # only when the catalog changed
    indexes: NotRequired[dict[str, list[dict]]]  # base table lower -> index definitions; only when one changed
    pub: NotRequired[str]


class Hugz(TypedDict):
    """Published by the coordinator as ``[b"hugz", body]`` every second; a frontend behind ``version``
    asks for the map, and re-reads the client keys when ``keys`` changed."""

    version: int
    term: int
    keys: int
