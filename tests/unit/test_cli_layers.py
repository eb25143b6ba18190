"""Tools apart from the product: the layers of ``cli/`` and no import cycle between its modules.

Bottom up: product packages (``rangetable``, ``partition_server``, ``coordinator``, ``frontend``) →
``cli`` (entry points, supervisor, admin client, user commands) → ``cli.workload`` → ``cli.bench`` and
``cli.drills`` (not each other) → ``cli.main``, the one module that registers commands. Read from the
AST of every module, imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rangetable", "partition_server", "coordinator", "frontend", "cli")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {_resolve(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {_resolve(f"{node.module}.{a.name}") or _resolve(node.module) for a in node.names}
    return found - {None}


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _layer(module: str) -> tuple[int, str]:
    """(rank, side): an import may only go to a lower rank, or to the same rank on the same side."""
    if module == "cli.main":
        return 4, ""
    for sub, rank in (("cli.bench", 3), ("cli.drills", 3), ("cli.workload", 2)):
        if module == sub or module.startswith(sub + "."):
            return rank, sub
    return (1, "cli") if module.split(".")[0] == "cli" else (0, module.split(".")[0])


def test_no_import_goes_up_a_layer() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        (rank, side) = _layer(module)
        for target in targets:
            t_rank, t_side = _layer(target)
            if t_rank > rank or (t_rank == rank and rank in (1, 3) and t_side != side):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports across a layer the wrong way:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle_inside_cli() -> None:
    cli = {m: {t for t in ts if t.startswith("cli")} for m, ts in GRAPH.items() if m.startswith("cli")}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(cli[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(cli):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)
