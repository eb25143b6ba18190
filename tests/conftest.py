"""Shared fixtures of the suite.

* ``cluster_factory`` — the one way an integration test gets a real cluster: it starts a
  :class:`tests.cluster.Cluster` on ephemeral ports in a fresh temporary data dir and stops it (down, then
  SIGKILL of anything left) when the test module ends, even when the test failed. Tests that share one
  cluster wrap it in a module-scoped fixture; a test that needs a cluster of its own uses it as a context
  manager (``with cluster_factory() as c:``), which stops it at the end of the block.
* Tests under ``tests/unit/`` and ``tests/tools/unit/`` start no process: an autouse guard makes any attempt
  fail loudly.
* Test ids are the same in every pytest-xdist worker, and the longest files are handed out first (their
  seconds in ``tests/file_seconds.json``; ``pytest -n 4 --record-file-seconds`` writes it anew).
* ``@pytest.mark.serial`` tests (wall-clock bounds) are left out of the parallel run and run alone after
  it (see ``make test``).
* The run ends with one line that counts the skipped tests by reason, and says why ``make tools`` could not
  install what they need (``tests/tools.lock``) when it could not.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import Cluster, ClusterFactory, one_copy_named

UNITS = (Path(__file__).resolve().parent / "unit", Path(__file__).resolve().parent / "tools" / "unit")
"""Where tests start no process: the product's unit tests and the tools' (bench, drills, workload)."""
TOOLS_NOTE = Path(__file__).resolve().parents[1] / ".venv" / ".tools.note"  # tests/setup/install.sh's reason
ADDRESS = re.compile(r" at 0x[0-9a-f]+")
FILE_SECONDS = Path(__file__).resolve().parent / "file_seconds.json"
ROOT = Path(__file__).resolve().parents[1]

# The Azure SDK's user agent asks `platform`, which runs `uname -p` once per process and caches it: ask it
# here, before any test, so whether a unit test "started a process" does not depend on the tests before it.
platform.platform()


@pytest.fixture(scope="module")
def cluster_factory(tmp_path_factory: pytest.TempPathFactory,
                    request: pytest.FixtureRequest) -> Iterator[ClusterFactory]:
    """A factory of started clusters; every cluster it made is stopped when the module ends."""
    started: list[Cluster] = []
    stem = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")

    def start(servers: int = 3, frontends: int = 1, extra: list[str] | None = None,
              env: dict[str, str] | None = None, data_dir: str | os.PathLike | None = None,
              balancer: bool = True) -> Cluster:
        """Start a cluster (in a new temporary dir unless ``data_dir`` is given) and wait until it serves: by default
        what `rangetable up` starts (3 servers, 3 replicas); ``--replicas 1`` only for a test named ``one_copy``.
        ``balancer=False``: its balancer is off from the start (a test that splits and moves ranges by hand)."""
        one_copy_named(extra or [], f"{request.module.__name__}::{os.environ.get('PYTEST_CURRENT_TEST', '')}")
        cluster = Cluster(data_dir or tmp_path_factory.mktemp(stem), servers=servers, frontends=frontends,
                          extra=extra, env=env)
        started.append(cluster)
        try:
            cluster.start()
            if not balancer:
                cluster.balancer(False)
            return cluster
        except BaseException:
            cluster.stop()  # half started: nothing may outlive the failure
            raise

    try:
        yield start
    finally:
        errors = []
        for cluster in reversed(started):
            try:
                cluster.stop()
            except Exception as exc:  # stop the others anyway
                errors.append(exc)
        if errors:
            raise errors[0]


def _is_unit(path: Path) -> bool:
    return any(unit in path.parents for unit in UNITS)


def _no_process(*args: object, **kwargs: object) -> None:
    raise AssertionError("a test under tests/unit/ or tests/tools/unit/ must not start a process (move it to the "
                         "integration/ beside it)")


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under tests/unit/ and tests/tools/unit/, starting a subprocess or forking fails the test."""
    if not _is_unit(Path(str(request.node.path)).resolve()):
        return
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _no_process)
    monkeypatch.setattr(os, "fork", _no_process)
    monkeypatch.setattr(os, "posix_spawn", _no_process)
    monkeypatch.setattr(os, "posix_spawnp", _no_process)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Make the ids the same in every xdist worker, and hand out the heaviest files first.

    An id that prints an object's address (``<object object at 0x7f…>``) differs between workers, which
    then refuse to run. Files are kept whole, longest first (seconds measured in a full parallel run, or
    10 s per slow test for a file not measured yet), so ``--dist loadfile`` does not leave one long file for
    the end: the longest-processing-time-first rule (``--no-loadscope-reorder`` keeps xdist to this order
    rather than its own, by count of tests, which put a one-test 30 s file last).
    """
    seen: set[str] = set()
    for item in items:
        if ADDRESS.search(item.nodeid):
            nodeid = base = ADDRESS.sub("", item.nodeid)
            n = 1
            while nodeid in seen:
                n += 1
                nodeid = f"{base[:-1]}-{n}]"
            item._id = type(item._id).parse(nodeid)  # pytest 9 keeps the id as a NodeId
        seen.add(item.nodeid)
    measured: dict[str, float] = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}
    seconds: dict[Path, float] = {}
    for item in items:
        seconds[item.path] = seconds.get(item.path, 0.0) + 10.0 * (item.get_closest_marker("slow") is not None)
    for path in seconds:
        seconds[path] = measured.get(path.relative_to(ROOT).as_posix(), seconds[path])
    items.sort(key=lambda item: (-seconds[item.path], _is_unit(item.path)))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-file-seconds", action="store_true",
                     help=f"after a run without failures, write each file's seconds to {FILE_SECONDS.name}")
    parser.addoption("--rewrite", action="store_true",
                     help="data-driven tests (tests/testdata/) write the outputs the code gives now into their files")


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    """True under ``pytest --rewrite`` (tests/datadriven.py)."""
    return bool(request.config.getoption("rewrite"))


_file_seconds: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add a test phase's duration to its file's (on the xdist controller too: workers forward reports)."""
    _file_seconds[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``--record-file-seconds``, a run that passed rewrites ``tests/file_seconds.json`` (files of 3 s
    or more, longest first)."""
    if session.config.getoption("record_file_seconds") and exitstatus == 0 and not hasattr(session.config,
                                                                                             "workerinput"):
        longest = {f: round(s) for f, s in _file_seconds.most_common() if s >= 3}
        FILE_SECONDS.write_text(json.dumps(longest, indent=0) + "\n")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """After pytest's own summary (``-rs`` lists each skip): one line with the skip count by reason."""
    yield
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if isinstance(r.longrepr, tuple)]
    if not skipped:
        return
    reasons = Counter(str(r.longrepr[2]).removeprefix("Skipped: ") for r in skipped)  # type: ignore[index]
    line = f"{len(skipped)} skipped: " + "; ".join(f"{n} x {why}" for why, n in reasons.most_common())
    if TOOLS_NOTE.exists():
        line += f" (make tools: {TOOLS_NOTE.read_text().strip()})"
    terminalreporter.write_line(line, yellow=True, bold=True)
