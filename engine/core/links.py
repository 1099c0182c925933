"""What a node core sends each peer besides data: acknowledgements, keep-alives and RTT probes.

Rules of this module (over a quarter of all messages were acks and heartbeats before them:
docs/performance.md):

1. Acks are cumulative (messages rule 3), so only the latest per stream replica matters: they are
   kept per peer and leave with the next messages for that peer (one frame, one link item), or on
   their own at most ``heartbeat_us`` after the first of them was made.  Retention upstream grows
   by at most that much.
2. A link proves itself alive with whatever it carries: a keep-alive (:class:`Heartbeat`) goes
   only to a peer nothing was sent to for a keep-alive interval, a third of ``peer_timeout_us`` (at
   least ``heartbeat_us``).  Peers time out on silence from them (``peer_timeout_us``), whatever they
   sent: a peer that is up is heard from at least three times per time-out whatever the link carries,
   as with one heartbeat per ``heartbeat_us``; detection takes the same ``peer_timeout_us``.  Links
   that carry no stream (peer replicas' nodes, the control plane's full mesh) are most links at
   kmax ≥ 3 and carry nothing else.
3. The RTT gauge needs an echo: a probe (a Heartbeat, answered at once) rides along with other
   messages to a peer at most every ``PROBE_EVERY`` heartbeat intervals, and every keep-alive is one.
"""

from __future__ import annotations

from typing import Callable

from replicast.engine.core.events import PeerTimedOut
from replicast.engine.core.outbox import Outbox
from replicast.engine.messages import Ack, Heartbeat, Message
from replicast.operators.plan import StreamReplica

#: A busy link carries an RTT probe at most every this many heartbeat intervals (rule 3).
PROBE_EVERY = 10
_NEVER = -(2**62)


class Links:
    """Acks, keep-alives and probes per peer of one node: it reads the two intervals, the outbox
    (whose connection set says which peers are up) and when each peer was last heard from."""

    def __init__(self, heartbeat_us: int, peer_timeout_us: int, outbox: Outbox,
                 last_heard: Callable[[str, int], int], now: int):
        self.heartbeat_us, self.peer_timeout_us = heartbeat_us, peer_timeout_us
        self.outbox, self.last_heard = outbox, last_heard
        self.sent_at: dict[str, int] = {}          # peer -> when a message last left for it
        self.probed_at: dict[str, int] = {}        # peer -> when the last probe left for it
        #: peer -> stream replica -> (epoch, offset) of its latest ack; the Ack is made when it leaves
        #: (a stream replica is acknowledged several times per ack that goes out).
        self.acks: dict[str, dict[StreamReplica, tuple[int, int]]] = {}
        self.ack_due: dict[str, int] = {}          # peer -> when its pending acks leave on their own
        self.earliest_ack: int | None = None
        self.heartbeat_at = now                    # the next keep-alive round
        self.keepalive_us = max(heartbeat_us, peer_timeout_us // 3)   # rule 2

    # -- acks (rule 1) ----------------------------------------------------------------------------
    def ack(self, node: str, stream: StreamReplica, epoch: int, offset: int, now: int) -> None:
        pending = self.acks.get(node)
        if pending is None:
            pending = self.acks[node] = {}
            due = self.ack_due[node] = now + self.heartbeat_us
            if self.earliest_ack is None or due < self.earliest_ack:
                self.earliest_ack = due
        pending[stream] = (epoch, offset)

    # -- outgoing (rules 1-3) ---------------------------------------------------------------------
    def drain(self, out: list[tuple[str, Message]], now: int) -> list[tuple[str, Message]]:
        """``out`` plus the acks and probes that ride along with it; notes what left when."""
        if not out:
            return out
        sent_at, acks = self.sent_at, self.acks
        for node in (out[0][0],) if len(out) == 1 else {node for node, _ in out}:
            sent_at[node] = now
            pending = acks.pop(node, None) if acks else None
            if pending:
                out.extend((node, Ack(stream, epoch, offset)) for stream, (epoch, offset) in pending.items())
                self._forget_due(node)
            if now - self.probed_at.get(node, _NEVER) >= PROBE_EVERY * self.heartbeat_us:
                self.probed_at[node] = now
                out.append((node, Heartbeat(now)))
        return out

    def on_timer(self, now: int) -> bool:
        """Acks that waited long enough; keep-alives for idle links; peers silent for too long.
        Returns whether this was a heartbeat round (failure detectors check then)."""
        outbox = self.outbox
        if self.earliest_ack is not None and now >= self.earliest_ack:
            for node in [n for n, due in self.ack_due.items() if due <= now]:
                pending = self.acks.pop(node)
                self._forget_due(node)
                if node in outbox.connected:
                    outbox.messages.extend((node, Ack(stream, epoch, offset))
                                           for stream, (epoch, offset) in pending.items())
        if now >= self.heartbeat_at:
            self.heartbeat_at = now + self.heartbeat_us
            for node in sorted(outbox.connected):
                if now - self.sent_at.get(node, _NEVER) >= self.keepalive_us:
                    outbox.put(node, Heartbeat(now))
                    self.probed_at[node] = now
                if now - self.last_heard(node, now) > self.peer_timeout_us:
                    outbox.event(PeerTimedOut(node))
            return True
        return False

    def next_timer(self) -> int:
        return self.heartbeat_at if self.earliest_ack is None else min(self.heartbeat_at, self.earliest_ack)

    def on_peer_down(self, node: str) -> None:
        """Pending acks for a peer that went away are void (it asks again with Resume)."""
        if self.acks.pop(node, None) is not None:
            self._forget_due(node)

    def _forget_due(self, node: str) -> None:
        del self.ack_due[node]
        self.earliest_ack = min(self.ack_due.values(), default=None)
