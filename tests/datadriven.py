"""Data-driven tests: cases as text with the expected output beside them (CockroachDB's ``datadriven``, toyDB's
goldenscripts), for the pure cores — ``$filter`` parsing, query planning, replica-set policy.

A file under ``tests/testdata/<core>/`` is a list of cases::

    # a comment (kept as is)
    parse
    PartitionKey eq 'p1' and qty ge 2
    ----
    PartitionKey eq 'p1' and qty ge 2
    uses: PartitionKey, qty

A case is a command line (a name and optional ``key=value`` arguments), input lines, ``----``, and the
expected output, which ends at the first blank line (outputs hold none). The core's handler turns (command,
arguments, input) into the output text. ``pytest --rewrite`` writes each file again with the outputs the code
gives now, to be read in review like any other diff.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TESTDATA = Path(__file__).resolve().parent / "testdata"

Handler = Callable[["Case"], str]


@dataclass
class Case:
    """One case of a file: its command, arguments, input lines and expected output."""

    line: int  # where the command line is (1-based)
    command: str
    args: dict[str, str] = field(default_factory=dict)
    input: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    before: list[str] = field(default_factory=list)  # comments and blank lines above the case

    def arg(self, name: str, default: str = "") -> str:
        """An argument's value, or ``default``."""
        return self.args.get(name, default)


def parse(text: str) -> tuple[list[Case], list[str]]:
    """The cases of a file, and the lines after the last one."""
    cases: list[Case] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i, pending = 0, []
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            pending.append(line)
            i += 1
            continue
        name, *words = line.split()
        args = {}
        for w in words:
            key, eq, value = w.partition("=")
            if not eq:
                raise ValueError(f"line {i + 1}: argument {w!r} is not key=value")
            args[key] = value
        case = Case(i + 1, name, args, before=pending)
        pending = []
        i += 1
        while i < len(lines) and lines[i] != "----":
            case.input.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"line {case.line}: {name} has no ---- line")
        i += 1
        while i < len(lines) and lines[i].strip():
            case.expected.append(lines[i])
            i += 1
        cases.append(case)
    return cases, pending


def render(cases: list[Case], tail: list[str]) -> str:
    """The text of a file with these cases."""
    out: list[str] = []
    for c in cases:
        out += c.before
        out.append(" ".join([c.command, *(f"{k}={v}" for k, v in c.args.items())]))
        out += c.input
        out.append("----")
        out += c.expected
    out += tail
    return "\n".join(out) + "\n"


def run(path: Path, handler: Handler, rewrite: bool = False) -> None:
    """Run every case of ``path`` through ``handler``; fail with a diff of each mismatch (or, with
    ``rewrite``, write the outputs into the file)."""
    cases, tail = parse(path.read_text())
    failures = []
    for c in cases:
        got = handler(c).rstrip("\n").split("\n")
        if any(not g.strip() for g in got):
            raise AssertionError(f"{path.name}:{c.line}: an output may hold no blank line: {got}")
        if got != c.expected:
            if rewrite:
                c.expected = got
            else:
                diff = "\n".join(difflib.unified_diff(c.expected, got, "expected", "got", lineterm=""))
                failures.append(f"{path.name}:{c.line}: {c.command} {' '.join(c.input)}\n{diff}")
    if rewrite:
        path.write_text(render(cases, tail))
    assert not failures, "\n\n".join(failures) + "\n\n(pytest --rewrite writes the outputs the code gives now)"


def files(core: str) -> list[Path]:
    """The case files of one core."""
    return sorted((TESTDATA / core).glob("*.txt"))
