"""Optional dependencies: which extra of the ``replicast`` distribution brings a missing module.

The base install is what ``replicast node`` needs (docs/install.md); simulation, plotting, Spark
and the experiments come with the extras declared in setup.cfg. A command that needs one imports
it inside the command, so a missing module surfaces as :class:`ModuleNotFoundError` there, and
:func:`missing_extra` turns it into one line saying what to install. The extras are read from the
installed distribution's metadata, so this module never repeats setup.cfg.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import metadata

_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _module_name(requirement: str) -> str | None:
    match = _NAME.match(requirement)
    return match.group(1).lower().replace("-", "_").replace(".", "_") if match else None


@cache
def extras() -> dict[str, frozenset[str]]:
    """Each extra's top-level modules (distribution names normalised: ``prometheus-client`` →
    ``prometheus_client``). Empty when replicast runs without being installed."""
    try:
        requirements = metadata.requires("replicast") or []
    except metadata.PackageNotFoundError:
        return {}
    found: dict[str, set[str]] = {}
    for requirement in requirements:
        requirement_part, _, marker = requirement.partition(";")
        extra, module = _EXTRA_MARKER.search(marker), _module_name(requirement_part)
        if extra and module:
            found.setdefault(extra.group(1), set()).add(module)
    return {name: frozenset(modules) for name, modules in found.items()}


def missing_extra(error: ModuleNotFoundError, preferred: str | None = None) -> str | None:
    """The line to show for ``error``, or None when the missing module is no optional dependency
    (then it is a bug or a broken install, and the traceback is the right report).

    ``preferred`` is the extra the command declares (``set_defaults(extra=…)``): named when it
    brings the module, so the user installs once what the whole command needs; otherwise the
    smallest extra that brings it.
    """
    module = (error.name or "").partition(".")[0]
    providers = {name: modules for name, modules in extras().items() if module in modules
                 and name not in ("test", "bench")}
    if not providers:
        return None
    extra = preferred if preferred in providers else min(providers, key=lambda name: (len(providers[name]), name))
    return f"needs {module}, which the '{extra}' extra installs: python3 -m pip install 'replicast[{extra}]'"
