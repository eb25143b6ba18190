"""Primary-backup replication of one range: the primary's and a follower's state, without sockets.

The protocol is Vertical Paxos II's shape (Lamport, Malkhi, Zhou 2009), as WAS's stream layer and Kafka's
in-sync replicas use it: a configuration master — the coordinator, itself elected through a file lock or
etcd — numbers each range's configurations by *epoch* and records its replicas, its primary and its
*in-sync set*. Within one configuration a plain primary-backup protocol runs:

* the primary orders the writes: each RocksDB WriteBatch it writes gets the next sequence number (stored
  with it, ``META_REPL``) and is shipped to every follower (:class:`Outbox`, many batches in flight);
* a follower applies the batches in sequence order to its own store (WAL written, fsynced under
  ``--sync``) and acknowledges the highest one it holds; a gap or a restart makes it acknowledge what it
  has, and the primary sends again from there out of its :class:`~partition_server.store.replica_log.ReplicaLog`;
* a batch is *committed* once every member of the in-sync set holds it, and no answer that depends on a
  batch — a write's acknowledgement, or a read that saw it — leaves the primary before it is committed
  (:meth:`Primary.hold`). So every acknowledged write, and every value a client read, is on every
  in-sync replica's disk;
* only the coordinator changes the in-sync set: the primary reports a follower that lags longer than
  ``lag_s`` (:meth:`Primary.lagging`) and one that has caught up (:meth:`Primary.joining`); a caught-up
  follower counts towards commits from the moment it is reported, so it holds every batch committed
  after the coordinator may have recorded it. Below ``min_insync`` members the range refuses writes.

When the primary dies the coordinator waits out its lease, *seals* the in-sync followers at a new epoch
(they refuse the old primary from then on and say how far they got), and promotes the one that got
furthest: any in-sync replica holds every committed batch, the furthest holds every batch any of them
has, so the others' logs are prefixes of its log and they catch up from it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import rocksdict

from partition_server.store.keys import META_REPL
from partition_server.store.range_store import RangeStore
from partition_server.store.replica_log import ReplicaLog, decode_ops, encode_ops, pack_position
from partition_server.store.tee import Ops

RESEND_S = 0.3  # a follower that acknowledged nothing for this long while batches were outstanding is sent them again
MAX_IN_FLIGHT = 4096  # batches sent to one follower and not yet acknowledged
SEND_BYTES = 1 << 20  # a replication message carries about this many bytes of batches at most


class Outbox:
    """The primary's side of a range's log: stamps each batch with the next sequence number as the store
    writes it, and keeps it (with the time it was written) until the followers hold it.

    Called by whatever thread writes the store, under the store's lock (:class:`~partition_server.store.tee.Tee`)."""

    def __init__(self, epoch: int, log: ReplicaLog) -> None:
        self.epoch = epoch
        self.log = log
        self.written: deque[tuple[int, float]] = deque()  # (seq, when written) of batches some follower may lack

    @property
    def seq(self) -> int:
        """The last sequence number handed out."""
        return self.log.last_seq

    def stamp(self, wb: rocksdict.WriteBatch) -> None:
        """Put the next position into ``wb``."""
        wb.put(META_REPL, pack_position(self.epoch, self.log.last_seq + 1))

    def shipped(self, ops: Ops) -> None:
        """Keep the batch just written for the followers."""
        seq = self.log.last_seq + 1
        self.log.append(seq, encode_ops(ops))
        self.written.append((seq, time.monotonic()))

    def age(self, acked: int, now: float) -> float:
        """How long the oldest batch after ``acked`` has waited (0 when there is none)."""
        for seq, t in self.written:
            if seq > acked:
                return now - t
        return 0.0

    def forget_through(self, seq: int) -> None:
        """Every follower holds the batches up to ``seq``: stop timing them."""
        written = self.written
        while written and written[0][0] <= seq:
            written.popleft()


@dataclass
class Progress:
    """The primary's view of one follower."""

    server: str
    endpoint: str  # its replication endpoint
    acked: int = -1  # the highest batch it holds (-1: not heard from yet)
    sent: int = -1  # the highest batch sent to it
    progress_at: float = field(default_factory=time.monotonic)  # when ``acked`` last moved
    diverged: bool = False  # it holds batches this primary never wrote: it must be rebuilt
    behind_log: bool = False  # it needs batches the log no longer has: it must be rebuilt
    regressed: bool = False  # in sync, it said it holds less than it had acknowledged (a lost disk or WAL tail)


