"""The supervisor's restart back-off: a crash loop backs off, a process killed after running fine does not."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from cli.cluster import supervisor as sv


@dataclass
class FakeProc:
    pid: int
    returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


def _supervisor(tmp_path, monkeypatch: pytest.MonkeyPatch) -> tuple[sv.Supervisor, sv.Child, list[float]]:
    pids = iter(range(100, 200))

    def start(self: sv.Child, prefork: object = None) -> None:
        self.proc = FakeProc(next(pids))  # type: ignore[assignment]
        self.started = time.monotonic()

    monkeypatch.setattr(sv.Child, "start", start)
    sup = sv.Supervisor.__new__(sv.Supervisor)
    child = sv.Child("frontend", "fe-1", [], str(tmp_path / "fe-1.log"))
    child.start()
    said: list[str] = []
    sup.children, sup.stopping, sup.echo, sup.prefork = [child], False, said.append, None  # type: ignore[assignment]
    sup.spec = SimpleNamespace(restart=True)  # type: ignore[assignment]
    sup.data_dir = str(tmp_path)
    delays: list[float] = []
    return sup, child, delays


def _die_and_restart(sup: sv.Supervisor, child: sv.Child, ran_s: float, delays: list[float]) -> None:
    child.started = time.monotonic() - ran_s
    child.proc.returncode = -9  # type: ignore[union-attr]
    sup.poll()
    delays.append(round(child.due - time.monotonic(), 1))
    child.due = time.monotonic()  # time passes
    sup.poll()
    assert child.proc.returncode is None  # type: ignore[union-attr]


def test_a_crash_loop_backs_off_but_a_killed_process_that_ran_fine_comes_back_at_once(tmp_path, monkeypatch) -> None:
    sup, child, delays = _supervisor(tmp_path, monkeypatch)
    for _ in range(6):
        _die_and_restart(sup, child, 0.2, delays)  # dies right after starting: a crash loop
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    delays.clear()
    for _ in range(4):
        _die_and_restart(sup, child, sv.STABLE_AFTER_S + 1, delays)  # killed every few seconds (the chaos drill)
    assert delays == [0.5, 0.5, 0.5, 0.5]


def test_a_netsplit_host_that_is_cut_is_not_restarted_and_stays_listed(tmp_path, monkeypatch) -> None:
    """The netsplit drill's supervisor leaves a cut host's dead process alone, and never hides it from the list of
    children meanwhile (a fault reading a cut host's child from another thread found none: StopIteration in CI)."""
    from cli.drills.netsplit_hosts import NetnsSupervisor

    sup, child, _ = _supervisor(tmp_path, monkeypatch)
    sup.__class__ = NetnsSupervisor
    sup.held = {"fe-1"}  # type: ignore[attr-defined]
    child.proc.returncode = -9  # type: ignore[union-attr]
    listed = sup.children
    sup.poll()
    assert child.due == 0.0 and child.proc.returncode == -9  # type: ignore[union-attr]  # left alone
    assert sup.children is listed and sup.child("fe-1") is child  # type: ignore[attr-defined]
    sup.held = set()  # type: ignore[attr-defined]
    sup.poll()
    assert child.due > 0.0  # healed: restarted after its back-off
