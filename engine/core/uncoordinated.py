"""A node core that takes no part in placement (§V): the plug-in held instead of
:class:`~engine.core.coordination.Coordination`, chosen once when the core is built.

Rules of this module:

1. It elects no one, reports nothing and has no timer; a load the driver measured is dropped (a
   driver measures it whatever the plug-in, and never asks which one the core holds).
2. A :class:`~engine.messages.Report` sent here is counted (``stray_reports``), never raised:
   nothing a peer sends stops a node (coordination rule 3).
3. It has no import beyond the standard library: :mod:`engine.core.coordination` brings numpy and
   the placement package, which a node without a coordination setup never loads.
"""

from __future__ import annotations

from typing import Any


class Uncoordinated:
    """Placement's plug-in of a node core made without a coordination setup (rules 1-3)."""

    def __init__(self, counters: dict[str, int]):
        self.counters = counters

    def elect(self, now: int) -> None:
        pass

    def on_timer(self, now: int) -> None:
        pass

    def next_timer(self) -> int | None:
        return None

    def on_report(self, src: str, message: Any, now: int) -> None:
        self.counters["stray_reports"] += 1          # rule 2: this node takes no part in placement

    def set_load(self, load: float, capacity: float = 1.0) -> None:
        pass

    def placement_statistics(self) -> dict[str, Any]:
        """Nothing: a node without a coordination setup has no ``placement`` entry in its statistics."""
        return {}
