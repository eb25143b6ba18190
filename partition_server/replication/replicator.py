"""A partition server's replication endpoint: the ranges it is primary or follower of, and the messages
between replicas (the protocol is in :mod:`partition_server.replication.protocol`).

Sockets: one ROUTER bound at the server's replication endpoint, CURVE-authenticated with its own ZAP
domain that admits partition-server keys only (no frontend, client or coordinator key may send to it),
and one send-only DEALER per peer it talks to. Every message flows one way, so the server's loop reads
only its ROUTERs:

* ``repl`` primary → follower: ``{"op": "repl", "range", "epoch", "from", "token", "batches": [[seq, batch], …]}``
  — every batch of the range due at this loop turn (``Primary.to_send``), applied by the follower in one
  RocksDB WriteBatch (``Following.apply``);
* ``ack`` follower → primary: ``{"op": "ack", "range", "epoch", "from", "token", "seq"}`` — the highest batch it
  holds. A follower also sends it when it starts following and every :data:`HELLO_S` while the primary
  is silent (heartbeating, as the ZeroMQ guide's Paranoid Pirate does), so the primary learns where to
  send from after a restart, a gap or a change of primary.

**One message per peer per loop turn.** What a loop turn has for one peer — the ``repl`` of each of its ranges
due (pump), the ``ack`` of each range it followed this turn (drain), acknowledgements and batches together — leaves as ONE ZeroMQ message of one frame
per body (:meth:`Replicator.flush`): the ZeroMQ guide's "drain what is ready, then send", which never waits to
batch (a turn with one body sends one frame: the plain message). Each body keeps its own epoch and token
checks on arrival. A follower applies the ``repl`` bodies of a turn after reading them, all of one range
together (:meth:`Replicator._settle`), and acknowledges each range once.

Every partition server holds the same key pair, so CURVE alone cannot tell the primary from any other
keyed peer: each message also carries its configuration's ``token``, which only the coordinator's load
command gives the replicas (:func:`coordinator.replicas.sets.config_token`). A message that is not one of
these, or whose token is wrong (a bug, a fuzzer holding a partition-server key), is counted and dropped:
it never stops the loop nor reaches a store, and no forged acknowledgement moves a commit point.

Rebuilding a lost replica (``snap``, ``snap_chunk`` follower → primary; ``snap_files``, ``snap_data``
primary → follower) is in :mod:`partition_server.replication.snapshot`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

from partition_server.replication.protocol import Following, Primary
from partition_server.replication.snapshot import Pull, Source
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import ReplicaLog
from rangetable import curve, protocol
from rangetable.errors import TableError
from rangetable.kernel.addresses import advertised

log = logging.getLogger("rangetable.partition_server")

HELLO_S = 0.5  # a follower that heard nothing from its primary for this long tells it where it stands
TICK_S = 0.05  # resends and hellos are looked at this often
DOMAIN = "replication"  # the ZAP domain of replication endpoints


class Replicator:
    """The replicated ranges of one partition server and their sockets."""

    def __init__(self, ctx: zmq.Context, keys: curve.KeyRing, lag_s: float = 1.0, data_dir: str = ".",
                 rebuild_mb_s: float = 100.0) -> None:
        self.ctx = ctx
        self.keys = keys
        self.me = ""
        self.lag_s = lag_s
        self.primaries: dict[str, Primary] = {}
        self.following: dict[str, Following] = {}
        self.sock: zmq.Socket | None = None
        self.endpoint = ""
        self._peers: dict[str, zmq.Socket] = {}
        self._due: set[str] = set()  # primaries with batches to ship (written since the last pump)
        self._out: dict[str, list[bytes]] = {}  # endpoint -> bodies queued this loop turn (sent by flush)
        self._incoming: dict[str, tuple[Following, int, list[tuple[int, bytes]]]] = {}  # rid -> repl read this turn
        self._acked: set[str] = set()  # primaries whose commit point may have moved
        self._tick = 0.0
        self.refused = 0  # malformed or unexpected messages dropped
        self.source = Source(os.path.join(data_dir, "snapshots"))  # checkpoints served to rebuilding followers
        self.pulls: dict[str, Pull] = {}  # replicas being rebuilt here, by range id
        self.rebuild_bytes_s = rebuild_mb_s * 1e6
        self.on_rebuilt: Callable[[str, dict], None] = lambda rid, record: None  # RangeSet opens the copy

    # --- sockets ------------------------------------------------------------------------------

    def bind(self, bind: str, advertise: str = "") -> str:
        """Bind the replication endpoint (admitting partition-server keys only); returns its address."""
        sock = self.ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, protocol.HARD_MAX_MESSAGE)
        g = curve.guard(self.ctx)
        allowed = frozenset({self.keys.pairs["partition-server"].user_id})
        g.allow(DOMAIN, lambda: allowed)
        g.watch(sock, "replication endpoint")
        curve.secure_server(sock, self.keys.pair("partition-server"), DOMAIN)
        sock.bind(bind)
        self.sock = sock
        self.endpoint = advertised(sock.getsockopt(zmq.LAST_ENDPOINT).decode(), advertise)
        return self.endpoint

    def _peer(self, endpoint: str) -> zmq.Socket:
        sock = self._peers.get(endpoint)
        if sock is None:
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 10_000)
            curve.secure_client(sock, self.keys.pair("partition-server"), self.keys.public("partition-server"))
            try:
                sock.connect(endpoint)
            except zmq.ZMQError:
                sock.close(0)
                raise
            self._peers[endpoint] = sock
        return sock

    def _send(self, endpoint: str, body: dict | bytes) -> None:
        """Queue ``body`` (packed, or to pack) for ``endpoint``; :meth:`flush` sends it at the end of the turn."""
        if not endpoint:  # a peer whose endpoint the coordinator did not know yet: its next configuration names it
            return
        data = body if isinstance(body, bytes) else protocol.pack(body)
        queued = self._out.get(endpoint)
        if queued is None:
            self._out[endpoint] = [data]
        else:
            queued.append(data)

    def flush(self) -> None:
        """Send what this loop turn queued: one ZeroMQ message per peer, one frame per body (the ZeroMQ guide's
        "drain what is ready, then send"; a turn with one body for a peer sends the plain one-frame message)."""
        if not self._out:
            return
        out, self._out = self._out, {}
        for endpoint, bodies in out.items():
            try:
                protocol.send_frames(self._peer(endpoint), bodies, protocol.NOBLOCK)
            except zmq.Again:  # the peer is gone or far behind: the resend timer sends it again
                pass
            except zmq.ZMQError as exc:  # a malformed endpoint: never the loop's end (it was: chaos, exit 1)
                self.refused += 1
                log.warning("cannot reach replication peer %r: %s", endpoint, exc)
                sock = self._peers.pop(endpoint, None)
                if sock is not None:
                    sock.close(0)

    def close(self) -> None:
        """Close every socket."""
        self._out.clear()
        self._incoming.clear()
        for p in list(self.primaries.values()):
            p.close()
        self.primaries.clear()
        self.following.clear()
        for pull in self.pulls.values():
            pull.cancel()
        self.pulls.clear()
        self.source.close()
        for s in self._peers.values():
            s.close(0)
        self._peers.clear()
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None

    # --- roles --------------------------------------------------------------------------------

    def attach(self, rid: str, record: dict, store: RangeStore) -> str:
        """Serve ``record`` (a replicated range's configuration) with ``store``: as primary when it names
        this server, else as follower. Returns the state to report: ``serving`` or ``following``."""
        epoch = int(record["epoch"])
        seen = self.adopted_epoch(rid, store)
        if epoch < seen:  # a coordinator acting on a stale map: two primaries if obeyed
            raise TableError("NotPrimary", f"stale configuration of {rid}: epoch {epoch} is below epoch {seen}, "
                                         "which this replica already serves or follows")
        peers: dict[str, str] = record.get("peers") or {}
        primary = record["primary"]
        if primary == self.me:
            cur = self.primaries.get(rid)
            if cur is not None and cur.epoch == epoch and cur.store is store:
                self.following.pop(rid, None)
                cur.configure(peers, record.get("insync") or [], record.get("dropped") or [])
                self._acked.add(rid)
                return "serving"
            if cur is not None:
                cur.close()
            was = self.following.pop(rid, None)  # a follower promoted keeps the batches it applied
            ring = was.log if was is not None and was.store is store else ReplicaLog(store.position()[1])
            p = Primary(rid, epoch, store, ring, peers, record.get("insync") or [], self.me,
                        int(record.get("min_insync", 1)), str(record.get("token", "")))
            self.primaries[rid] = p
            self._acked.add(rid)
            log.info("primary of %s at epoch %d from batch %d (in sync: %s)", rid, epoch, p.outbox.seq,
                     ", ".join(sorted(p.insync)) or "none")
            return "serving"
        old = self.primaries.pop(rid, None)
        if old is not None:
            old.close()
        cur_f = self.following.get(rid)
        if cur_f is not None and cur_f.store is store:
            cur_f.epoch = max(cur_f.epoch, epoch)
            cur_f.sealed = max(cur_f.sealed, epoch)
            # "": a coordinator that just took over has not heard from the primary yet; keep the endpoint this
            # follower knows for the same primary (erased, it stopped acknowledging and was dropped from the
            # in-sync set after every takeover: found by the netsplit drill).
            known = cur_f.primary_endpoint if cur_f.primary == primary else ""
            cur_f.primary, cur_f.primary_endpoint = primary, peers.get(primary) or known
            cur_f.token = str(record.get("token", ""))
            cur_f.heard_at = float("-inf")  # say hello to the (new) primary at once
        else:
            log_ = ReplicaLog(store.position()[1])
            self.following[rid] = Following(rid, epoch, store, log_, primary, peers.get(primary, ""),
                                            str(record.get("token", "")))
        return "following"

    def adopted_epoch(self, rid: str, store: RangeStore) -> int:
        """The latest epoch this replica of ``rid`` has adopted: the configuration it serves or follows now, or
        the epoch of the last batch its store holds. A configuration below it is stale and refused: once a
        replica has followed a primary of epoch E, obeying a configuration of an earlier epoch would make two
        primaries (a coordinator that lost a map change, as chaos found: a primary transferred at epoch 14,
        then the next leader's map still naming the old one at epoch 13)."""
        seen = store.position()[0]
        p = self.primaries.get(rid)
        if p is not None and p.store is store:
            seen = max(seen, p.epoch)
        f = self.following.get(rid)
        if f is not None and f.store is store:
            seen = max(seen, f.epoch)
        return seen

    def detach(self, rid: str) -> None:
        """Stop replicating a range (unloaded); replies held for it are dropped (clients retry)."""
        p = self.primaries.pop(rid, None)
        if p is not None:
            p.close()
        self.following.pop(rid, None)
        pull = self.pulls.pop(rid, None)
        if pull is not None:
            pull.cancel()

    def rebuild(self, rid: str, record: dict, path: str) -> str:
        """Rebuild this server's replica of ``rid`` at ``path`` from its primary's checkpoint (a new
        configuration of a range being rebuilt retargets the pull). Returns the state to report."""
        cur = self.pulls.get(rid)
        if cur is None:
            self.detach(rid)
        if cur is not None:
            cur.retarget(record)
        else:
            self.pulls[rid] = Pull(rid, record, path, self.rebuild_bytes_s)
            log.info("rebuilding %s from %s at epoch %s", rid, record["primary"], record["epoch"])
        return "following"

    def seal(self, rid: str, epoch: int) -> dict:
        """Refuse batches of epochs below ``epoch`` from now on; answer how far this replica got."""
        f = self.following.get(rid)
        if f is not None:
            f.sealed = max(f.sealed, epoch)
            return {"seq": f.applied, "epoch": f.epoch}
        p = self.primaries.get(rid)
        if p is not None:  # a primary being replaced (a transfer, or it restarted): stop taking writes
            return {"seq": p.outbox.seq, "epoch": p.epoch}
        raise TableError("NotPrimary", f"range {rid} is not replicated here")

    def writable(self, rid: str) -> bool:
        """False when ``rid``'s primary has fewer in-sync replicas than ``--min-insync``."""
        p = self.primaries.get(rid)
        return p is None or p.writable()

    # --- replies held until committed ---------------------------------------------------------

    def hold(self, rid: Any, frames: list[bytes]) -> bool:
        """Keep ``frames`` (a reply about range ``rid``) until what it depends on is committed; False
        when it may go at once."""
        p = self.primaries.get(rid)
        if p is None or not p.pending():
            return False
        p.hold(frames)
        self._due.add(rid)
        return True

    # --- messages -----------------------------------------------------------------------------

    def on_frames(self, frames: list[bytes]) -> None:
        """Handle one message from the replication endpoint (a routing id, then one frame per body), then
        apply what it carried and send the answers (:meth:`drain` does this once for all it reads)."""
        self._on_message(frames)
        self._settle()

    def _on_message(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            self._refuse(ValueError(f"{len(frames)} frames"))
            return
        for body in frames[1:]:  # each body checked on its own: one bad body never drops its neighbours
            try:
                self._on_body(msgpack.unpackb(body, raw=False))
            except (ValueError, KeyError, TypeError, AttributeError, msgpack.UnpackException) as exc:
                self._refuse(exc)

    def _refuse(self, exc: Exception) -> None:
        self.refused += 1
        if self.refused <= 10 or self.refused % 1000 == 0:
            log.warning("replication message refused (%d so far): %s", self.refused, exc)

    def _on_body(self, msg: dict) -> None:
        op, rid, epoch = msg["op"], msg["range"], int(msg["epoch"])
        if op == "repl":
            f = self.following.get(rid)
            if f is None or msg["from"] != f.primary:
                return  # a deposed primary, or a range this server no longer follows
            if msg.get("token", "") != f.token:
                raise ValueError(f"repl for {rid!r} without its configuration's token")
            batches = [(int(s), bytes(b)) for s, b in msg["batches"]]
            cur = self._incoming.get(rid)
            if cur is not None and (cur[0] is not f or cur[1] != epoch):
                self._apply(rid)  # another epoch or another following: never mixed in one write
                cur = None
            if cur is None:
                self._incoming[rid] = (f, epoch, batches)
            else:
                cur[2].extend(batches)
        elif op == "ack":
            p = self.primaries.get(rid)
            if p is None or epoch != p.epoch:
                return
            if msg.get("token", "") != p.token:
                raise ValueError(f"ack for {rid!r} without its configuration's token")
            p.on_ack(str(msg["from"]), int(msg["seq"]), time.monotonic())
            if self.source.sessions:
                self.source.acked(rid, str(msg["from"]), int(msg["seq"]))
            self._acked.add(rid)
            self._due.add(rid)  # room in the window: more may go
        elif op in ("snap", "snap_chunk"):
            self._serve_snapshot(op, rid, epoch, msg)
        elif op in ("snap_files", "snap_data"):
            self._take_snapshot(op, rid, msg)
        else:
            raise ValueError(f"unknown op {op!r}")

    def _apply(self, rid: str) -> None:
        """Apply the batches of ``rid`` read this turn (one WriteBatch) and queue one acknowledgement."""
        f, epoch, batches = self._incoming.pop(rid)
        if self.following.get(rid) is not f:
            return  # unloaded meanwhile
        acked = f.apply(epoch, batches)
        if acked >= 0 and f.primary_endpoint:
            self._send(f.primary_endpoint, {"op": "ack", "range": rid, "epoch": epoch, "from": self.me,
                                            "seq": acked, "token": f.token})

    def _settle(self, flush: bool = True) -> None:
        """End of a drain: apply what each followed range received, then send everything queued."""
        for rid in list(self._incoming):
            self._apply(rid)
        if flush:
            self.flush()

    def _serve_snapshot(self, op: str, rid: str, epoch: int, msg: dict) -> None:
        p = self.primaries.get(rid)
        follower = str(msg["from"])
        f = p.followers.get(follower) if p is not None else None
        if p is None or f is None:
            return  # not primary (yet), or the follower is not in its configuration yet: it asks again
        if msg.get("token", "") != p.token:
            raise ValueError(f"{op} for {rid!r} without its configuration's token")
        if epoch != p.epoch:
            answer: dict = {"op": "snap_data", "range": rid, "id": msg.get("id", ""), "error": "another epoch"}
        elif op == "snap":
            try:
                answer = self.source.start(rid, follower, p.store, p.outbox.log)
                answer.pop("info", None)  # the checkpoint's figures stay here (the follower needs the files)
            except Exception as exc:  # a full disk, a closed store: the follower asks again
                log.warning("snapshot of %s for %s failed: %s", rid, follower, exc)
                return
        else:
            answer = self.source.chunk(rid, follower, str(msg["id"]), str(msg["file"]), int(msg["offset"]))
        self._send(f.endpoint, {**answer, "epoch": p.epoch, "from": self.me, "token": p.token})

    def _take_snapshot(self, op: str, rid: str, msg: dict) -> None:
        pull = self.pulls.get(rid)
        if pull is None or msg["from"] != pull.primary:
            return
        if msg.get("token", "") != pull.record.get("token", ""):
            raise ValueError(f"{op} for {rid!r} without its configuration's token")
        if op == "snap_files":
            pull.on_files(msg, time.monotonic())
            return
        now = time.monotonic()
        if not pull.on_data(msg, now):
            return
        del self.pulls[rid]
        secs = now - pull.started
        log.info("rebuilt %s from %s: %.1f MB in %.1f s (%.1f MB/s)", rid, pull.primary, pull.bytes / 1e6, secs,
                 pull.bytes / 1e6 / max(secs, 1e-3))
        self.on_rebuilt(rid, pull.record)

    def drain(self, limit: int = 256, flush: bool = True) -> None:
        """Handle the messages waiting on the replication endpoint (at most ``limit``): apply the batches, queue
        the acknowledgements, and send them unless ``flush`` is False (the server's loop sends them with its
        next :meth:`pump`, together with the batches of the requests it handles meanwhile)."""
        sock = self.sock
        if sock is None:
            return
        try:
            for _ in range(limit):
                try:
                    frames = protocol.recv_frames(sock, protocol.NOBLOCK)
                except zmq.Again:
                    return
                self._on_message(frames)
                if not protocol.readable(sock):  # cheaper than the zmq.Again a last receive would raise
                    return
        finally:
            self._settle(flush)

    def pump(self, now: float | None = None) -> list[list[bytes]]:
        """Ship new batches, resend what went unacknowledged, say hello where the primary is silent, and send
        everything queued this turn (:meth:`flush`); returns the held replies that may go now."""
        now = time.monotonic() if now is None else now
        tick = now - self._tick >= TICK_S
        if not (tick or self._due or self._acked or self.pulls):
            self.flush()  # the acknowledgements of the turn's drain, if any
            return []  # the server's loop calls this every turn: most turns have nothing to do
        due, self._due = self._due, set()
        if tick:
            self._tick = now
            due.update(self.primaries)
            for rid, f in self.following.items():
                if now - f.heard_at > HELLO_S and f.primary_endpoint:
                    f.heard_at = now
                    self._send(f.primary_endpoint, {"op": "ack", "range": rid, "epoch": f.epoch, "from": self.me,
                                                    "seq": f.applied, "token": f.token})
            if self.source.sessions:
                self.source.expire(now, set(self.primaries))
        for pull in self.pulls.values():
            ask = pull.due(self.me, now)
            if ask is not None and pull.endpoint:
                self._send(pull.endpoint, ask)
        for rid in due:
            p = self.primaries.get(rid)
            if p is None:
                continue
            packed: dict[tuple[int, int], bytes] = {}  # followers at the same position get the same body: pack it once
            for endpoint, batches in p.to_send(now):
                span = (batches[0][0], batches[-1][0])
                body = packed.get(span)
                if body is None:
                    body = packed[span] = protocol.pack({"op": "repl", "range": rid, "epoch": p.epoch, "from": self.me,
                                                         "batches": batches, "token": p.token})
                self._send(endpoint, body)
        self.flush()
        out: list[list[bytes]] = []
        acked, self._acked = self._acked, set()
        for rid in acked:
            p = self.primaries.get(rid)
            if p is not None and p.held:
                out.extend(p.releasable())
        return out

    def marks(self) -> dict[str, tuple[Primary, int]]:
        """Where each range this server is primary of stands now: its last batch written (see :meth:`settled`)."""
        return {rid: (p, p.outbox.seq) for rid, p in self.primaries.items()}

    def settled(self, marks: dict[str, tuple[Primary, int]]) -> bool:
        """True once every batch written before ``marks`` (:meth:`marks`) is committed, so every write accepted
        then has been answered, or its range is no longer this server's primary (its held answers were dropped:
        such a write was never acknowledged)."""
        return all(self.primaries.get(rid) is not p or p.committed >= seq for rid, (p, seq) in marks.items())

    def report(self, now: float) -> dict[str, dict]:
        """Per replicated range: the primary's view (seq, commit point, followers' progress, who lags or
        has caught up) or the follower's position."""
        out = {rid: p.report(now, self.lag_s) for rid, p in self.primaries.items()}
        for rid, f in self.following.items():
            out[rid] = {"seq": f.applied, "primary": f.primary}
        for rid, pull in self.pulls.items():
            out[rid] = pull.progress(now)
        return out
