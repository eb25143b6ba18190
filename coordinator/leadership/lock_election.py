"""Leader election among coordinators: an ``fcntl`` lock per term on the shared data root.

The data root already is the one thing every process trusts (the ranges live there), so the
election uses it and nothing home-made: ``<data-dir>/election/term-<n>`` is the file of term ``n``.

* **Winning term n** is taking ``lockf(LOCK_EX | LOCK_NB)`` on ``term-<n>`` while the file is still
  empty, then writing the term's record into it (JSON: term, endpoint, pub, meta dir, pid, host and
  a ``beat`` counter). The kernel (or the NFS lock manager) lets one process hold the lock, so two
  coordinators never win one term; the record makes a term that was won once stay used, even after
  its holder dies. The winner holds the lock for the rest of its life.
* **The current term** is the highest term file holding a record; its record names the leader.
* **Liveness.** The leader rewrites its record with ``beat + 1`` every ``BEAT_S``. A standby
  takes over (tries term ``n + 1``) when the leader's lock is free (its process died: the kernel
  released the lock — found within one poll) or when the beat has not changed for ``timeout_s``
  by the standby's own clock (a paused or hung leader still holds its lock). Staleness is judged
  from change, never from comparing clocks between hosts.
* **Fencing.** A leader is deposed as soon as ``term-<n+1>`` exists. It checks that (one ``stat``)
  before each loop turn, before every command it sends and after every meta-store write; the term
  also travels with every lease grant and command, and partition servers refuse a lower term than
  the highest they have seen.

``fcntl`` locks belong to a process and are dropped when *any* descriptor of the file is closed in
that process, so the leader never opens its own term file a second time (``read_latest`` reads
it through the held descriptor).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import threading
import time
from dataclasses import asdict, dataclass

ELECTION_DIR = "election"
BASE_META = "coordinator"  # the meta store of term 1 (and of every data root made before elections)
BEAT_S = 0.2  # how often the leader rewrites its record
RECORD_BYTES = 1024  # records are padded to this size and rewritten in place
_TERM_FILE = re.compile(r"^term-(\d{10})$")


@dataclass(frozen=True)
class TermRecord:
    """What the file of a won term says: who leads, where it listens, which meta store it writes."""

    term: int
    endpoint: str
    pub: str
    meta: str  # the meta store directory, relative to the data root
    pid: int = 0
    host: str = ""
    beat: int = 0


def term_path(data_dir: str, term: int) -> str:
    """The file of one term."""
    return os.path.join(data_dir, ELECTION_DIR, f"term-{term:010d}")


def parse_record(raw: bytes) -> TermRecord | None:
    """The record in a term file's bytes; None for an empty, torn or foreign file."""
    text = raw.decode("utf-8", "replace").strip("\x00 \n")
    if not text:
        return None
    try:
        doc = json.loads(text)
        return TermRecord(**{k: doc[k] for k in TermRecord.__dataclass_fields__ if k in doc})
    except (ValueError, TypeError, KeyError):
        return None


def encode_record(rec: TermRecord) -> bytes:
    """A record as the fixed-size bytes written into its term file."""
    data = json.dumps(asdict(rec), sort_keys=True).encode()
    if len(data) > RECORD_BYTES:
        raise ValueError("term record too large")
    return data.ljust(RECORD_BYTES, b" ")


def meta_dir_for(term: int) -> str:
    """The meta store directory a leader of ``term`` copies its state into when the previous one is
    still locked by a paused leader."""
    return BASE_META if term <= 1 else f"{BASE_META}.t{term}"


def should_take_over(now: float, last_change: float, timeout_s: float, holder_alive: bool) -> bool:
    """Whether a standby tries the next term: the holder died, or its beat is stale."""
    return not holder_alive or now - last_change > timeout_s


def is_deposed(term: int, next_term_exists: bool) -> bool:
    """A leader of ``term`` must stop once the file of the next term exists (someone judged it
    dead or stale and tried to take over); a process without a term leads nothing."""
    return term <= 0 or next_term_exists


def stale_meta_dirs(names: list[str], current: str) -> list[str]:
    """Meta store directories (among ``names`` in the data root) that no term uses any more."""
    pat = re.compile(rf"^{re.escape(BASE_META)}(\.t\d+)?(\.tmp)?$")
    return sorted(n for n in names if pat.match(n) and n != current)


