"""A profiling hook for the traced walk of one request (``tests/integration/test_walk.py``).

Python imports ``sitecustomize`` at start-up from the path, so a cluster started with this directory on
``PYTHONPATH`` and ``RANGETABLE_WALK_DIR`` set records, in each of its processes, every entry into a file of
the product's packages while the test has armed it: ``(CLOCK_MONOTONIC ns, file)``. The clock is the host's,
so the test orders the entries of all processes against the moments it sent its requests.

The test drives it through one file, ``<RANGETABLE_WALK_DIR>/control``: ``arm N`` starts recording (and
writes ``<pid>.armed``), ``dump N`` stops and writes ``<pid>.json`` (the process's command line and its entries). A thread in each process
reads the file every 2 ms; forked children (the prefork zygote's) start their own. Without the variable this
module does nothing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])
PACKAGES = tuple(f"{ROOT}/{p}/" for p in ("rangetable", "partition_server", "coordinator", "frontend", "cli"))

_armed = False
_last = ""
_entries: list[tuple[int, str, str, int]] = []


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    """Record the entry into a product file: when, which file, which function, which thread (consecutive calls
    into one file count once)."""
    global _last
    if _armed and event == "call":
        code = frame.f_code
        name = code.co_filename
        if name != _last and name.startswith(PACKAGES):
            _last = name
            _entries.append((time.monotonic_ns(), name[len(ROOT) + 1:], code.co_name, threading.get_ident()))


def _dump(directory: str) -> None:
    """Write this process's entries and forget them."""
    doc = {"pid": os.getpid(), "argv": list(getattr(sys, "orig_argv", sys.argv)), "entries": list(_entries)}
    _entries.clear()
    tmp = os.path.join(directory, f".{os.getpid()}.json")
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(directory, f"{os.getpid()}.json"))


def _read(control: str) -> str:
    try:
        with open(control) as f:
            return f.read().strip()
    except OSError:
        return ""


def _watch(directory: str) -> None:
    """Follow the control file: ``arm N`` and ``dump N``, each acted on once."""
    global _armed, _last
    control = os.path.join(directory, "control")
    done = _read(control)  # a process started (or forked) after a word acts on the next one only
    while True:
        word = _read(control)
        if word and word != done:
            done = word
            if word.startswith("arm"):
                _entries.clear()
                _last = ""
                _armed = True
                Path(directory, f"{os.getpid()}.armed").write_text(word)
            elif word.startswith("dump"):
                _armed = False
                _dump(directory)
        time.sleep(0.002)


def _start(directory: str) -> None:
    """The control thread (made before the hook is set for new threads, so it is not itself recorded)."""
    threading.Thread(target=_watch, args=(directory,), name="walk-trace", daemon=True).start()


def _install(directory: str) -> None:
    global _armed
    _armed = False
    _start(directory)
    os.register_at_fork(after_in_child=lambda: (_entries.clear(), _start(directory)))
    sys.setprofile(_profile)
    threading.setprofile(_profile)


if os.environ.get("RANGETABLE_WALK_DIR"):
    _install(os.environ["RANGETABLE_WALK_DIR"])
