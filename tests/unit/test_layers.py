"""The package graph is a DAG whose arrows point down the layers, and no two modules import each other.

Layers, bottom up (``docs/architecture.md``, "Layers"):

    rangetable                                   core model, wire protocol, native client, server kernel; inside
                                                 rangetable, the top-level modules (the core), then the
                                                 sub-packages client (the native clients) and kernel (what only
                                                 the server processes use), then the public face (its
                                                 __init__, rangetable.aio)
    partition_server   coordinator   frontend    the three server processes (no arrows among them); inside
                                                 coordinator, the sub-packages map, replicas and etcd, then
                                                 balancer and leadership, meta, standby and state, then control,
                                                 below its top-level modules; inside partition_server, store, then
                                                 replication; inside frontend, the top-level modules (routing,
                                                 metrics), then auth and native, then http
    cli                                          process entry points, supervisor, admin client, commands;
                                                 inside cli, the top-level modules (options, the coordinator
                                                 client, cluster.json, the dashboard), then cluster and
                                                 commands (no arrows between them)
    cli.workload                                 workload and load generators, verifiers, simulated servers
    cli.bench          cli.drills                benchmarks and drills (no arrows between them)
    cli.main                                     registers every command

Every ``import`` counts, also one inside a function: a lazy import is still an arrow. Run this file as a
script (``python -m tests.unit.test_layers``) to print the graph.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rangetable", "partition_server", "coordinator", "frontend", "cli")

# component -> its layer, (layer, rank inside its package); a component may import its own modules and every
# lower layer's, never a peer's on the same layer. Inside a package, its top-level modules and each sub-package
# have a rank, and an arrow points to a lower rank only (so two sub-packages of one rank never import each
# other); no other package of the same layer may import any part of it. In coordinator and partition_server the
# sub-packages are libraries of the top-level modules (the process around them) and rank below them; in
# rangetable, frontend and cli the top-level modules are the base the sub-packages share (rangetable's core, the
# frontend's map cache and metrics, the CLI's options and coordinator client), and the sub-packages built on it
# rank above it. A lower layer may be imported whole, sub-packages included (every server process
# imports rangetable.kernel).
LAYERS: dict[str, tuple[int, int]] = {
    "rangetable": (0, 0),  # the core: model, values, keys, filter, planner, errors, wire protocol, CURVE, config
    "rangetable.client": (0, 1),  # the native clients, blocking and asyncio, and export/import
    "rangetable.kernel": (0, 1),  # what only the server processes use: RocksDB opener, process, metrics, ...
    "rangetable.__init__": (0, 2), "rangetable.aio": (0, 2),  # the public names: re-exports of the client
    "partition_server": (1, 9), "coordinator": (1, 9),
    "frontend": (1, 0),  # its top-level modules: the map cache and routing, the answers' metrics
    "frontend.auth": (1, 1),  # authentication of REST requests: SharedKey, SAS, bearer tokens
    "frontend.native": (1, 1),  # the request logic over the native protocol, its drivers and the ZeroMQ loop
    "frontend.http": (1, 2),  # the Azure Table REST app over the native request logic's asyncio driver
    "coordinator.map": (1, 0), "coordinator.replicas": (1, 0),  # the partition map and the replica-set policy
    "coordinator.balancer": (1, 1),  # the balancer's pure policy (its process side: coordinator.control.balancer_loop)
    "coordinator.etcd": (1, 0),  # the etcd client and the pure parts of a watch
    "coordinator.leadership": (1, 1),  # elections: a lock per term on the data root, or etcd
    "coordinator.meta": (1, 2),  # the durable meta store: RocksDB, or etcd fenced by the term
    "coordinator.standby": (1, 3),  # a standby's warm copy of the meta store (RocksDB secondary, etcd watch)
    "coordinator.state": (1, 3),  # the state objects: the map service, the server registry, the event log
    "coordinator.control": (1, 4),  # the controller, the operations and replica jobs it runs, the balancer loop
    "partition_server.store": (1, 0),  # the range store: RocksDB, its write path, its records, its log
    "partition_server.replication": (1, 1),  # the replication protocol, the replicator, snapshots
    "cli": (2, 0),  # its top-level modules: shared options, the coordinator client, cluster.json; the dashboard
    "cli.cluster": (2, 1),  # process entry points, `up`/`down`, the supervisor, the fork server
    "cli.commands": (2, 1),  # the commands that use and administer a cluster (tables, map, backup, ...)
    "cli.workload": (3, 0),
    "cli.bench": (4, 0), "cli.drills": (4, 0),
    "cli.main": (5, 0),
}


def modules() -> dict[str, Path]:
    """Every module of the product and tool packages, by dotted name."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> list[str]:
    """The project modules one import statement names (``from pkg import mod`` names ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for target in names:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.append(target)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in its body."""
    known = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        graph[name]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name].update(_targets(name, path, node, known))
    return graph


def component(module: str) -> str:
    """The layer component a module belongs to: the longest prefix named in LAYERS (a package's ``__init__`` is
    a component of its own when LAYERS names ``pkg.__init__``: a public face re-exporting its sub-packages)."""
    if module + ".__init__" in LAYERS:
        return module + ".__init__"
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in LAYERS:
            return ".".join(parts[:k])
    raise KeyError(module)


