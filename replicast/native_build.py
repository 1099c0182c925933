"""The native build of the per-message path: which modules ``setup.py`` compiles with mypyc, and
whether the compiled modules match the sources beside them (docs/architecture.md, "Native build").

The reference tier spends its time in a few dozen Python calls per message (the node core's
receiver, duplicate filter and sender, the simulator's driver, network and recorder). mypyc compiles
those modules, unchanged, to C extensions: classes with typed attributes become C structs and calls
between them direct C calls. The same ``.py`` files stay the source of truth and the fallback:

* ``pip install`` builds them when mypyc (a build requirement) and a C compiler are there, and
  installs the pure-Python package otherwise (``setup.py`` says which on stderr);
* ``REPLICAST_PURE_PYTHON=1`` in the environment runs the ``.py`` files even where the native
  modules are built (at install: builds none);
* a compiled module is used only while every compiled source is byte for byte the one it was built
  from (``native_manifest.json``, written by the build): after an edit to any of them, the package
  runs pure Python, all of it, and warns once, until the next ``pip install -e .`` (or
  ``scripts/setup.sh``) rebuilds — never a stale extension beside a newer source.

This module is itself never compiled: it decides, as ``replicast`` is imported and before any
compiled module is, whether they are used.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

#: The compiled modules: the per-message path of the node core (receiver, duplicate filter, operator
#: replica, sender, output log, links, lifecycle, failover, the operators) and of the simulator (driver, network,
#: recorder). Users subclass ``operators.base.Operator`` in Python (it allows interpreted subclasses).
NATIVE_MODULES = (
    "replicast.engine.frame_size",
    "replicast.engine.messages",
    "replicast.engine.core.baggage",
    "replicast.engine.core.configure",
    "replicast.engine.core.control",
    "replicast.engine.core.control_policy",
    "replicast.engine.core.coordination",
    "replicast.engine.core.copy_tail",
    "replicast.engine.core.events",
    "replicast.engine.core.failover",
    "replicast.engine.core.heard",
    "replicast.engine.core.hosted",
    "replicast.engine.core.intents",
    "replicast.engine.core.key_seals",
    "replicast.engine.core.ledger",
    "replicast.engine.core.lifecycle",
    "replicast.engine.core.links",
    "replicast.engine.core.modes",
    "replicast.engine.core.node",
    "replicast.engine.core.outbox",
    "replicast.engine.core.output_log",
    "replicast.engine.core.pairs",
    "replicast.engine.core.receiver",
    "replicast.engine.core.sender",
    "replicast.engine.core.stamp_state",
    "replicast.engine.core.stamper",
    "replicast.engine.core.stamping",
    "replicast.engine.core.stats",
    "replicast.engine.core.uncoordinated",
    "replicast.engine.core.view_changes",
    "replicast.engine.core.views",
    "replicast.operators.aggregate",
    "replicast.operators.base",
    "replicast.operators.count_aggregate",
    "replicast.operators.dedup",
    "replicast.operators.dedup_ranks",
    "replicast.operators.dedup_runs",
    "replicast.operators.dedup_single",
    "replicast.operators.dedup_slots",
    "replicast.operators.filter",
    "replicast.operators.join",
    "replicast.operators.join_keys",
    "replicast.operators.key_seals",
    "replicast.operators.keyed_join",
    "replicast.operators.map",
    "replicast.operators.merge",
    "replicast.operators.plan",
    "replicast.operators.record",
    "replicast.operators.replica",
    "replicast.operators.sorter",
    "replicast.operators.union",
    "replicast.simulator.driver",
    "replicast.simulator.network",
    "replicast.simulator.recorder",
)

#: The shared library mypyc builds for the group (``replicast/native__mypyc*.so``).
GROUP = "replicast.native"
MANIFEST = "native_manifest.json"
PURE_ENV = "REPLICAST_PURE_PYTHON"

#: Each ``replicast.<pkg>`` is the repository folder ``<pkg>`` (setup.cfg's ``package_dir``).
PACKAGE_DIRS = {"replicast": "replicast", "replicast.engine": "engine", "replicast.operators": "operators",
                "replicast.simulator": "simulator"}


def _repository_path(module: str, root: Path) -> Path:
    """A native module's source in the repository (``setup.py``'s view)."""
    parts = module.split(".")
    return root.joinpath(PACKAGE_DIRS[".".join(parts[:2])], *parts[2:-1], parts[-1] + ".py")


def digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def write_manifest(repository: Path, package_dir: Path) -> None:
    """``setup.py``: the digest of every compiled source, beside the group library."""
    sources = {module: digest(_repository_path(module, repository)) for module in NATIVE_MODULES}
    (package_dir / MANIFEST).write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")


def _module_file(module: str) -> Path | None:
    """Where ``module``'s source is, without importing it (the editable install maps ``replicast.engine``
    to the repository's ``engine`` folder; a wheel puts it under ``replicast/``)."""
    parent, _, name = module.rpartition(".")
    try:
        spec = importlib.util.find_spec(parent)
    except ImportError:                 # the package root alone on sys.path (a checkout not installed)
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / f"{name}.py"
        if candidate.exists():
            return candidate
    return None


def _has_extension(source: Path) -> bool:
    return any(source.with_name(source.stem + suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


class _Status:
    """What ``guard`` found: ``native`` (compiled modules in use) or why not."""
    native = False
    reason = "not checked"


STATUS = _Status()


def status() -> str:
    """One line for logs and benchmarks: which build runs."""
    return (f"native (mypyc: {len(NATIVE_MODULES)} modules)" if STATUS.native
            else f"pure Python ({STATUS.reason})")


class _PureSource(importlib.abc.MetaPathFinder):
    """Finds the native modules' ``.py`` files, ahead of the extension beside each."""

    def find_spec(self, name, path=None, target=None):
        if name not in NATIVE_MODULES:
            return None
        source = _module_file(name)
        return None if source is None else importlib.util.spec_from_file_location(name, source)


def guard() -> None:
    """Called as ``replicast`` is imported: use the compiled modules only if they are all current."""
    if any(module in sys.modules for module in NATIVE_MODULES):
        return                                        # decided already (a re-import)
    sources = {module: _module_file(module) for module in NATIVE_MODULES}
    built = [module for module, source in sources.items() if source is not None and _has_extension(source)]
    if not built:
        STATUS.reason = "no native build installed"
        return
    manifest_path = Path(__file__).with_name(MANIFEST)
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    changed = sorted(module for module, source in sources.items()
                     if source is None or manifest.get(module) != digest(source))
    missing = sorted(set(NATIVE_MODULES) - set(built))
    if os.environ.get(PURE_ENV):
        STATUS.reason = f"{PURE_ENV} is set"
    elif changed or missing:
        what = changed or missing
        STATUS.reason = (f"the native build is older than {', '.join(m.rsplit('.', 1)[-1] for m in what[:3])}"
                         f"{'…' if len(what) > 3 else ''}: rebuild with `pip install -e .` or scripts/setup.sh")
        warnings.warn(f"replicast runs pure Python: {STATUS.reason}", RuntimeWarning, stacklevel=3)
    else:
        STATUS.native, STATUS.reason = True, ""
        return
    sys.meta_path.insert(0, _PureSource())