def _terms(data_dir: str) -> list[int]:
    try:
        names = os.listdir(os.path.join(data_dir, ELECTION_DIR))
    except FileNotFoundError:
        return []
    return sorted((int(m.group(1)) for n in names if (m := _TERM_FILE.match(n))), reverse=True)


def lock_free(path: str) -> bool:
    """True when no process holds the lock of ``path`` (its holder died). Never call it on a file
    this process holds a lock on: closing the probe's descriptor would drop that lock."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the probe's lock at once
    return True


class Leadership:
    """One coordinator's view of the election: standby until it wins a term, then leader."""

    def __init__(self, data_dir: str, endpoint: str, pub: str, timeout_s: float = 0.8) -> None:
        self.data_dir = data_dir
        self.endpoint = endpoint
        self.pub = pub
        self.timeout_s = timeout_s
        self.term = 0  # the term this process leads (0: standby)
        self.record: TermRecord | None = None  # this leader's own record
        self._fd = -1
        self._seen: tuple[int, int] | None = None  # (term, beat) last observed
        self._seen_at = time.monotonic()
        self._lock = threading.Lock()  # the beat thread and the loop both rewrite the record
        os.makedirs(os.path.join(data_dir, ELECTION_DIR), exist_ok=True)

    # --- reading ------------------------------------------------------------------------------

    def read_latest(self) -> TermRecord | None:
        """The record of the highest term that was won (None before the first election)."""
        for term in _terms(self.data_dir):
            if term == self.term and self._fd >= 0:
                raw = os.pread(self._fd, RECORD_BYTES, 0)
            else:
                try:
                    with open(term_path(self.data_dir, term), "rb") as f:
                        raw = f.read(RECORD_BYTES)
                except FileNotFoundError:
                    continue
            rec = parse_record(raw)
            if rec is not None:
                return rec
        return None

    def leader(self) -> TermRecord | None:
        """The leader as far as this process knows (itself when it leads)."""
        return self.record if self.term else self.read_latest()

    # --- standby ------------------------------------------------------------------------------

    def poll(self, meta_hint: str | None = None) -> TermRecord | None:
        """One standby step: observe the leader and try the next term when it is dead or stale.
        Returns this process's new record when it won, else None."""
        now = time.monotonic()
        cur = self.read_latest()
        if cur is None:
            return self._try(1, BASE_META)
        key = (cur.term, cur.beat)
        if key != self._seen:
            self._seen, self._seen_at = key, now
        alive = not lock_free(term_path(self.data_dir, cur.term))
        if not should_take_over(now, self._seen_at, self.timeout_s, alive):
            return None
        return self._try(cur.term + 1, cur.meta)

    def _try(self, term: int, meta: str) -> TermRecord | None:
        path = term_path(self.data_dir, term)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None  # another standby is taking this term
        if parse_record(os.pread(fd, RECORD_BYTES, 0)) is not None:
            os.close(fd)  # a term won before whose holder died: the next poll tries the one after
            self._seen_at = float("-inf")
            return None
        self._fd, self.term = fd, term
        self.record = TermRecord(term, self.endpoint, self.pub, meta, os.getpid(), socket.gethostname())
        self._write()
        return self.record

    # --- leader -------------------------------------------------------------------------------

    def _write(self) -> None:
        assert self.record is not None
        os.pwrite(self._fd, encode_record(self.record), 0)
        os.fdatasync(self._fd)

    def set_meta(self, meta: str) -> None:
        """Record the meta store directory this leader writes (after copying it there)."""
        with self._lock:
            assert self.record is not None
            self.record = TermRecord(**{**asdict(self.record), "meta": meta})
            self._write()

    def beat(self) -> None:
        """Show standbys this leader is alive (rewrites the record with the next beat)."""
        with self._lock:
            if self.record is None:
                return
            self.record = TermRecord(**{**asdict(self.record), "beat": self.record.beat + 1})
            self._write()

    def deposed(self) -> bool:
        """True once a later term was tried: this leader must stop acting at once."""
        return is_deposed(self.term, os.path.exists(term_path(self.data_dir, self.term + 1)))

    def collect(self, keep: int = 3) -> None:
        """Delete the files of old terms whose holders are gone (all but the last ``keep``)."""
        for term in _terms(self.data_dir)[keep:]:
            path = term_path(self.data_dir, term)
            if term != self.term and lock_free(path):
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass
