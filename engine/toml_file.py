"""Reading TOML configuration files with errors a person can act on.

Query files, cluster files and scenarios are all TOML; :func:`read_toml` reads one, each caller
passing its own error class so messages keep naming the right kind of file.  File I/O lives here,
beside the drivers, not in the pure packages (DESIGN.md §3, ``tests/test_purity.py``); the typed
keys of a parsed document are :func:`operators.config_file.typed_key`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from replicast.operators.errors import ReplicastError


def read_toml(path: str | Path, what: str, error: type[ReplicastError]) -> dict:
    """The TOML document at ``path``; ``error("<path>: cannot read <what>: …" / "invalid TOML: …")``."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as problem:
        raise error(f"{path}: cannot read {what}: {problem.strerror}") from None
    except UnicodeDecodeError as problem:
        raise error(f"{path}: the {what} is not UTF-8 text (byte {problem.start}: "
                    f"{problem.object[problem.start:problem.start + 4]!r})") from None
    except tomllib.TOMLDecodeError as problem:
        raise error(f"{path}: invalid TOML: {problem}") from None
