"""A sink replica's snapshot waits for what it delivered to be published (docs/consume.md).

A sink replica that gives a joining one its snapshot hands over its output: the joiner will
publish only what comes after the snapshot, so everything this one delivered before must be at the
broker first, or a kill of this node now would lose it.  The frames to the joiner's node wait
until the application's sessions have every message queued so far acknowledged, at most
:data:`SNAPSHOT_HOLD_S` (and a third of the peer time-out).  A link that broke meanwhile is not
written to: its successor replays on its own.
"""

from __future__ import annotations

import time
from typing import Callable


#: Longest a link waits for a sink replica's output to reach its broker before the snapshot goes.
SNAPSHOT_HOLD_S = 1.0


class SnapshotHolds:
    """Frames held per peer node (module docstring).  ``write(node, frames, link)`` writes them if
    ``link`` is still ``node``'s link; ``link_of(node)`` names the current one."""

    def __init__(self, peer_timeout_ms: float, link_of: Callable[[str], object],
                 write: Callable[[str, list[bytes], object], None]):
        self._hold_s = min(SNAPSHOT_HOLD_S, peer_timeout_ms / 3000)
        self._link_of, self._write = link_of, write
        #: node -> (deadline, [(session, queued mark)], frames, the link when the hold began).
        self._held: dict[str, tuple[float, list, list[bytes], object]] = {}

    def __contains__(self, node: str) -> bool:
        return node in self._held

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, node: str, sessions) -> None:
        """Hold the frames to ``node`` until ``sessions`` have what they queued so far acknowledged."""
        marks = [(session, session.queued) for session in sessions if session.acked < session.queued]
        if marks and node not in self._held:
            self._held[node] = (time.monotonic() + self._hold_s, marks, [], self._link_of(node))
            for session, _ in marks:
                session.on_acked = self.release

    def add(self, node: str, frames: list[bytes]) -> None:
        self._held[node][2].extend(frames)

    def release(self) -> None:
        """Write what is held for nodes whose marks are acknowledged or whose deadline passed."""
        for node, (deadline, marks, frames, link) in list(self._held.items()):
            if all(session.acked >= mark for session, mark in marks) or time.monotonic() >= deadline:
                del self._held[node]
                if frames:
                    self._write(node, frames, link)
