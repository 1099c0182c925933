"""Seals per key in a node core: sent behind the records they cover, applied where they are valid
(operators/key_seals.py, docs/explain.md "Seal per key").

Rules of this module:

1. A replica's seals go to every downstream stream replica it sends on, as one :class:`KeySeals`
   naming the offset its output log has reached: every item below it was sent first (per-node FIFO,
   node rule 4), so the seal reaches a receiver after the records it covers.
2. A receiver applies seals only from the incarnation it follows, positioned, holding every item
   below the seal's offset; anything else is dropped (``stale_key_seals``) — seals are hints that
   are safe to lose: the next whole-stream punctuation closes the same windows (key_seals rule 4).
3. What a replica emits on a seal (windows it closes) goes out as any output does
   (:meth:`~engine.core.sender.Sender.emit`), then the seals it forwards.
4. A process-pair primary (its outputs wait for its backup) and application sinks send no seals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from replicast.engine.core.hosted import ReplicaKind
from replicast.engine.core.states import InboundState, RouteState
from replicast.engine.messages import KeySeals
from replicast.operators.key_seals import KeySeal

if TYPE_CHECKING:
    from replicast.engine.core.hosted import Hosted, Inbound
    from replicast.engine.core.outbox import Outbox
    from replicast.operators.plan import ReplicaId, StreamReplica

_SENDING = (RouteState.ACTIVE, RouteState.CUT)


class KeySealRelay:
    """Seals per key into and out of one node's hosted replicas.  It reads the hosted replicas and
    the inbound table, sends through the outbox, and hands what a seal closes to the sender
    (``emit``, a callback)."""

    def __init__(self, hosted: "dict[ReplicaId, Hosted]", inbound: "dict[StreamReplica, Inbound]",
                 outbox: "Outbox", counters: dict[str, int], *, emit: Callable[..., None]):
        self.hosted, self.inbound, self.out, self.counters, self.sender_emit = hosted, inbound, outbox, counters, emit
        self.received = 0          # seals applied
        self.stale = 0             # seals dropped (rule 2)
        self.tracer: Any = None    # installed trace queries (engine.core.tracepoints), None while none

    def emit(self, hosted: "Hosted", seals: Sequence[KeySeal]) -> None:
        """``hosted`` seals these keys, after everything it emitted so far (rule 1)."""
        if not seals or hosted.kind is ReplicaKind.APPLICATION or hosted.gate is not None:
            return
        seals = tuple(seals)
        offset, epoch = hosted.log.end, hosted.epoch
        for stream, route in hosted.routes.items():
            if route.state in _SENDING:
                self.out.send(route.node, KeySeals(stream, epoch, offset, seals))

    def on_seals(self, src: str, message: KeySeals, now: int) -> None:
        inbound = self.inbound.get(message.stream)
        if inbound is None or inbound.node != src or inbound.epoch != message.epoch \
                or inbound.state is not InboundState.FOLLOWING or inbound.index is None \
                or inbound.next < message.offset:
            self.stale += 1                        # rule 2
            return
        hosted = self.hosted[message.stream.target]
        logic = hosted.logic
        if logic is None or logic.sealing is None:
            self.stale += 1
            return
        width = len(logic.sealing.key)
        seals = [(key, p) for key, p in message.seals if len(key) == width]
        if len(seals) != len(message.seals):
            self.counters["protocol_errors"] += 1    # a key of another arity: not this query's seal
        self.received += len(seals)
        out, forwarded = logic.on_key_seals(message.stream.port, inbound.index, seals)
        if self.tracer is not None:
            self.tracer.sealed(hosted, message.stream.port, out, now, seals)     # docs/tracing.md, seal waits
        self.sender_emit(hosted, out, None, now)   # rule 3
        self.emit(hosted, forwarded)