class Primary:
    """A range this server is primary of: its followers' progress, the commit point and the answers
    held until it passes them."""

    def __init__(self, rid: str, epoch: int, store: RangeStore, log: ReplicaLog, peers: dict[str, str],
                 insync: list[str], me: str, min_insync: int, token: str = "") -> None:
        self.rid = rid
        self.epoch = epoch
        self.token = token  # the configuration's token: acknowledgements without it are refused
        self.store = store
        self.outbox = Outbox(epoch, log)
        self.me = me
        self.min_insync = min_insync
        self.followers: dict[str, Progress] = {}
        self.insync: set[str] = set()
        self.joining: set[str] = set()  # caught up and reported, not yet in the coordinator's in-sync set
        self.held: deque[tuple[int, list[bytes]]] = deque()  # (batch it depends on, reply frames)
        self.committed = -1
        self.configure(peers, insync, [])
        store.reload_meta()  # a promoted follower's batches wrote META_TS behind the store's back
        store.replicate(self.outbox)

    # --- configuration ------------------------------------------------------------------------

    def configure(self, peers: dict[str, str], insync: list[str], dropped: list[str]) -> None:
        """Take a configuration of the same epoch: the replicas' endpoints and the in-sync set."""
        for sid, endpoint in peers.items():
            if sid == self.me:
                continue
            cur = self.followers.get(sid)
            if cur is None:
                self.followers[sid] = Progress(sid, endpoint)
            elif not endpoint or not cur.endpoint:
                # "": a coordinator that just took over has not heard from it yet (keep its progress and the
                # endpoint known), or the endpoint is learned now (nothing to start over from).
                cur.endpoint = endpoint or cur.endpoint
            elif cur.endpoint != endpoint:  # it restarted elsewhere: start over with it
                self.followers[sid] = Progress(sid, endpoint)
        for sid in [s for s in self.followers if s not in peers]:
            del self.followers[sid]
        self.insync = {s for s in insync if s != self.me}
        self.joining = {s for s in self.joining if s in self.followers and s not in self.insync and s not in dropped}
        for sid, f in self.followers.items():
            if sid not in self.insync:
                f.regressed = False  # out of the in-sync set now: it rejoins once caught up
        self._recommit()

    def acking(self) -> set[str]:
        """The followers every batch must reach before it is committed."""
        return self.insync | self.joining

    def writable(self) -> bool:
        """True when enough replicas are in sync to take a write (``--min-insync``)."""
        return 1 + len(self.insync) >= self.min_insync

    # --- acknowledgements ---------------------------------------------------------------------

    def on_ack(self, server: str, seq: int, now: float) -> None:
        """A follower holds every batch up to ``seq``."""
        f = self.followers.get(server)
        if f is None:
            return
        if seq > self.outbox.seq:
            f.diverged = True  # batches of a deposed primary this one never had
            return
        f.diverged = False
        if seq < f.acked and server in self.insync:
            f.regressed = True  # it lost batches it had acknowledged: it may not stay in the in-sync set
        if seq > f.acked:
            f.progress_at = now
        elif seq < f.acked or f.sent > seq and now - f.progress_at > RESEND_S:
            f.sent = seq  # it restarted, or lost batches on the way: send again from what it has
        f.acked = seq
        f.sent = max(f.sent, seq)
        if f.behind_log and self.outbox.log.reaches(seq):
            f.behind_log = False
        self._recommit()

    def _recommit(self) -> None:
        acked = [self.followers[s].acked if s in self.followers else -1 for s in self.acking()]
        self.committed = min([self.outbox.seq, *acked])
        self.outbox.log.needed_after = self.committed  # the ring budget keeps what in-sync followers lack
        heard = [f.acked for f in self.followers.values() if f.acked >= 0]
        if heard:
            self.outbox.forget_through(min(heard))

    # --- answers held until committed ---------------------------------------------------------

    def pending(self) -> bool:
        """True while some batch is not yet committed (an answer now would depend on it)."""
        return self.committed < self.outbox.seq

    def hold(self, frames: list[bytes]) -> None:
        """Keep a reply until every batch written so far is committed."""
        self.held.append((self.outbox.seq, frames))

    def releasable(self) -> list[list[bytes]]:
        """The held replies whose batches are committed now, in the order they were held."""
        out = []
        held, committed = self.held, self.committed
        while held and held[0][0] <= committed:
            out.append(held.popleft()[1])
        return out

    # --- sending ------------------------------------------------------------------------------

    def to_send(self, now: float) -> list[tuple[str, list[tuple[int, bytes]]]]:
        """(endpoint, batches) for each follower that has batches due: new ones, or outstanding ones
        again after :data:`RESEND_S` without an acknowledgement."""
        out = []
        log = self.outbox.log
        for f in self.followers.values():
            if f.acked < 0 or f.diverged:
                continue  # not heard from yet: its hello says where to start
            if f.sent > f.acked and now - f.progress_at > RESEND_S:
                f.sent = f.acked
                f.progress_at = now  # once per RESEND_S
            if f.sent >= log.last_seq or f.sent - f.acked >= MAX_IN_FLIGHT:
                continue
            if not log.reaches(f.sent):
                f.behind_log = True
                continue
            batches = log.since(f.sent, SEND_BYTES)
            if batches:
                f.sent = batches[-1][0]
                out.append((f.endpoint, batches))
        return out

    def lagging(self, now: float, lag_s: float) -> list[str]:
        """In-sync (or joining) followers whose oldest missing batch is older than ``lag_s``, that cannot
        catch up from the log, that lost batches they had acknowledged (so the in-sync set keeps meaning "holds
        every committed batch"), or that have not said where they stand within ``lag_s`` of this primary's
        start (a new primary holds every answer until its followers confirm its last batch)."""
        return sorted(s for s in self.acking() if (f := self.followers.get(s)) is None or f.diverged or f.behind_log
                      or f.regressed or self.outbox.age(f.acked, now) > lag_s
                      or (f.acked < 0 and now - f.progress_at > lag_s))

    def sync_lag(self, now: float) -> float:
        """How far the in-sync (and joining) followers are behind, in seconds: the age of the oldest batch
        one of them lacks (0 when they hold everything, or when there is none: the ``-secondary`` endpoint
        then reads this primary). A follower not heard from since this primary started counts from then."""
        lag = 0.0
        for s in self.acking():
            f = self.followers.get(s)
            if f is None:
                continue
            lag = max(lag, now - f.progress_at if f.acked < 0 else self.outbox.age(f.acked, now))
        return lag

    def caught_up(self) -> list[str]:
        """Followers outside the in-sync set that hold every batch: from now on they count towards
        commits, and the coordinator is asked to add them (:attr:`joining`)."""
        seq = self.outbox.seq
        new = sorted(s for s, f in self.followers.items()
                     if s not in self.insync and s not in self.joining and f.acked == seq and not f.diverged)
        self.joining.update(new)
        return sorted(self.joining)

    def report(self, now: float, lag_s: float) -> dict:
        """This range's replication state for the heartbeat."""
        out: dict = {"seq": self.outbox.seq, "committed": self.committed,
                     "acked": {s: f.acked for s, f in self.followers.items()},
                     "sync_lag": round(self.sync_lag(now), 4)}
        lagging = self.lagging(now, lag_s)
        if lagging:
            out["lagging"] = lagging
        joining = self.caught_up()
        if joining:
            out["joining"] = joining
        rebuild = sorted(s for s, f in self.followers.items() if f.diverged or f.behind_log)
        if rebuild:
            out["rebuild"] = rebuild
        return out

    def close(self) -> list[list[bytes]]:
        """Stop shipping (the range is unloaded); the held replies are dropped (their clients retry)."""
        self.store.replicate(None)
        self.held.clear()
        return []


