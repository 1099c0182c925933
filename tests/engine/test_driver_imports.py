"""Drivers reach the node core only through ``engine.node`` (DESIGN.md §3; engine/node.py): no module of
``engine/aio/`` or ``simulator/`` imports ``engine.core`` or anything under it, even for typing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ("engine/aio", "simulator")


def core_imports(path: Path) -> list[str]:
    """The ``engine.core`` modules ``path`` imports (``import …``, ``from … import``, at any depth)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [f"{path.name}:{node.lineno} {name}" for name in names
                  if name.removeprefix("replicast.") == "engine.core" or name.removeprefix("replicast.").startswith("engine.core.")]
    return found


def driver_modules() -> list[Path]:
    return sorted(path for package in DRIVERS for path in (ROOT / package).glob("*.py"))


def test_drivers_import_the_core_only_through_engine_node():
    modules = driver_modules()
    assert {"driver.py", "links.py", "network.py"} <= {path.name for path in modules}     # both drivers are read
    assert [hit for path in modules for hit in core_imports(path)] == []


def test_the_check_sees_every_form_of_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import replicast.engine.core.node\nfrom replicast.engine.core import states\n"
                     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from replicast.engine.core.stats import COUNTERS\n"
                     "from replicast.engine.node import NodeCore\n")
    hits = core_imports(probe)
    assert [hit.split(" ", 1)[1] for hit in hits] == ["replicast.engine.core.node", "replicast.engine.core",
                                                     "replicast.engine.core.states", "replicast.engine.core.stats",
                                                     "replicast.engine.core.stats.COUNTERS"]
