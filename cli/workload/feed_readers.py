"""Readers of a drill table's change feed, restarted and killed while the drill's faults go on.

:class:`FeedWatch` runs them beside a drill's verifying workload and, at the end, checks what each one got
against the workload's history (:func:`cli.workload.verify.feed.check_feed`):

- a **reader thread** follows the feed with ``read_changes(follow=True)``, keeps its cursor after each page
  and, at random pages, drops its client and resumes from that cursor with a fresh one;
- a **reader process** (``python -m cli.workload.feed_readers``) does the same and writes each page as one
  line of a journal file — its records, its resolved time and the cursor after it, so the cursor is saved
  with what it read, as a consumer stores the position it applied with what it wrote. The watch SIGKILLs it
  at random times and starts it again; it resumes from the cursor of the journal's last complete line (a
  line cut short by the kill is dropped). That is a real reader death.

Every record keeps when it was got on the history's clock, and every restart and kill is an event on it, so
a failure's window lists the readers' own deaths beside the drill's faults.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable
from datetime import UTC, datetime
from typing import Any

from cli.workload.verify.feed import FeedRecord, ReaderLog, check_feed
from cli.workload.verify.history import Op
from rangetable.client import TableServiceClient
from rangetable.client.changes import ChangePage
from rangetable.edm import datetime_to_ticks
from rangetable.errors import TableError

POLL_S = 0.2  # between pages at the live edge
RESTART_P = 0.05  # a reader thread drops its client after a page with this probability
KILL_EVERY_S = (2.0, 6.0)  # the reader process is killed after a uniform draw from this range
TIMEOUT_S = 3.0


def page_records(page: ChangePage, seen: float) -> list[FeedRecord]:
    """The records of a page, as the checker takes them (each record's exact Timestamp from its position)."""
    return [FeedRecord((r.partition_key, r.row_key), r.kind, None if r.entity is None else r.entity.get("v"),
                       r.position[0], r.cursor, seen) for r in page.records]


def resolved_bounds(page: ChangePage) -> tuple[int, int] | None:
    """The page's resolved time in ticks as ``(at least, at most)`` — exact, so both are the same — or None when
    the page is not at the live edge."""
    t = page.resolved_ticks
    return None if t is None else (t, t)


def follow(data_dir: str, table: str, cursor: str | None, poll: float) -> Generator[ChangePage, None, None]:
    """The pages of the feed from ``cursor`` (None: the beginning) with a fresh client of the cluster in
    ``data_dir``, one every ``poll`` s at most at the live edge (a reader keeps up without a busy loop)."""
    with TableServiceClient.from_cluster(data_dir, timeout=TIMEOUT_S) as service:  # closed when dropped
        client = service.get_table_client(table)
        yield from client.read_changes(cursor=cursor, follow=True, poll_interval=poll).by_page()  # it paces itself


class ReaderThread(threading.Thread):
    """Follows the feed in this process, resuming from its saved cursor with a fresh client at random pages
    and after errors."""

    def __init__(self, name: str, data_dir: str, table: str, clock: Callable[[], float], seed: int,
                 note: Callable[[str], None], poll: float = POLL_S, restart_p: float = RESTART_P) -> None:
        super().__init__(daemon=True, name=name)
        self.data_dir, self.table, self.clock, self.note = data_dir, table, clock, note
        self.rng = random.Random(seed)
        self.poll, self.restart_p = poll, restart_p
        self.log = ReaderLog(name)
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self) -> None:
        """Read until stopped."""
        cursor: str | None = None
        while not self.stop.is_set():
            pages = follow(self.data_dir, self.table, cursor, self.poll)
            try:
                for page in pages:
                    with self.lock:
                        self.log.add_page(page_records(page, self.clock()), resolved_bounds(page),
                                          self.clock())
                    cursor = page.cursor  # saved: a restart resumes here
                    if self.stop.is_set() or self.rng.random() < self.restart_p:
                        break
            except Exception as exc:  # noqa: BLE001 - a reader that fails starts again from its cursor
                code = exc.error_code if isinstance(exc, TableError) else type(exc).__name__
                with self.lock:
                    self.log.errors[code] = self.log.errors.get(code, 0) + 1
                self.stop.wait(0.2)
            finally:
                pages.close()  # drops the client
            if not self.stop.is_set():
                self.log.restarts += 1
                self.note(f"feed reader {self.name} dropped its client and resumed from its cursor")

    def last_resolved(self) -> int | None:
        """The highest resolved time got so far."""
        with self.lock:
            return self.log.last_resolved


