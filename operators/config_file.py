"""Reading TOML configuration files with errors a person can act on.

Query files, cluster files and scenarios all read TOML and fetch typed keys; these two functions
do it once, each caller passing its own error class so messages keep naming the right kind of file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from replicast.operators.errors import ReplicastError

MISSING: Any = ...


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


def typed_key(doc: dict, key: str, kind: type | tuple, where: str, default: Any = MISSING, *,
              error: type[ReplicastError] = ReplicastError) -> Any:
    """``doc[key]`` checked to be of ``kind`` (a bool is not an int here); ``default`` if absent.

    >>> typed_key({"port": 80}, "port", int, "c.toml: [[nodes]] #1")
    80
    """
    if key not in doc:
        if default is MISSING:
            raise error(f"{where}: missing key '{key}'")
        return default
    value = doc[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise error(f"{where}: '{key}' should be {expected}, got {value!r}")
    return value
