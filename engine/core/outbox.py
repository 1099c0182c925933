"""What the node core's components hand its driver: messages to nodes and events (DESIGN.md §3).

Rules of this module:

1. Components never hold the node core; they hold an :class:`Outbox` and put what they want sent
   or told into it.  The node core drains it (``messages_to_send``, ``events``) — the h11 contract.
2. :meth:`Outbox.send` addresses a node: the core's own name goes to the local queue (drained within
   the same input call, in order), a connected peer to :attr:`Outbox.messages`, anyone else nowhere
   (a node that is not connected asks again when it is: node rule 4).  :meth:`Outbox.put` is for
   what must leave on a link whatever the connection set says (an answer on the link a message came
   by, acks and keep-alives chosen by :mod:`engine.core.links`).
3. The hot path (:mod:`engine.core.sender`) appends to :attr:`local` and :attr:`messages` itself;
   nothing else does.
"""

from __future__ import annotations

from collections import deque

from replicast.engine.core.events import Event
from replicast.engine.messages import Message


class Outbox:
    """Messages and events of one node core, until its driver drains them."""

    def __init__(self, name: str, connected: set[str]):
        self.name = name
        #: The peers the driver has a connection to (the node core's set, shared, not copied).
        self.connected = connected
        self.messages: list[tuple[str, Message]] = []
        self.events: list[Event] = []
        #: Messages to this node itself, in order: batch tuples (stream, epoch, offset, records,
        #: punctuation, path) on the hot path, (src, message) pairs otherwise.
        self.local: deque = deque()

    def send(self, node: str, message: Message) -> None:
        """Address ``message`` to ``node`` (rule 2)."""
        if node == self.name:
            self.local.append((node, message))
        elif node in self.connected:
            self.messages.append((node, message))

    def reachable(self, node: str) -> bool:
        """Whether a message to ``node`` would leave now (this node itself, or a connected peer)."""
        return node == self.name or node in self.connected

    def put(self, node: str, message: Message) -> None:
        """``message`` leaves for ``node`` with the next drain, connected or not (rule 2)."""
        self.messages.append((node, message))

    def event(self, event: Event) -> None:
        self.events.append(event)