class Following:
    """A range this server follows: the primary it takes batches from and how far it got."""

    def __init__(self, rid: str, epoch: int, store: RangeStore, log: ReplicaLog, primary: str,
                 primary_endpoint: str, token: str = "") -> None:
        self.rid = rid
        self.epoch = epoch
        self.token = token  # the configuration's token: batches without it are refused
        self.store = store
        self.log = log
        self.primary = primary
        self.primary_endpoint = primary_endpoint
        self.applied = log.last_seq
        self.heard_at = float("-inf")  # when the primary last sent something
        self.sealed = epoch  # batches of an epoch below this are refused (a seal raises it)

    def apply(self, epoch: int, batches: list[tuple[int, bytes]]) -> int:
        """Apply the batches that follow what this replica holds, in order, stopping at a gap or at a batch
        that does not decode; returns the highest batch held now (what to acknowledge). Batches of another
        epoch are refused (-1). Batches may come in any order and more than once (a resend, a duplicate): they
        are taken in sequence order, each once.

        Several consecutive batches are written as ONE RocksDB WriteBatch (one WAL write) with the position of
        the last one (:meth:`RangeStore.apply_batch`): all or none of them survive a crash, and ``META_REPL``
        names exactly what the store holds."""
        if epoch != self.epoch or epoch < self.sealed:
            return -1
        self.heard_at = time.monotonic()
        if len(batches) > 1 and any(batches[i][0] >= batches[i + 1][0] for i in range(len(batches) - 1)):
            batches = sorted(dict(batches).items())  # reordered or duplicated on the way: each seq once, in order
        ready: list[tuple[int, bytes, Ops]] = []
        nxt = self.applied + 1
        for seq, blob in batches:
            if seq < nxt:
                continue
            if seq != nxt:
                break
            try:
                ops = decode_ops(blob)
            except ValueError:
                break  # never half-applied: a batch is written only once decoded
            ready.append((seq, blob, ops))
            nxt += 1
        if not ready:
            return self.applied
        # every ready batch in one WriteBatch, the last position with them
        self.store.apply_batch([op for _, _, ops in ready for op in ops], epoch, ready[-1][0])
        log = self.log
        for seq, blob, _ in ready:
            log.append(seq, blob)
        self.applied = ready[-1][0]
        return self.applied
