"""The packages form a declared DAG (DESIGN.md §2–3, docs/architecture.md): every import between them,
at module level or inside a function, goes down an edge of :data:`LAYERS`, never back up.

Units are the top-level folders, except the package root, which holds three things at different
heights: its version (``replicast/__init__.py``, imported by anything, with ``native_build.py``, which
it runs at import to choose between the compiled and the ``.py`` modules), the consumer library for
applications' outputs (``consume*.py``, above the engine whose MQTT settings it reads) and
``python -m replicast``; and the command assembly ``engine/cli.py``, which imports every package's
``cli`` module by name (its ``COMMAND_MODULES``) and so sits above them all.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Each unit and the units it may import directly.  Kept minimal: an edge nobody uses is removed
#: (:func:`test_every_declared_edge_is_used`), so the table is the picture of the code.
LAYERS: dict[str, set[str]] = {
    "version": set(),
    "operators": set(),
    "placement": {"operators"},
    "traces": {"operators"},
    "examples": {"operators"},
    "engine": {"operators", "placement", "traces"},
    "consume": {"engine", "operators"},
    "simulator": {"engine", "operators", "placement", "traces", "version"},
    "experiments": {"simulator", "engine", "operators", "traces", "examples"},
    "cluster": {"engine", "operators", "traces"},
    "commands": {"version", "engine", "operators", "traces", "consume", "experiments", "cluster"},
}
PACKAGES = ("operators", "placement", "traces", "examples", "engine", "simulator", "experiments", "cluster")
COMMAND_ASSEMBLY = "engine.cli"


def unit_of(module: str) -> str | None:
    """The unit a module (``engine.core.node``, ``replicast.consume``, ``replicast``) belongs to."""
    if module == COMMAND_ASSEMBLY or module == "replicast.__main__":
        return "commands"
    if module in ("replicast", "replicast.native_build"):
        return "version"
    if module.startswith("replicast.consume"):
        return "consume"
    top = module.split(".")[0]
    return top if top in PACKAGES else None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] == "replicast":
        return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every project module ``path`` imports, anywhere in it (functions, ``TYPE_CHECKING`` blocks
    included), as names below the package root (``engine.messages``; ``replicast`` for the root
    itself, ``replicast.consume`` for its modules)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)   # a submodule, perhaps
    return {below_root(name) for name in names if name == "replicast" or name.startswith("replicast.")}


def below_root(name: str) -> str:
    """``replicast.engine.node`` → ``engine.node``; the root's own modules keep their full name."""
    inner = name.removeprefix("replicast.")
    return name if name == "replicast" or unit_of(inner) is None else inner


def command_modules() -> set[str]:
    """The ``cli`` modules the command assembly imports by name (``importlib.import_module``)."""
    tree = ast.parse((ROOT / "engine" / "cli.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMMAND_MODULES" for t in node.targets):
            return {below_root(ast.literal_eval(e)) for e in node.value.elts}
    raise AssertionError("engine/cli.py has no COMMAND_MODULES")


def project_files() -> list[Path]:
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    return sorted(files + list((ROOT / "replicast").glob("*.py")))


def edges() -> dict[tuple[str, str], list[str]]:
    """``(importer unit, imported unit)`` → where: ``file: module`` for each import across units."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in project_files():
        name = module_name(path)
        source = unit_of(name)
        targets = imported(path) | (command_modules() if name == COMMAND_ASSEMBLY else set())
        for target in sorted(targets):
            unit = unit_of(target)
            if unit is not None and unit != source:
                found.setdefault((source, unit), []).append(f"{path.relative_to(ROOT)}: {target}")
    return found


EDGES = edges()


def test_the_declared_layers_are_a_dag():
    try:
        order = list(TopologicalSorter(LAYERS).static_order())
    except CycleError as error:
        raise AssertionError(f"LAYERS has a cycle: {error.args[1]}") from None
    assert set(order) == set(LAYERS)


def test_every_project_module_belongs_to_a_unit():
    assert [str(p) for p in project_files() if unit_of(module_name(p)) is None] == []


@pytest.mark.parametrize("unit", sorted(LAYERS))
def test_no_import_goes_against_the_layers(unit):
    offenders = [where for (source, target), places in EDGES.items() if source == unit
                 and target not in LAYERS[unit] for where in places]
    assert offenders == [], f"{unit} may import only {sorted(LAYERS[unit])}; these go against the layers:\n" \
                            + "\n".join(offenders)


def test_every_declared_edge_is_used():
    assert {(s, t) for s, ts in LAYERS.items() for t in ts} - set(EDGES) == set()


def test_the_scan_sees_imports_inside_functions_and_type_checking_blocks(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import replicast.engine.node\n"
                      "def f():\n    from replicast.experiments.latency import plot_ccdf\n"
                      "from replicast import __version__\nfrom replicast.consume import Consumer\n"
                      "from replicast.engine import core\n")
    assert imported(module) >= {"engine.node", "experiments.latency", "replicast", "replicast.consume", "engine.core"}
    assert {unit_of(name) for name in imported(module)} == {"engine", "experiments", "version", "consume", None}


def test_a_back_edge_is_caught():
    """What the placement → engine and simulator → experiments cycles looked like."""
    back = {("placement", "engine"), ("simulator", "experiments"), ("engine", "consume"), ("engine", "cluster")}
    assert all(target not in LAYERS[source] for source, target in back)
    assert unit_of("engine.core.node") == "engine" and unit_of("replicast.consume_core") == "consume"
    assert unit_of(COMMAND_ASSEMBLY) == "commands" and "cluster.cli" in command_modules()


def test_other_packages_reach_the_core_only_through_engine_node():
    """``engine.node`` is the way into the node core (DESIGN.md §3): the simulator, the experiments,
    the cluster tools, the consumer library and the commands import the core's names from it,
    never from ``engine.core.*``, so the core can be rearranged behind it.  Inside the engine
    package, ``tests/engine/test_driver_imports.py`` holds the asyncio driver to the same rule."""
    engine = ROOT / "engine"
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in project_files() if engine not in path.parents
                 for name in sorted(imported(path)) if name == "engine.core" or name.startswith("engine.core.")]
    assert offenders == []
