"""Cluster operations sit beside the node: nothing in the node's packages imports ``cluster``, and
the ``cluster`` package's own imports have no cycle (``cluster up`` ↔ emulation used to have one)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE_SIDE = ("engine", "operators", "placement", "simulator", "traces", "experiments")


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    # Everything installs under one package (DESIGN.md §2): compare the names inside it.
    return {name.removeprefix("replicast.") for name in names}


def test_no_node_side_module_imports_the_cluster_package():
    offenders = [str(path.relative_to(ROOT)) for package in NODE_SIDE for path in ROOT.glob(f"{package}/**/*.py")
                 if any(name == "cluster" or name.startswith("cluster.") for name in imports(path))]
    assert offenders == []


def test_the_cluster_package_has_no_import_cycle():
    modules = {f"cluster.{p.stem}": p for p in (ROOT / "cluster").glob("*.py") if p.stem != "__init__"}
    graph = {name: {m for m in imports(path) if m in modules} for name, path in modules.items()}
    assert "cluster.relay" in graph["cluster.emulation"]           # the graph is read at all
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"import cycle: {error.args[1]}") from None
    assert set(order) == set(modules)
