"""Trace names -> trace directories.

* ``seattle`` ships inside the package (``traces/data/seattle``, ~2 MB).
* ``planetlab490`` is 10 MB even compacted, so it is built once from the NetLatency copy with
  ``replicast trace build planetlab490 --source DIR`` into the user trace directory.
* Anything else is a path to a canonical trace directory.

The user trace directory is ``$REPLICAST_TRACE_DIR`` or ``~/.local/share/replicast/traces``.
"""

from __future__ import annotations

import os
from pathlib import Path

from replicast.traces.errors import TraceError
from replicast.traces.format import meta_path

DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED = ("seattle",)
BUILDABLE = ("planetlab490",)
KNOWN = SHIPPED + BUILDABLE


def user_dir() -> Path:
    return Path(os.environ.get("REPLICAST_TRACE_DIR") or Path.home() / ".local/share/replicast/traces")


def location(name: str) -> Path:
    """Where the named trace lives (or would live, once built)."""
    return DATA_DIR / name if name in SHIPPED else user_dir() / name


def resolve(name_or_path: str | os.PathLike) -> Path:
    """The directory of a named trace or of a trace path; unknown names raise :class:`TraceError`."""
    text = str(name_or_path)
    if text in KNOWN:
        path = location(text)
        if not meta_path(path).is_file():
            if text in SHIPPED:
                raise TraceError(f"trace {text!r}: the shipped copy is missing at {path}; reinstall replicast")
            raise TraceError(
                f"trace {text!r} is not built yet; run: replicast trace build {text} "
                f"--source ../shared/traces/netlatency (it goes to {path})"
            )
        return path
    path = Path(text).expanduser()
    if path.is_dir():
        if not meta_path(path).is_file():
            raise TraceError(f"{path}: not a trace directory (no meta.json); see docs/traces.md")
        return path
    raise TraceError(f"{text!r} is neither a known trace ({', '.join(KNOWN)}) nor a trace directory")


def available() -> list[tuple[str, Path, bool]]:
    """(name, location, present) for every named trace."""
    return [(name, location(name), meta_path(location(name)).is_file()) for name in KNOWN]
