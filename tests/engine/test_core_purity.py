"""DESIGN.md §3 for the node core: nothing engine/node.py imports from engine/ (transitively) may
import a clock, socket, event loop or randomness — the simulator drives the same core."""

from __future__ import annotations

from pathlib import Path

from tests.test_purity import FORBIDDEN, imported_modules

ROOT = Path(__file__).resolve().parents[2]


def engine_imports(path: Path) -> set[Path]:
    import ast
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("replicast.engine."):
            found.add(ROOT / (node.module.removeprefix("replicast.").replace(".", "/") + ".py"))
    return found


def test_node_core_closure_is_pure():
    seen, todo = set(), [ROOT / "engine/node.py"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo += engine_imports(path)
    assert {p.name for p in seen} >= {"node.py", "entry.py", "messages.py", "output_log.py", "lifecycle.py"}
    for path in seen:
        assert not imported_modules(path) & FORBIDDEN, f"{path} imports {imported_modules(path) & FORBIDDEN}"
