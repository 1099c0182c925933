"""A test-only operator that plants a bug in a node core: it raises inside the core on its Nth record.

It is named in a query file (``kind = "python"``), so only whoever writes the cluster's query can
plant it: no peer's frame and no source's payload can make a node build it.  ``marker`` makes the
bug fire once per cluster: the replica that claims the marker file first (``O_EXCL``) raises; its
peer replica, and the same replica restarted, pass every record through.
"""

from __future__ import annotations

import os

from replicast.operators.base import Operator
from replicast.operators.record import Record


class InjectedBug(RuntimeError):
    """What the planted bug raises (a test looks for its name in the node's log)."""


class CrashOnce(Operator):
    """Passes records through unchanged; raises :class:`InjectedBug` at its ``after``-th record if it
    claims ``marker`` (module docstring)."""

    kind = "crash_once"
    label = "CR"                       # stateless and order-insensitive: no sorter in front of it

    def __init__(self, after: int, marker: str):
        super().__init__(1)
        self.after, self.marker, self.seen = after, marker, 0

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        self.seen += len(records)
        if self.seen >= self.after and self._claim():
            raise InjectedBug(f"planted bug at record {self.seen} (marker {self.marker})")
        return list(records)

    def _claim(self) -> bool:
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


def crash_query(after: int, marker: str) -> str:
    """A query file (TOML): stream ``cpu`` -> :class:`CrashOnce` ``relay`` -> application ``out``."""
    return f"""
[[streams]]
name = "cpu"
fields = {{ server = "str", load = "float" }}

[[operators]]
name = "relay"
kind = "python"
input = "cpu"
class = "tests.integration.crash_operator:CrashOnce"
fields = {{ server = "str", load = "float" }}
args = {{ after = {after}, marker = "{marker}" }}

[[applications]]
name = "out"
input = "relay"
"""
