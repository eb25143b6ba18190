"""What a frontend does with each native request: route, relay, retry, stitch query pages.

:meth:`Handler.run` (re)starts a request at its current step and sends one sub-request;
:meth:`Handler.answer` takes the sub-request's answer and either replies to the client, retries, or
runs the next step. Retried steps are idempotent: entity writes carry a request id, and a query's
:class:`~frontend.routing.QueryCursor` only advances on an answer.

The Handler talks to its driver (:mod:`frontend.native.driver`: the native loop of
:mod:`frontend.native.server`, or the asyncio driver of :mod:`frontend.native.asyncio_driver`) through the narrow
:class:`Driver` protocol below, so this module imports no driver.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from frontend.changes import ChangesWalk
from frontend.geo.write import SourceWrite
from frontend.indexes.query import IndexQuery, is_index_token
from frontend.indexes.write import IndexWrite
from frontend.routing import MapCache, QueryCursor, Route, token_to_key
from rangetable import feed_cursor, feed_page, protocol
from rangetable.config import FrontendConfig
from rangetable.errors import TableError
from rangetable.feed_page import BEGINNING, NOW
from rangetable.filter import compile_cached, parse_cached
from rangetable.filter_syntax import Node
from rangetable.index_def import LAG_BOUND_S, SEPARATOR, IndexDef, is_index_table
from rangetable.index_plan import choose
from rangetable.keys import range_bounds
from rangetable.planner import Plan, keys_only, plan

RETRY_CODES = frozenset({"NotPrimary", "RangeBusy"})
COORDINATOR_OPS = frozenset(
    {"create_table", "delete_table", "list_tables", "get_table", "set_table", "split", "move", "merge", "events", "servers",
     "status", "get_acl", "set_acl", "get_service_properties", "set_service_properties", "sync_time",
     "create_index", "drop_index", "list_indexes", "index_ready", "index_claim", "index_check",
     "index_checked", "source_claim", "source_publish", "source_copied", "geo_status"}
)
# A secondary cluster (docs/geo.md) serves reads only: these are refused from clients (its own appliers, whose
# requests are internal, write what the source wrote). The rest reads, or runs the cluster (split, move, merge).
SECONDARY_REFUSES = frozenset(
    {"write", "batch", "create_table", "delete_table", "set_table", "set_acl", "set_service_properties",
     "create_index", "drop_index", "index_check"})
INTERNAL_OPS = frozenset({"source_claim", "source_publish", "source_copied"})  # a secondary's appliers, to their coordinator
_NOW = (True, None)  # what Handler._cut answers on a primary cluster: read now
MAX_PAGE = 1000
TABLE_WAIT_ATTEMPTS = 5  # how often a request for an unknown table waits for a fresher map
_picks = itertools.count()  # spreads -secondary reads over a range's in-sync followers


class Pending:
    """One client request in flight (``extra``: per-request scratch of the Handler)."""

    __slots__ = ("ident", "rid", "req", "deadline", "attempts", "state", "done", "extra", "born", "waits")

    def __init__(self, ident: bytes, rid: bytes, req: dict, timeout_s: float) -> None:
        self.ident = ident
        self.rid = rid
        self.req = req
        self.born = time.monotonic()
        self.deadline = self.born + timeout_s  # retries stop here (ServerBusy)
        self.waits: list[tuple[float, str]] = []  # (seconds since born, why) of each retry: where a slow request waited
        self.attempts = 0
        self.state: Any = None
        self.done = False
        self.extra: dict = {}


class Driver(Protocol):
    """What the Handler uses of its driver (implemented by :class:`frontend.native.driver.DriverCore`)."""

    id: str
    cfg: FrontendConfig
    cache: MapCache

    def send_ps(self, p: Pending, endpoint: str, body: dict, step: Any) -> None:
        """Send a sub-request to a partition server; ``step`` comes back with the answer."""

    def send_coordinator(self, p: Pending, body: dict, step: Any) -> None:
        """Send a request to the coordinator; ``step`` comes back with the answer."""

    def reply(self, p: Pending, body: bytes) -> None:
        """Answer the client with an encoded reply (once)."""

    def reply_ok(self, p: Pending, result: Any) -> None:
        """Answer the client with a success result."""

    def retry_later(self, p: Pending, why: str) -> None:
        """Back off and run the request again with a fresh map, or give up at the deadline."""

    def refresh_map(self, force: bool = False) -> None:
        """Ask the coordinator for what changed in the partition map."""


_T = TypeVar("_T")


PARTS = ("changes", "index_write", "source_write")  # requests asked of many ranges at once, part by part


def internal(p: Pending) -> bool:
    """True for a request of this process itself (an index's applier), never a client's: it has no client
    identity and says so."""
    return p.ident == b"" and p.req.get("internal") is True


def _require(req: dict, name: str, kind: type[_T]) -> _T:
    v = req.get(name)
    if not isinstance(v, kind):
        raise TableError("InvalidInput", f"field {name!r} is missing or has the wrong type")
    return v


def page_size(req: dict) -> int:
    """A query's ``top``: 0..1000 entities or tables per page (0 answers an empty page), 1000 when
    absent; InvalidInput otherwise."""
    top = req.get("top")
    if top is None:
        return MAX_PAGE
    if type(top) is not int or not 0 <= top <= MAX_PAGE:
        raise TableError("InvalidInput", "top must be between 0 and 1000")
    return top


class Handler:
    """Request logic of a frontend (the loop in :mod:`frontend.native.server` moves the messages)."""

    def __init__(self, fe: Driver, secondary: bool = False) -> None:
        self.fe = fe
        self._rid_prefix = uuid.uuid4().hex[:16] + "-"  # unique per process, so ids never repeat
        self._rids = itertools.count(1)
        self._applied: dict[tuple[str, str], list] = {}  # (table, index) lower -> the last progress cursor read
        self._start_role = "secondary" if secondary else "primary"  # until the coordinator's word arrives

    @property
    def role(self) -> str:
        """The cluster's geo role (``docs/geo.md``): ``primary``; ``fenced`` (failing over: no writes);
        ``secondary`` (follows another: reads at each table's cut, no writes)."""
        geo = self.fe.cache.geo
        return self._start_role if geo is None else str(geo["role"])

    def run(self, p: Pending) -> None:
        """Start or continue a request."""
        op = p.req["op"]
        if op in SECONDARY_REFUSES and not internal(p) and self.role != "primary":
            raise TableError("InsufficientAccountPermissions", "This cluster is a secondary of another, or is "
                             "failing over to its secondary: it serves reads only. Write operations are not allowed.")
        if op == "get" or op == "write" or op == "batch":  # the common cases first
            self._entity_op(p)
        elif op == "query":
            self._query(p)
        elif op == "changes":
            self._changes(p)
        elif op == "index_write":
            self._index_write(p)
        elif op == "source_write":
            self._source_write(p)
        elif op == "explain":
            self._explain(p)
        elif op in COORDINATOR_OPS:
            if op in INTERNAL_OPS and not internal(p):
                raise TableError("InvalidInput", f"unknown op {op!r}")
            self.fe.send_coordinator(p, p.req, "relay")
        elif op == "hello":
            if p.req.get("version") != protocol.VERSION:
                raise TableError("InvalidInput", f"protocol version {p.req.get('version')} not supported")
            self.fe.reply(p, protocol.ok({"version": protocol.VERSION, "max_message": protocol.MAX_MESSAGE,
                                          "frontend": self.fe.id}))
        elif op == "map":
            self.fe.reply(p, protocol.ok(self.fe.cache.snapshot))
        elif op == "map_version":  # cheap: how far this frontend's map is (control-plane bench)
            cache = self.fe.cache
            self.fe.reply(p, protocol.ok({"version": cache.version, "ranges": len(cache.ranges)}))
        else:
            raise TableError("InvalidInput", f"unknown op {op!r}")

    def _cut(self, p: Pending, table: str) -> tuple[bool, int | None]:
        """The cut a read of ``table`` is answered at: ``(True, None)`` (now) on a primary cluster and for this
        process's own requests; on a secondary (and while a fenced one is promoted) the table's cut, the same for
        every range the request reads; ``(False, None)`` until the coordinator's cuts arrived (the request runs
        again later). ServerBusy for a secondary's table without a cut yet: its first copy is under way, and a
        read would see it half done. A fenced primary (a planned failover's source) has no cuts: it reads now."""
        role = self.role
        if role == "primary" or internal(p):  # its own appliers read what is there now
            return True, None
        at = p.extra.get("at")
        if at is None:
            cache = self.fe.cache
            if not cache.cuts_heard:
                self.fe.retry_later(p, "the cuts of this secondary cluster have not arrived yet")
                return False, None
            at = cache.cuts.get(table.lower())
            if at is None:
                if role == "fenced":
                    return True, None
                raise TableError("ServerBusy", f"Table {table} is being copied from the source cluster: it is "
                                               "readable here once the copy is done.")
            p.extra["at"] = at
        return True, at

    # --- routing helpers ----------------------------------------------------------------------

    def _table(self, p: Pending) -> str | None:
        table = _require(p.req, "table", str)
        if is_index_table(table) and not internal(p):
            raise TableError("TableNotFound")  # an index's entries: read by the frontend's planner, never by a user
        cache = self.fe.cache
        if cache.has_table(table):
            return table
        started = p.extra.setdefault("started", time.monotonic())
        # TableNotFound only on the word of a map received after this request began (and a few
        # tries, for a table created a moment ago); without one — no map yet, coordinator away —
        # keep waiting until the deadline, which ends in ServerBusy, never in a false 404.
        if cache.received < started or p.attempts < TABLE_WAIT_ATTEMPTS:
            self.fe.retry_later(p, "table not in map")
            return None
        raise TableError("TableNotFound")

    def _entity_op(self, p: Pending) -> None:
        req = p.req
        table = req.get("table")
        if not (isinstance(table, str) and table.lower() in self.fe.cache.tables
                and SEPARATOR not in table):  # else: the slow checks
            table = self._table(p)
            if table is None:
                return
        op = req["op"]
        if op == "get":
            pk = req.get("pk")
            rk = req.get("rk")
            if not (isinstance(pk, str) and isinstance(rk, str)):
                pk = _require(req, "pk", str)
                rk = _require(req, "rk", str)
            body = {"op": "get", "pk": pk, "rk": rk, "select": req.get("select")}
            ready, at = _NOW if self.role == "primary" else self._cut(p, table)  # a primary: no _cut call
            if not ready:
                return
            if at is not None:
                body["at"] = at
        elif op == "write":
            w = _require(req, "write", dict)
            pk = _require(w, "pk", str)
            body = {"op": "write", "write": w}
        else:
            ops = _require(req, "ops", list)
            if not ops or not isinstance(ops[0], dict) or not isinstance(ops[0].get("pk"), str):
                raise TableError("InvalidInput", "a batch needs at least one operation with a PartitionKey")
            pk = ops[0]["pk"]
            body = {"op": "batch", "ops": ops}
            if req.get("echo") is False:  # answer only the shared Timestamp (bulk imports)
                body["echo"] = False
        if op != "get":
            if self.fe.cache.holding and self._held_by_index(p, table):
                return
            if "rid" not in req or not isinstance(req["rid"], str):
                req["rid"] = f"{self._rid_prefix}{next(self._rids)}"  # so our own retries are applied once
            body["rid"] = req["rid"]
        route = self.fe.cache.route(table, pk)
        endpoint = self._secondary(p, route, body) if op == "get" and req.get("secondary") else route.endpoint
        if endpoint is None:
            self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
            return
        body["range"] = route.range["id"]
        body["epoch"] = route.range["epoch"]
        self.fe.send_ps(p, endpoint, body, "entity")

    def _held_by_index(self, p: Pending, table: str) -> bool:
        """Back-pressure: while an index of ``table`` is further behind than its bound (the coordinator marks it
        in the map), a write waits for it — to the request's deadline, which ends in ServerBusy naming the index."""
        d = self.fe.cache.holding.get(table.lower())
        if d is None:
            return False
        self.fe.retry_later(p, f"index {d.name} of table {table} is {d.behind_s:g} s behind its table (bound "
                               f"{LAG_BOUND_S:g} s): writes wait until it catches up")
        return True

    @staticmethod
    def _secondary(p: Pending, route: Route, body: dict) -> str | None:
        """The endpoint of a read of the ``-secondary`` endpoint (an in-sync follower of the range, else its
        primary: :meth:`Route.secondary_endpoint`), and ``body`` marked so a follower serves it."""
        body["secondary"] = True
        pick = p.extra.get("pick")
        if pick is None:
            pick = p.extra["pick"] = next(_picks)
        return route.secondary_endpoint(p.attempts, pick)

    def _query(self, p: Pending) -> None:
        req = p.req
        table = self._table(p)
        if table is None:
            return
        cur: QueryCursor | IndexQuery | None = p.state
        if cur is None:
            top = page_size(req)
            if top == 0:  # an empty page, once the table is known to exist (Azure answers $top=0 so)
                self.fe.reply_ok(p, {"entities": [], "next": None})
                return
            filt = req.get("filter")
            if filt is not None and not isinstance(filt, str):
                raise TableError("InvalidInput", "filter must be a string")
            node = parse_cached(filt or None)
            base = plan(node)
            p.extra["page_end"] = time.monotonic() + self.fe.cfg.page_budget_ms / 1000.0
            through = self._index_plan(table, node, base, req)
            if through is not None:
                q = p.state = IndexQuery.start(through, table, req, top)
                q.try_known(self._applied.get((table.lower(), through.index.name.lower())))
                self._index_query(p)
                return
            cur = QueryCursor(base, top)
            if base.kind == "point" and keys_only(node):  # its point reads are exactly the matches
                p.extra["range_filter"] = None
            if req.get("next") is not None:
                cur.pos = token_to_key(req["next"])
            p.state = cur
        if isinstance(cur, IndexQuery):
            self._index_query(p)
            return
        seg = cur.next_segment(self.fe.cache, table)
        if seg is None:
            self._finish_query(p, cur)
            return
        route, spans = seg
        left_ms = max(1, int((p.extra["page_end"] - time.monotonic()) * 1000))
        (lo, hi), more = spans[0], spans[1:]
        body = {"op": "scan", "range": route.range["id"], "epoch": route.range["epoch"], "lo": lo, "hi": hi,
                "filter": p.extra.get("range_filter", req.get("filter") or None), "select": req.get("select"),
                "limit": cur.remaining,
                "budget_ms": left_ms}
        ready, at = _NOW if self.role == "primary" else self._cut(p, table)
        if not ready:
            return
        if at is not None:
            body["at"] = at
        endpoint = self._secondary(p, route, body) if req.get("secondary") else route.endpoint
        if endpoint is None:
            self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
            return
        if more:
            body["spans"] = more
        self.fe.send_ps(p, endpoint, body, ("scan", spans[-1][1]))

    def _index_plan(self, table: str, node: Node | None, base: Plan, req: dict) -> Any:
        """The index plan of a query (:func:`rangetable.index_plan.choose`), or None to scan the base table: a
        query whose keys are constrained scans the base table; a continued page goes on as its first page went
        (its token says through which index, if any)."""
        nxt = req.get("next")
        if nxt is not None and not is_index_token(nxt):
            return None
        defs: list[IndexDef] = self.fe.cache.indexes_of(table)
        if nxt is None:
            return choose(node, defs) if base.kind == "full" and defs else None
        name = nxt[0][1:].partition(nxt[0][:1])[0].lower()
        through = choose(node, [d for d in defs if d.name.lower() == name])
        if through is None:
            raise TableError("InvalidInput", f"The continuation token is for index {name!r}, which no longer answers "
                                             "this query: start it again.")
        return through

    def _explain(self, p: Pending) -> None:
        """How a query of ``filter`` on the table would read (``rangetable explain``), without running it."""
        table = self._table(p)
        if table is None:
            return
        filt = p.req.get("filter")
        if filt is not None and not isinstance(filt, str):
            raise TableError("InvalidInput", "filter must be a string")
        node = parse_cached(filt or None)
        base = plan(node)
        defs = self.fe.cache.indexes_of(table)
        through = self._index_plan(table, node, base, {})
        out: dict[str, Any] = {"table": table, "filter": filt,
                               "indexes": [{"name": d.name, "on": list(d.on), "state": d.state} for d in defs]}
        if through is not None:
            out.update(plan="index", index=through.index.name, scans=len(through.scans), describe=through.describe())
        else:
            waiting = [d.name for d in defs if not d.ready and choose(node, [replace(d, state="ready")]) is not None]
            why = (f"index {', '.join(waiting)} would answer it once built" if waiting else
                   "its keys are constrained" if base.kind != "full" else "no index constrains it")
            out.update(plan=base.kind, scans=len(base.scans), describe=f"{base.kind} scan of {table}: {why}")
        self.fe.reply_ok(p, out)

    def _index_query(self, p: Pending) -> None:
        """The next step of a query through an index (:mod:`frontend.indexes.query`)."""
        q: IndexQuery = p.state
        cache = self.fe.cache
        if q.fallback is not None and q.first_page:
            p.extra["plan"] = {"index": q.plan.index.name, "fallback": q.fallback}  # a first page: scan the base table
            p.extra["page_end"] = time.monotonic() + self.fe.cfg.page_budget_ms / 1000.0  # with a page's full time
            p.state = QueryCursor(plan(parse_cached(q.filter or None)), q.top)
            self._query(p)
            return
        if q.phase == "progress":
            if q.progress_flying:
                return
            table, pk, rk = q.progress_request()
            route = cache.route(table, pk)
            if route.endpoint is None:
                self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
                return
            q.progress_flying = True
            self.fe.send_ps(p, route.endpoint, {"op": "get", "pk": pk, "rk": rk, "range": route.range["id"],
                                                "epoch": route.range["epoch"]}, ("ixq", "progress"))
            return
        if q.phase == "check":
            assert q.walk is not None
            for route, _, _ in q.walk.segments(cache, q.table):
                if route.endpoint is None:
                    self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
                    return
            for route, part, body in q.check_parts(cache):
                self.fe.send_ps(p, route.endpoint, body, ("ixq", "check", part))  # type: ignore[arg-type]
        if q.wants_entries():  # after the check, or beside an optimistic one
            seg = q.cursor.next_segment(cache, q.entries_table)
            if seg is None:
                q.take_entries(q.cursor, [], None, None, True)
                self._index_query(p)
                return
            route, spans = seg
            if route.endpoint is None:
                self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
                return
            (lo, hi), more = spans[0], spans[1:]
            body = {"op": "scan", "range": route.range["id"], "epoch": route.range["epoch"], "lo": lo, "hi": hi,
                    "limit": q.cursor.remaining, "budget_ms": self._page_left_ms(p)}
            if more:
                body["spans"] = more
            q.entries_flying = True
            self.fe.send_ps(p, route.endpoint, body, ("ixq", "entries", spans[-1][1], q.cursor))
        elif q.phase == "rows":
            parts = q.row_parts(cache, self._page_left_ms(p) + 1000)
            for route, _, _ in parts:
                if route.endpoint is None:
                    for _, other, _ in parts:
                        q.failed(other)
                    self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
                    return
            for route, part, body in parts:
                self.fe.send_ps(p, route.endpoint, body, ("ixq", "rows", part))  # type: ignore[arg-type]
        elif q.phase == "done":
            self.fe.reply_ok(p, q.page())

    @staticmethod
    def _page_left_ms(p: Pending) -> int:
        return max(1, int((p.extra["page_end"] - time.monotonic()) * 1000))

    def _index_query_answer(self, p: Pending, step: tuple, reply: dict, raw: bytes, err: dict | None) -> None:
        """An answer to a step of a query through an index."""
        q: IndexQuery = p.state
        kind = step[1]
        if kind == "progress":
            q.progress_flying = False
        elif kind == "entries":
            q.entries_flying = False
        if err is not None and not (kind == "progress" and err.get("code") == "ResourceNotFound"):
            if err.get("code") not in RETRY_CODES:
                self.fe.reply(p, raw)
                return
            q.lost(step)
            self.fe.retry_later(p, err.get("message", err["code"]))
            return
        if kind == "progress":
            known = q.take_progress(None if err is not None else reply["ok"][3])
            if known is not None:
                self._applied[(q.table.lower(), q.plan.index.name.lower())] = known
        elif kind == "check":
            q.take_check(step[2], reply["ok"])
            fresh = q.checked()
            if fresh is None:
                if q.walk is not None and not q.walk.asked:
                    self.run(p)  # the parts left are gaps: ask them
                return
            if not fresh:
                self.fe.retry_later(p, f"index {q.plan.index.name} is behind its table")
                return
        elif kind == "entries":
            res = reply["ok"]
            q.take_entries(step[3], res["entities"], res["next"], step[2], time.monotonic() >= p.extra["page_end"])
        else:
            res = reply["ok"]
            q.take_rows(step[2], res["entities"], res["next"], res.get("feed"))
            if q.checking and q.checked() is False:
                self.fe.retry_later(p, f"index {q.plan.index.name} is behind its table")
                return
            if q.phase != "done" and q.asked:
                return
        self.run(p)

    def _changes(self, p: Pending) -> None:
        """A page of a table's change feed (:mod:`frontend.changes`): ``after`` a position, or from ``start``
        ``"beginning"`` (the oldest change kept) or ``"now"`` (no record: the cursor of the present); of the
        PartitionKeys ``[lo, hi)`` when given (a consumer group's span)."""
        req = p.req
        table = self._table(p)
        if table is None:
            return
        walk: ChangesWalk | None = p.state
        if walk is None:
            start = req.get("start")
            top = feed_page.check_top(req.get("top", feed_page.DEFAULT_TOP))
            lo, hi = req.get("lo", ""), req.get("hi")
            if not isinstance(lo, str) or not (hi is None or isinstance(hi, str) and hi > lo):
                raise TableError("InvalidInput", "lo and hi must be PartitionKeys with lo < hi (hi nil: to the end)")
            pos, end = range_bounds(lo, hi)
            need = req.get("need")
            if need is not None and type(need) is not int:
                raise TableError("InvalidInput", "need must be a Timestamp")
            if req.get("after") is not None:
                walk = ChangesWalk(feed_cursor.from_wire(req["after"]), top, pos, end, need)
            elif start in (BEGINNING, None):
                walk = ChangesWalk(None, top, pos, end, need)
            elif start == NOW:
                walk = ChangesWalk(None, 0, pos, end, need)
            else:
                raise TableError("InvalidInput", "start must be 'beginning' or 'now' (or give a position in 'after')")
            ready, walk.cut = self._cut(p, table)  # a secondary: the source's feed up to the table's cut
            if not ready:
                return
            p.state = walk
        if walk.done:
            self.fe.reply_ok(p, walk.page())
            return
        self._ask_parts(p, walk.segments(self.fe.cache, table), walk.ask, "changes")

    def _index_write(self, p: Pending) -> None:
        """Entries of an index, to every range of its table that holds some (:mod:`frontend.indexes.write`);
        only from this process's own applier."""
        if not internal(p):
            raise TableError("InvalidInput", "unknown op 'index_write'")
        w: IndexWrite | None = p.state
        if w is None:
            w = p.state = IndexWrite.from_request(p.req)
            if not self.fe.cache.has_table(w.table):
                raise TableError("TableNotFound", f"the index's table {w.table} is not in the map")
        if w.done:
            self.fe.reply_ok(p, w.result())
            return
        parts = w.parts(self.fe.cache)
        for route, _, _ in parts:
            if route.endpoint is None:
                self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
                return
        for route, part, body in parts:
            w.sent(part, body)
            self.fe.send_ps(p, route.endpoint, body, ("index_write", part))  # type: ignore[arg-type]

    def _source_write(self, p: Pending) -> None:
        """A page of a source cluster's changes, to every range of a secondary table (:mod:`frontend.geo.write`);
        only from this process's own applier."""
        if not internal(p):
            raise TableError("InvalidInput", "unknown op 'source_write'")
        w: SourceWrite | None = p.state
        if w is None:
            w = p.state = SourceWrite.from_request(p.req)
            if not self.fe.cache.has_table(w.table):
                raise TableError("TableNotFound", f"the secondary table {w.table} is not in the map")
        if w.done:
            self.fe.reply_ok(p, w.result())
            return
        self._ask_parts(p, w.segments(self.fe.cache), w.ask, "source_write")

    def _ask_parts(self, p: Pending, segments: list[tuple[Route, bytes, bytes | None]],
                   ask: Callable[[Route, bytes, bytes | None], tuple[int, dict[str, Any]]], step: str) -> None:
        """Ask every range of ``segments`` for its part at once (a change-feed page, a source write); at a range
        without a serving primary, stop and run ``p`` again later (the parts not asked stay gaps)."""
        for route, lo, hi in segments:
            if route.endpoint is None:
                self.fe.retry_later(p, f"range {route.range['id']} has no serving primary")
                return
            part, body = ask(route, lo, hi)
            self.fe.send_ps(p, route.endpoint, body, (step, part))

    def abandon(self, p: Pending, step: Any) -> None:
        """The driver gave up on a sub-request of ``p`` (no answer in time, or its server left the map) and
        will run ``p`` again: a change-feed part becomes a gap to ask again, an index write's part is asked again."""
        if not isinstance(step, tuple):
            return
        if step[0] in PARTS and isinstance(p.state, ChangesWalk | IndexWrite | SourceWrite):
            p.state.failed(step[1])
        elif step[0] == "ixq" and isinstance(p.state, IndexQuery):
            p.state.lost(step)

    def _finish_query(self, p: Pending, cur: QueryCursor) -> None:
        out = {"entities": cur.results, "next": cur.token()}
        if "plan" in p.extra:
            out["plan"] = p.extra["plan"]
        self.fe.reply_ok(p, out)

    # --- answers ------------------------------------------------------------------------------

    def answer(self, p: Pending, step: Any, reply: dict, raw: bytes) -> None:
        """Take the answer to a sub-request."""
        err = reply.get("error") if isinstance(reply, dict) else None
        if isinstance(step, tuple) and step[0] in PARTS:
            self._part_answer(p, step[1], reply, raw, err)
            return
        if isinstance(step, tuple) and step[0] == "ixq":
            self._index_query_answer(p, step, reply, raw, err)
            return
        if err is not None and err.get("code") in RETRY_CODES:
            self.fe.retry_later(p, err.get("message", err["code"]))
            return
        if step == "relay":
            self._relay(p, reply, raw)
        elif step == "entity":
            self.fe.reply(p, raw)
        else:
            if err is not None:
                self.fe.reply(p, raw)
                return
            cur: QueryCursor = p.state
            res = reply["ok"]
            cur.advance(res["entities"], res["next"], step[1])
            if cur.remaining <= 0 or cur.done or time.monotonic() >= p.extra["page_end"]:
                self._finish_query(p, cur)
            else:
                self.run(p)

    def _part_answer(self, p: Pending, part: int, reply: dict, raw: bytes, err: dict | None) -> None:
        """One range's part of a request asked of every range at once — a change-feed page (:class:`ChangesWalk`),
        an index write (:class:`IndexWrite`) or a secondary's write of its source's changes (:class:`SourceWrite`):
        its result once every part is in; a part that must be asked again (the range moved, split, is busy) is
        asked by the map of then."""
        parts: ChangesWalk | IndexWrite | SourceWrite = p.state
        if err is not None:
            if err.get("code") not in RETRY_CODES:
                self.fe.reply(p, raw)
                return
            parts.failed(part)
            self.fe.retry_later(p, err.get("message", err["code"]))
            return
        parts.take(part, reply["ok"])
        if parts.done:
            self.fe.reply_ok(p, parts.result())
        elif not parts.asked:
            self.run(p)  # the parts left are gaps: ask them

    def _relay(self, p: Pending, reply: dict, raw: bytes) -> None:
        op = p.req["op"]
        if op in ("create_table", "delete_table", "create_index", "drop_index", "index_check",
                  "index_checked") and "error" not in reply:
            self.fe.refresh_map(force=True)
        if op == "list_tables" and "error" not in reply:
            self.fe.reply_ok(p, self._page_tables(p.req, reply["ok"]["tables"]))
            return
        self.fe.reply(p, raw)

    @staticmethod
    def _page_tables(req: dict, names: list[str]) -> dict:
        """Filter (on ``TableName``) and page the table list."""
        filt = req.get("filter")
        if filt is not None and not isinstance(filt, str):
            raise TableError("InvalidInput", "filter must be a string")
        _, pred = compile_cached(filt or None)
        after = req.get("next")
        top = page_size(req)
        out = []
        for n in names:
            if after is not None and n.lower() < str(after).lower():
                continue
            if pred("", "", 0, {"TableName": [0, n]}):
                out.append(n)
        nxt = out[top] if len(out) > top and top else None
        return {"tables": out[:top], "next": nxt}
