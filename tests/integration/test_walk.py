"""The walk of one Azure SDK PUT through the code, traced on a live cluster and kept as text
(``tests/testdata/walk/``), so a change of the request path fails here and shows in review.

Each process of the cluster runs with ``tests/tracing/sitecustomize.py``, which records every entry into a product
file while the test has armed it. The test sends eight ``upsert_entity`` calls and keeps, for each process, the
files entered during every one of them (a file entered during only some is a timer's, not the request's), in the
order of their median rank of first entry (counting only the functions called during every request). The followers of a replicated range are one role: the same files.
``docs/architecture.md`` walks the same files in the same order; a test checks that it still does.
``pytest tests/integration/test_walk.py --rewrite`` writes the outputs the code gives now.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path

import pytest
from azure.data.tables import TableServiceClient

from tests import datadriven
from tests.cluster import Cluster
from tests.datadriven import Case

# A file is on the path when every traced request entered it; on a loaded machine a request can take longer than a
# timer's period (the frontend's 50 ms sweep), which would put the timer's file on the path: runs alone.
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]
TRACING = ROOT / "tests" / "tracing"
REQUESTS = 8  # traced requests; a file is on the path when each of them entered it
ROLES = {"http-frontend": "frontend", "partition-server": "server"}  # process kinds that serve a PUT
ORDER = ("frontend", "primary", "follower")  # the order a PUT reaches them


def _tell(cluster: Cluster, directory: Path, word: str, suffix: str) -> None:
    """Write a word to the control file and wait until every process of the cluster wrote ``<pid><suffix>``."""
    (directory / "control").write_text(word)
    pids = {p["pid"] for p in cluster.refresh()["processes"]}
    deadline = time.monotonic() + 20
    while not pids <= {int(f.name.split(".")[0]) for f in directory.glob(f"[0-9]*{suffix}")}:
        assert time.monotonic() < deadline, f"a process did not answer {word!r}"
        time.sleep(0.01)


def _traces(cluster: Cluster, directory: Path, table: str) -> tuple[list[dict], list[tuple[int, int]]]:
    """Arm every process, send the requests (timed on the host's monotonic clock), collect what each recorded."""
    svc = TableServiceClient.from_connection_string(cluster.connection_string)
    client = svc.create_table(table)
    for i in range(5):  # warm: the first requests fill caches (the route, the URL shape) a steady PUT skips
        client.upsert_entity({"PartitionKey": "p", "RowKey": f"warm{i}", "n": i})
    _tell(cluster, directory, "arm 1", ".armed")
    windows = []
    for i in range(REQUESTS):
        start = time.monotonic_ns()
        client.upsert_entity({"PartitionKey": "p", "RowKey": "r", "n": i})
        windows.append((start, time.monotonic_ns()))
        time.sleep(0.05)
    _tell(cluster, directory, "dump 1", ".json")
    return [json.loads(f.read_text()) for f in directory.glob("[0-9]*.json")], windows


def _ranks(entries: list[list], windows: list[tuple[int, int]]) -> dict[str, list[int]]:
    """For each file entered during every window, its rank of first entry in each window. Only calls of functions
    called during every window count: a timer's (the frontend's sweep, a heartbeat) runs in some windows only, and
    would otherwise put its file first whenever it fired before the request came in."""
    calls = [[(t, name, fn) for t, name, fn, _ in entries if start <= t <= end] for start, end in windows]
    every = set.intersection(*({(name, fn) for _, name, fn in w} for w in calls)) if calls else set()
    per_window = []
    for window in calls:
        first: dict[str, int] = {}
        for t, name, fn in window:
            if (name, fn) in every:
                first.setdefault(name, t)
        per_window.append({name: rank for rank, name in enumerate(sorted(first, key=first.__getitem__))})
    common = set.intersection(*(set(w) for w in per_window)) if per_window else set()
    return {name: [w[name] for w in per_window] for name in common}


def walk(cluster: Cluster, directory: Path) -> list[tuple[str, str]]:
    """The (role, file) pairs of the PUT path: roles in the order the request reaches them (:data:`ORDER`), files
    in the order each role first enters them (the median of their ranks over the requests)."""
    docs, windows = _traces(cluster, directory, "walk")
    status = cluster.status()
    rec = next(r for r in status["ranges"] if r["table"] == "walk")
    primary = rec["primary"]
    by_pid = {p["pid"]: p["id"] for p in cluster.doc["processes"]}
    roles: dict[str, list[dict[str, list[int]]]] = {}
    for doc in docs:
        kind = next((ROLES[a] for a in doc["argv"] if a in ROLES), None)
        if kind is None:
            continue
        ranks = _ranks(doc["entries"], windows)
        if not ranks:
            continue
        role = kind if kind == "frontend" else ("primary" if by_pid.get(doc["pid"]) == primary else "follower")
        roles.setdefault(role, []).append(ranks)
    out = []
    for role in ORDER:
        copies = roles.get(role, [])
        if not copies:
            continue
        names = set.intersection(*(set(c) for c in copies))
        med = {n: statistics.median(r for c in copies for r in c[n]) for n in names}
        out += [(role, n) for n in sorted(names, key=lambda n: (med[n], n))]
    return out


def render(path: list[tuple[str, str]]) -> str:
    """The walk as numbered lines and a count of files."""
    lines = [f"{i:2} {role:9} {name}" for i, (role, name) in enumerate(path, 1)]
    files = {name for _, name in path}
    roles: dict[str, int] = {}
    for role, _ in path:
        roles[role] = roles.get(role, 0) + 1
    lines.append(f"{len(files)} files: " + ", ".join(f"{role} {n}" for role, n in roles.items()))
    return "\n".join(lines)


def _doc_walk() -> list[tuple[str, str]]:
    """The (role, file) rows of the PUT walk in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## An Azure SDK PUT over HTTP", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| \d+ \| (\w+) \| `([^`]+)` \|", section, flags=re.M)


def _case(cluster_factory, tmp_path: Path, extra: list[str]) -> tuple[list[tuple[str, str]], str]:
    directory = tmp_path / "trace"
    directory.mkdir()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TRACING), os.environ.get("PYTHONPATH")])),
           "RANGETABLE_WALK_DIR": str(directory)}
    path = walk(cluster_factory(extra=extra, env=env), directory)
    return path, render(path)


@pytest.mark.slow
def test_put_walk_on_the_default_cluster(cluster_factory, tmp_path: Path, rewrite: bool) -> None:
    path, text = _case(cluster_factory, tmp_path, [])

    def handler(c: Case) -> str:
        assert c.command == "walk" and c.arg("cluster") == "default"
        return text

    datadriven.run(datadriven.TESTDATA / "walk" / "put.txt", handler, rewrite)
    assert _doc_walk() == path, "docs/architecture.md's PUT walk lists other files (or another order) than the " \
                                "traced one in tests/testdata/walk/put.txt: update its table"


@pytest.mark.slow
def test_put_walk_one_copy(cluster_factory, tmp_path: Path, rewrite: bool) -> None:
    _, text = _case(cluster_factory, tmp_path, ["--replicas", "1"])

    def handler(c: Case) -> str:
        assert c.command == "walk" and c.arg("cluster") == "one_copy"
        return text

    datadriven.run(datadriven.TESTDATA / "walk" / "put_one_copy.txt", handler, rewrite)