def component_graph(graph: dict[str, set[str]]) -> Counter[tuple[str, str]]:
    """(component, component it imports) -> how many module-level arrows."""
    edges: Counter[tuple[str, str]] = Counter()
    for a, targets in graph.items():
        for b in targets:
            ca, cb = component(a), component(b)
            if ca != cb:
                edges[ca, cb] += 1
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _package(comp: str) -> str:
    return comp.split(".")[0]


def wrong_way(edges: Counter[tuple[str, str]]) -> list[tuple[str, str]]:
    """Arrows that point up a layer, sideways between peers of one layer, up inside a package, or into another
    package's sub-package."""
    return sorted((a, b) for a, b in edges
                  if LAYERS[b] >= LAYERS[a] or (LAYERS[b][0] == LAYERS[a][0] and _package(a) != _package(b)))


def report(graph: dict[str, set[str]]) -> str:
    """The component graph, bottom-up, with arrow counts, and the cycle count: what the test prints."""
    edges = component_graph(graph)
    lines = ["package import graph (component -> components it imports, with module arrows):"]
    for comp in sorted(LAYERS, key=lambda c: (LAYERS[c], c)):
        outs = sorted(((b, n) for (a, b), n in edges.items() if a == comp), key=lambda x: (LAYERS[x[0]], x[0]))
        arrows = ", ".join(f"{b} ({n})" for b, n in outs) or "-"
        layer, rank = LAYERS[comp]
        ranked = len({r for lay, r in LAYERS.values() if lay == layer}) > 1
        lines.append(f"  L{layer}{'.' + str(rank) if ranked else ''} {comp:<29} -> {arrows}")
    lines.append(f"wrong-way arrows: {len(wrong_way(edges))}; import cycles between modules: {len(cycles(graph))}")
    return "\n".join(lines)


def test_every_module_belongs_to_a_layer():
    assert [m for m in import_graph() if not any(m == c or m.startswith(c + ".") for c in LAYERS)] == []


def test_no_arrow_points_up_or_sideways():
    graph = import_graph()
    print("\n" + report(graph))
    bad = {pair: sorted(f"{a} -> {b}" for a, ts in graph.items() for b in ts if (component(a), component(b)) == pair)
           for pair in wrong_way(component_graph(graph))}
    assert bad == {}


def test_no_import_cycle_between_modules():
    assert cycles(import_graph()) == []


def test_no_product_module_imports_the_tests():
    assert sorted(m for m, ts in import_graph().items() for t in ts if t == "tests" or t.startswith("tests.")) == []


def test_sub_packages_serve_only_their_package_from_below():
    edges = Counter({("coordinator.map", "coordinator"): 1, ("partition_server", "coordinator.map"): 1,
                     ("coordinator.balancer", "coordinator.replicas"): 1, ("coordinator.replicas", "coordinator.balancer"): 1,
                     ("coordinator", "coordinator.balancer"): 1, ("cli", "coordinator.map"): 1})
    assert wrong_way(edges) == [("coordinator.map", "coordinator"), ("coordinator.replicas", "coordinator.balancer"),
                                ("partition_server", "coordinator.map")]


def test_sub_packages_built_on_their_package_rank_above_it():
    edges = Counter({("rangetable", "rangetable.kernel"): 1, ("rangetable.kernel", "rangetable"): 1,
                     ("rangetable.client", "rangetable.kernel"): 1, ("partition_server", "rangetable.kernel"): 1,
                     ("rangetable.__init__", "rangetable.client"): 1, ("rangetable.client", "rangetable.__init__"): 1,
                     ("frontend.http", "frontend.native"): 1, ("frontend.native", "frontend.http"): 1,
                     ("coordinator", "frontend.native"): 1, ("cli.cluster", "cli.commands"): 1,
                     ("cli.commands", "cli"): 1, ("cli.bench", "cli.cluster"): 1})
    assert wrong_way(edges) == [("cli.cluster", "cli.commands"), ("coordinator", "frontend.native"),
                                ("frontend.native", "frontend.http"), ("rangetable", "rangetable.kernel"),
                                ("rangetable.client", "rangetable.__init__"), ("rangetable.client", "rangetable.kernel")]
    assert (component("rangetable"), component("rangetable.errors"), component("rangetable.client.aio.clients")) == (
        "rangetable.__init__", "rangetable", "rangetable.client")


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_relative_imports_resolve(tmp_path):
    known = {"pkg": tmp_path / "pkg" / "__init__.py", "pkg.a": tmp_path / "pkg" / "a.py",
             "pkg.b": tmp_path / "pkg" / "b.py"}
    node = ast.parse("from . import b\nfrom .b import x\nfrom pkg import a").body
    got = [_targets("pkg.a", known["pkg.a"], n, known) for n in node]  # type: ignore[arg-type]
    assert got == [["pkg.b"], ["pkg.b"], []]


if __name__ == "__main__":
    g = import_graph()
    print(report(g))
    for c in cycles(g):
        print("cycle:", " ".join(c))
    sys.exit(1 if cycles(g) or wrong_way(component_graph(g)) else 0)
