"""When each peer was last heard from, and the failover modes' failure detector on top of it.

Rules of this module:

1. The node core notes every message from a peer and every new connection (:meth:`Heard.note`);
   nothing else writes here.
2. A peer is *suspected* once nothing was heard from it for ``peer_timeout_us`` — since the core
   started, if never (failover rule 3, pairs rule 4).  A broken connection alone is not enough:
   links come back.  The core's own name is never suspected.
"""

from __future__ import annotations


class Heard:
    """Last-heard times of one node's peers (µs) and its failure detector."""

    def __init__(self, name: str, started: int, peer_timeout_us: int):
        self.name, self.started, self.peer_timeout_us = name, started, peer_timeout_us
        self._at: dict[str, int] = {}

    def note(self, node: str, now: int) -> None:
        self._at[node] = now

    def last_heard(self, node: str, default: int) -> int:
        """When a message from ``node`` last arrived, or ``default`` if none ever did."""
        return self._at.get(node, default)

    def suspected(self, node: str, now: int) -> bool:
        """Rule 2."""
        return node != self.name and now - self._at.get(node, self.started) > self.peer_timeout_us
