"""DESIGN.md §3: the cores never import clocks, sockets, event loops or randomness."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"asyncio", "simpy", "time", "random", "socket", "threading", "datetime", "selectors", "subprocess"}
PROJECT_PACKAGES = ("operators", "engine", "placement", "simulator", "traces")


def module_path(name: str) -> Path | None:
    parts = name.split(".")
    for candidate in (ROOT.joinpath(*parts).with_suffix(".py"), ROOT.joinpath(*parts, "__init__.py")):
        if candidate.exists():
            return candidate
    return None


def project_imports(path: Path) -> set[Path]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    local = {n.removeprefix("replicast.") for n in names if n.startswith("replicast.")}
    return {p for n in local if n.split(".")[0] in PROJECT_PACKAGES and (p := module_path(n)) is not None}


def core_files() -> list[Path]:
    """The cores (operators/, placement/, engine/node.py) and every project module they import."""
    todo = [*ROOT.glob("operators/**/*.py"), *ROOT.glob("placement/**/*.py"), *ROOT.glob("engine/node.py")]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(project_imports(path))
    return sorted(seen)


CORE_FILES = core_files()


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_files_exist():
    assert any(p.name == "dedup.py" for p in CORE_FILES)


#: What a pure module may import (DESIGN.md §3), as an allow-list: a deny-list let importlib,
#: os.urandom, secrets or uuid through.  Standard-library modules without clocks, I/O or randomness,
#: the data libraries the cores compute with, the package itself, and mypy_extensions (``mypyc_attr``:
#: a class decorator that only marks what the native build may do, replicast/native_build.py).
ALLOWED = {
    "__future__", "ast", "bisect", "collections", "copy", "dataclasses", "enum", "fractions", "functools",
    "graphlib", "heapq", "itertools", "json", "math", "operator", "re", "struct", "typing", "warnings",
    "msgpack", "msgspec", "numpy", "scipy", "sortedcontainers", "replicast", "mypy_extensions",
}
#: Built-ins that reach outside the process: a pure module takes what a file holds as a value, and
#: the driver reads it (``engine/toml_file.py``, ``engine/query_file.py``).
IO_BUILTINS = {"open", "__import__", "input", "breakpoint"}


def io_builtin_calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {node.func.id for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_BUILTINS}


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_module_is_pure(path):
    assert not imported_modules(path) & FORBIDDEN, f"{path} imports {imported_modules(path) & FORBIDDEN}"
    assert imported_modules(path) <= ALLOWED, f"{path} imports {sorted(imported_modules(path) - ALLOWED)}"
    assert not io_builtin_calls(path), f"{path} calls {sorted(io_builtin_calls(path))}"


def test_the_scan_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import time as clock\nfrom random import random\nimport importlib, secrets\nfrom os import urandom\n")
    assert imported_modules(bad) & FORBIDDEN == {"time", "random"}
    assert imported_modules(bad) - ALLOWED == {"time", "random", "importlib", "secrets", "os"}
    reader = tmp_path / "reader.py"
    reader.write_text("def f(path):\n    with open(path) as f:\n        return __import__(f.read())\n")
    assert io_builtin_calls(reader) == {"open", "__import__"}