# --- the reader process -------------------------------------------------------------------------------


def resume(journal: str) -> str | None:
    """The cursor of the journal's last complete line (None: no line yet), after dropping any line a kill
    cut short."""
    try:
        with open(journal, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    end = data.rfind(b"\n") + 1
    if end < len(data):
        os.truncate(journal, end)
    if not end:
        return None
    last = data[data.rfind(b"\n", 0, end - 1) + 1:end]
    return json.loads(last)["c"]


def reader_main(argv: list[str]) -> int:
    """``python -m cli.workload.feed_readers DATA_DIR TABLE T0 JOURNAL [POLL]``: follow the feed of the cluster
    in DATA_DIR from the journal's last cursor, appending one line per page; ``T0`` is the history clock's origin
    (monotonic)."""
    data_dir, table, t0, journal = argv[0], argv[1], float(argv[2]), argv[3]
    poll = float(argv[4]) if len(argv) > 4 else POLL_S
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cursor = resume(journal)
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    last_res: tuple[int, int] | None = None
    parent = os.getppid()
    while True:
        try:
            for page in follow(data_dir, table, cursor, poll):
                if os.getppid() != parent:
                    return 0  # the drill is gone: no reader outlives it
                seen = time.monotonic() - t0
                res = resolved_bounds(page)
                if page.records or res != last_res:
                    line = {"r": [x.to_list() for x in page_records(page, seen)], "res": res, "c": page.cursor,
                            "t": round(seen, 4)}
                    data = (json.dumps(line) + "\n").encode()
                    while data:  # one line: the records and the cursor after them, saved together
                        data = data[os.write(fd, data):]
                    last_res = res
                cursor = page.cursor
        except Exception as exc:  # noqa: BLE001 - a reader that fails starts again from its cursor
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            time.sleep(0.2)


class ReaderProcess:
    """A reader in its own process, SIGKILLed and started again by the watch; its journal is its log."""

    def __init__(self, name: str, data_dir: str, table: str, t0: float, journal: str,
                 note: Callable[[str], None], poll: float = POLL_S) -> None:
        self.name, self.journal, self.note = name, journal, note
        self.argv = [sys.executable, "-m", "cli.workload.feed_readers", os.path.abspath(data_dir), table, repr(t0),
                     journal, str(poll)]
        self.proc: subprocess.Popen | None = None
        self.log = ReaderLog(name)
        self._offset = 0
        if os.path.exists(journal):
            os.unlink(journal)  # a journal an earlier run kept: this reader starts from the beginning
        self._err = open(journal + ".err", "wb")  # noqa: SIM115 - kept open across restarts, closed by stop()

    def start(self) -> None:
        """Start the process (again)."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err,
                                     cwd=root)

    def kill(self) -> None:
        """SIGKILL it (a reader death) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self.log.kills += 1
            self.note(f"kill -9 feed reader {self.name} (pid {self.proc.pid})")

    def stop(self) -> None:
        """Stop it for good (SIGTERM, then SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._err.closed:
            self._err.close()

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def refresh(self) -> ReaderLog:
        """The log with the journal's new complete lines."""
        try:
            with open(self.journal, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return self.log
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            page = json.loads(line)
            self.log.add_page([FeedRecord.from_list(x) for x in page["r"]], page["res"], page["t"])
        self._offset += end
        return self.log

    def last_resolved(self) -> int | None:
        """The highest resolved time in the journal so far."""
        return self.refresh().last_resolved


class FeedWatch:
    """The feed readers of one drill: ``threads`` reader threads and ``processes`` reader processes, started
    by :meth:`start`, stopped by :meth:`finish` once each got a resolved time past the last acknowledged
    write; :meth:`verdict` checks them."""

    def __init__(self, data_dir: str, table: str, t0: float, work_dir: str, *, seed: int = 0, threads: int = 1,
                 processes: int = 1, kill_every: tuple[float, float] = KILL_EVERY_S, poll: float = POLL_S) -> None:
        self.t0 = t0
        self.rng = random.Random(seed)
        self.kill_every = kill_every
        self.events: list[dict[str, Any]] = []  # the readers' restarts and kills, as faults on the history clock
        self._lock = threading.Lock()
        os.makedirs(work_dir, exist_ok=True)
        self.threads = [ReaderThread(f"thread-{i + 1}", data_dir, table, self.clock, seed * 100 + i, self._note, poll)
                        for i in range(threads)]
        self.processes = [ReaderProcess(f"process-{i + 1}", data_dir, table, t0,
                                        os.path.join(work_dir, f"feed-{table}-{i + 1}.jsonl"), self._note, poll)
                          for i in range(processes)]
        self.stop = threading.Event()
        self._killer = threading.Thread(target=self._kill_loop, daemon=True, name="feed-reader-killer")
        self.caught_up: bool | None = None
        self.until: int | None = None

    def clock(self) -> float:
        """The history's clock."""
        return time.monotonic() - self.t0

    def _note(self, what: str) -> None:
        with self._lock:
            self.events.append({"t": round(self.clock(), 3), "until": None, "fault": "feed-reader", "what": what})

    def start(self) -> None:
        """Start every reader and the killing of the processes."""
        for t in self.threads:
            t.start()
        for p in self.processes:
            p.start()
        self._killer.start()

    def _kill_loop(self) -> None:
        while not self.stop.wait(self.rng.uniform(*self.kill_every)):
            for p in self.processes:
                p.kill()
                self.stop.wait(self.rng.uniform(0.0, 0.5))
                p.start()

    def finish(self, last_ack_ticks: int, timeout: float = 30.0) -> None:
        """Stop killing, wait (up to ``timeout`` s) until every reader got a resolved time past the last
        acknowledged write (``last_ack_ticks``, and the wall clock now for the deletes, whose answer has no
        Timestamp), then stop every reader."""
        self.stop.set()
        self._killer.join(timeout=10)
        self.until = max(last_ack_ticks, datetime_to_ticks(datetime.now(UTC)))
        for p in self.processes:
            if not p.alive():
                p.start()
        deadline = time.monotonic() + timeout
        readers: list[ReaderThread | ReaderProcess] = [*self.threads, *self.processes]
        while time.monotonic() < deadline and not self._caught_up(readers):
            time.sleep(0.2)
        self.caught_up = self._caught_up(readers)
        self.close()

    def _caught_up(self, readers: list[ReaderThread | ReaderProcess]) -> bool:
        assert self.until is not None
        return all((r.last_resolved() or 0) >= self.until for r in readers)

    def close(self) -> None:
        """Stop every reader and the killing (again: harmless), so no reader process outlives the drill."""
        self.stop.set()
        if self._killer.is_alive():
            self._killer.join(timeout=10)
        for t in self.threads:
            t.stop.set()
        for p in self.processes:
            p.stop()
        for t in self.threads:
            if t.is_alive():
                t.join(timeout=10)

    def logs(self) -> list[ReaderLog]:
        """What every reader got."""
        return [t.log for t in self.threads] + [p.refresh() for p in self.processes]

    def verdict(self, history: list[Op], ignore: Iterable[str] = ()) -> dict[str, Any]:
        """The feed check of every reader against ``history`` (after :meth:`finish`): the counts,
        restarts and kills, the failures and the readers' events, JSON-ready."""
        logs = self.logs()
        result = check_feed(history, logs, until=self.until, ignore=ignore)
        errors: dict[str, int] = {}
        for log in logs:
            for k, v in log.errors.items():
                errors[k] = errors.get(k, 0) + v
        journals = [p.journal for p in self.processes]
        if result.ok:  # kept only to look into a failure, as the workload's history
            for path in journals:
                for f in (path, path + ".err"):
                    if os.path.exists(f):
                        os.unlink(f)
        return {**result.to_dict(), "restarts": sum(x.restarts for x in logs), "kills": sum(x.kills for x in logs),
                "resolved_times": sum(len(x.resolved) for x in logs), "errors": errors, "events": list(self.events),
                "journals": [] if result.ok else journals}


if __name__ == "__main__":
    sys.exit(reader_main(sys.argv[1:]))
