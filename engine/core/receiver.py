"""The receiving side of a node core: stream positions, stream heads and batches (§III, §IV-B).

Rules of this module:

1. A receiver follows one incarnation (``epoch``) of each inbound stream replica from a known offset.
   It asks for it (messages rule 6): :class:`~engine.messages.Resume` with what it holds when its
   replica can take input, :class:`~engine.messages.Hold` while its replica joins.
2. A :class:`~engine.messages.StreamHead` that continues what the receiver holds changes nothing.
   One that starts a new incarnation makes the stream replica a new one in its port's duplicate
   filter; one that skips items it lacks (the sender's log was trimmed past it) is a gap.  Both
   carry the frontier above which the stream is complete: the filter holds that stream replica's
   punctuations until the port reaches it (operators/dedup.py), so nothing is dropped on a promise
   the stream never made.  A replica rebuilding without a peer adopts the first frontier per port.
3. Batches of another incarnation, or of a stream not positioned yet, are stale and dropped; a batch
   that is malformed or skips offsets without a head is a protocol error: the driver drops the
   connection and the stream resumes from what the receiver holds.  A batch is never half-taken.
4. After a batch that carries a punctuation the receiver acknowledges, cumulatively (messages rule 3).
5. A joined replica's stream starts with a copy of its donor's retained log and then continues the
   donor's stream (lifecycle rule 2).  A receiver that holds the donor's stream up to where the
   copy starts (following it, or on standby after following it: failover modes) takes the joined
   stream as its continuation: it skips what it holds and seeds the
   new stream replica's counts with the donor stream's counts at that point — at once if it holds
   the donor's stream only up to a point inside the copy, else from the counts it noted when the
   donor's :class:`~engine.messages.Mark` passed (the donor marks its stream where it took the
   snapshot).  So the joined stream is trusted at once (the joiner can be the only survivor right
   away) and equal records from distinct events keep their multiplicity.  Otherwise — also when
   the donor's stream had a gap here whose base the port has not reached (its counts there miss
   what the gap lost) — the head's frontier applies (rule 2).
6. A sender whose node does not host the sending replica says so (:class:`~engine.messages.NotHosted`:
   the node restarted without a replica a coordinator had placed there).  The stream replica is
   then ``VANISHED``: its port no longer waits for it, and a port left with only inputs complete
   above it rejoins (lifecycle rule 4) — before, it followed the vanished stream replica for ever
   and the application never closed.  A later stream head (the replica deployed there after all)
   positions it again as a new incarnation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from replicast.engine.core.events import ProtocolError
from replicast.engine.core.hosted import Hosted, Inbound
from replicast.engine.core.intents import NONE, AdoptFrontier, CheckHorizon, CheckPort, Intent
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.states import InboundEvent, InboundState, ReplicaState, advance
from replicast.engine.messages import Batch, Hold, Mark, NotHosted, Resume, StreamHead
from replicast.engine.wire import EncodedRecords, PackedRecords, WireError
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import StreamReplica

if TYPE_CHECKING:
    from replicast.engine.core.failover import AllFeed, Failover

_KEYED = (EncodedRecords, PackedRecords)      # records that may carry their bytes as a content key
_TAKING = (ReplicaState.LIVE, ReplicaState.REBUILDING)
_HELD = (InboundState.FOLLOWING, InboundState.STANDBY)


#: Count checkpoints a receiver keeps for joined replicas' heads still to come (rule 5).
MAX_CHECKPOINTS = 64


class Receiver:
    """Inbound stream replicas of one node's hosted replicas.  It reads the streams' schemas, the
    hosted replicas and the inbound table, sends through the outbox, consults the mode's plug-in
    (``failover``: which upstream a port follows), and hands on what it cannot do itself:
    acknowledgements to :mod:`engine.core.links` (``ack``) and outputs to the sender (``emit``).
    What it asks of the lifecycle — port checks, horizons, adopted frontiers — it returns as
    intents (:mod:`engine.core.intents`): :meth:`on_batch`, :meth:`accept`, :meth:`on_head` and
    :meth:`on_not_hosted` return them, for the node core to route; it never holds the lifecycle."""

    def __init__(self, schemas: dict, hosted: dict, inbound: dict[StreamReplica, Inbound], outbox: Outbox,
                 counters: dict[str, int], failover: "Failover | AllFeed",
                 ack: Callable[[str, StreamReplica, int, int, int], None], emit: Callable[..., None]):
        self.schemas, self.hosted, self.inbound, self.out, self.counters = schemas, hosted, inbound, outbox, counters
        self.failover, self.ack, self.emit = failover, ack, emit
        #: Installed trace queries' tracepoints (engine.core.tracepoints), set by the node core; None while none.
        self.tracer: Any = None          # a tracepoints.Tracer while a trace query is installed
        #: (stream replica, epoch, offset) -> its counts at that offset, noted at a Mark (rule 5).
        self.checkpoints: dict[tuple[StreamReplica, int, int], dict] = {}
        #: stream replica -> (offset, until): acknowledge no further while a peer joins from it.
        self.ack_holds: dict[StreamReplica, tuple[int, int]] = {}

    # -- asking for streams (rule 1) --------------------------------------------------------------
    def request(self, stream: StreamReplica, inbound: Inbound, hosted: Hosted) -> None:
        """Ask ``stream``'s sender for what ``hosted`` needs now, if its node is reachable."""
        if not self.out.reachable(inbound.node):
            return
        if hosted.state is ReplicaState.JOINING:
            if inbound.state is not InboundState.HOLDING:
                inbound.state = advance(inbound.state, InboundEvent.HOLD)
                self.out.send(inbound.node, Hold(stream))
        elif hosted.state in _TAKING:
            failover = self.failover
            if not failover.follows(stream, hosted):
                failover.stand_by(stream, inbound, hosted)     # the failover model: not the one followed
                return
            epoch = inbound.epoch if inbound.state is InboundState.FOLLOWING else None
            self.out.send(inbound.node, Resume(stream, epoch, inbound.next if epoch is not None else 0))

    def request_all(self, hosted: Hosted) -> None:
        for stream, inbound in self.inbound.items():
            if stream.target is hosted.replica or stream.target == hosted.replica:
                self.request(stream, inbound, hosted)

    def on_peer_up(self, node: str) -> None:
        for stream, inbound in self.inbound.items():
            if inbound.node == node:
                hosted = self.hosted[stream.target]
                if inbound.state is InboundState.HOLDING:
                    inbound.state = advance(inbound.state, InboundEvent.PEER_UP)   # ask again
                self.request(stream, inbound, hosted)

    def on_not_hosted(self, src: str, message: NotHosted, now: int) -> Iterator[Intent]:
        """Rule 6: the sender's node does not host the sending replica; stop waiting for it.
        Yields intents (:mod:`engine.core.intents` rule 2)."""
        inbound = self.inbound.get(message.stream)
        if inbound is None or inbound.node != src or inbound.state is InboundState.VANISHED:
            return
        inbound.state = advance(inbound.state, InboundEvent.NOT_HOSTED)
        self.counters["vanished_streams"] += 1
        hosted = self.hosted[message.stream.target]
        yield from self.failover.disconnected(message.stream)   # a port that followed it takes its next preference
        if hosted.logic is not None and hosted.state in _TAKING:
            yield CheckPort(hosted, message.stream.port)

    # -- stream heads (rule 2) --------------------------------------------------------------------
    def on_head(self, src: str, head: StreamHead, now: int) -> Iterator[Intent]:
        """Rule 2; yields intents (:mod:`engine.core.intents` rule 2: a rebuilding port's adopted
        frontier is routed before the stream replica is positioned, as a direct call was)."""
        inbound = self.inbound.get(head.stream)
        if inbound is None or inbound.node != src:
            self.counters["stale_requests"] += 1
            return
        hosted = self.hosted[head.stream.target]
        if hosted.state not in _TAKING or inbound.state is InboundState.HOLDING:
            return                                     # joining: positions come from the snapshot
        if inbound.state is InboundState.STANDBY:
            return                                     # a Resume overtaken by a switch (failover modes)
        following = inbound.state is InboundState.FOLLOWING
        if following and inbound.epoch == head.epoch and inbound.next >= head.offset:
            return                                     # continues what we hold
        port = head.stream.port
        if hosted.logic is not None:
            dedup = hosted.logic.filters[port]
            if hosted.state is ReplicaState.REBUILDING and port not in hosted.adopted:
                if inbound.index is None or not following or inbound.epoch != head.epoch:
                    inbound.index = dedup.add_replica()
                yield AdoptFrontier(hosted, port, head.frontier)
            elif following and inbound.epoch == head.epoch:
                self.counters["gaps"] += 1             # its log was trimmed past what we hold
                dedup.rebase(inbound.index, self._base(head, inbound))
            elif head.lineage is not None and self._continue(head, inbound, dedup):
                inbound.state = advance(inbound.state, InboundEvent.HEAD)
                return                                 # a joined replica continuing one we hold
            else:
                inbound.index = dedup.add_replica(self._base(head, inbound))   # a new incarnation: a new stream replica
        inbound.epoch, inbound.next = head.epoch, head.offset
        inbound.state = advance(inbound.state, InboundEvent.HEAD)
        if hosted.logic is not None and hosted.state in _TAKING:
            yield CheckPort(hosted, port)

    @staticmethod
    def _base(head: StreamHead, inbound: Inbound) -> int | None:
        """What the receiver's port must reach before this stream's punctuations count: the head's
        frontier — except that a *new incarnation* of a stream replica we followed, claiming to be
        whole from the start (frontier −∞), cannot know what was lost before it started (an entry
        point or a replica rebuilt with no live peer): its first punctuation is its base (None)."""
        if head.frontier == NO_PUNCTUATION and inbound.epoch is not None and inbound.epoch != head.epoch:
            return None
        return head.frontier

    def _continue(self, head: StreamHead, inbound: Inbound, dedup) -> bool:
        """Rule 5: if ``head`` continues a stream this port holds far enough, take it as that
        stream's continuation — seeded counts, trusted at once — and return True."""
        replica, epoch, start, end = head.lineage
        lineage = StreamReplica(replica, head.stream.target, head.stream.port)
        held = self.inbound.get(lineage)
        if held is None or held.state not in _HELD or held.epoch != epoch or held.next < start:
            return False                               # (a standby we followed before still holds what it held)
        if held.index is not None and dedup.waiting(held.index):
            return False                               # it had a gap here: its counts up to its base are not whole
        if held.next <= end:                           # we hold it up to a point inside the copy
            counts, at = dedup.counts(held.index), held.next
        else:                                          # past it: the counts noted at its mark
            counts, at = self.checkpoints.get((lineage, epoch, end)), end
            if counts is None:
                return False
        inbound.index = dedup.add_replica()
        dedup.seed(inbound.index, counts)
        inbound.epoch, inbound.next = head.epoch, head.offset + (at - start)
        self.counters["continued_streams"] += 1
        return True

    def hold_acks(self, stream: StreamReplica, offset: int, until: int) -> None:
        """Acknowledge ``stream`` no further than ``offset`` until ``until`` (a peer is joining from
        our positions: lifecycle rule 1)."""
        held = self.ack_holds.get(stream)
        self.ack_holds[stream] = (min(offset, held[0]) if held else offset, max(until, held[1]) if held else until)

    def _held_ack(self, stream: StreamReplica, offset: int, now: int) -> int:
        held = self.ack_holds.get(stream)
        if held is None:
            return offset
        if now >= held[1]:
            del self.ack_holds[stream]
            return offset
        return min(offset, held[0])

    def on_mark(self, src: str, mark: Mark, now: int) -> None:
        """A peer of the sender took a snapshot at this point of the stream: note our counts (rule 5)."""
        inbound = self.inbound.get(mark.stream)
        if inbound is None or inbound.node != src or inbound.epoch != mark.epoch or inbound.next != mark.offset \
                or inbound.state is not InboundState.FOLLOWING or inbound.index is None:
            return
        hosted = self.hosted[mark.stream.target]
        checkpoints = self.checkpoints
        checkpoints[(mark.stream, mark.epoch, mark.offset)] = hosted.logic.filters[mark.stream.port].counts(inbound.index)
        while len(checkpoints) > MAX_CHECKPOINTS:
            del checkpoints[next(iter(checkpoints))]

    # -- batches (rules 3, 4) ---------------------------------------------------------------------
    def on_batch(self, src: str, batch: Batch, now: int) -> Iterable[Intent]:
        """Rules 3, 4; returns the intents of :meth:`accept`."""
        inbound = self.inbound.get(batch.stream)
        if inbound is None or inbound.node != src:
            self.counters["stale_batches"] += 1        # removed, or never connected here
            return NONE
        if batch.epoch != inbound.epoch or inbound.state is not InboundState.FOLLOWING:
            self.counters["stale_batches"] += 1        # an older incarnation, or not positioned yet
            return NONE
        hosted = self.hosted[batch.stream.target]
        records, stream = batch.records, batch.stream
        logic = hosted.logic
        if type(records) is EncodedRecords:
            pass                                       # another node core's output, in this process
        elif type(records) is PackedRecords and logic is not None and logic.knows(stream.port, records.key):
            self.counters["known_batches"] += 1        # bytes a duplicate filter knows: not read
        else:                                          # (they were checked when they first came)
            width = len(self.schemas[stream.source.name]) + 1
            try:
                malformed = not set(map(len, records)) <= {width}      # in C: no Python call per record
            except WireError:
                malformed = True
            if malformed:
                self.counters["malformed_batches"] += 1
                self.out.event(ProtocolError(src, f"malformed batch on {stream.source} -> {stream.target} "
                                              f"at offset {batch.offset}"))
                return NONE
        if batch.offset > inbound.next:
            self.counters["protocol_errors"] += 1
            self.out.event(ProtocolError(src, f"batch on {stream.source} -> {stream.target} skips offsets "
                                          f"{inbound.next}..{batch.offset - 1}"))
            return NONE
        intents = self.accept(stream, inbound, hosted, batch.offset, records, batch.punctuation, now, batch.path)
        if batch.punctuation is not None and src != self.out.name:
            offset = inbound.next
            if self.ack_holds:
                offset = self._held_ack(stream, offset, now)
            self.ack(src, stream, inbound.epoch, offset, now)   # cumulative, by punctuation
        return intents

    def accept(self, stream: StreamReplica, inbound: Inbound, hosted: Hosted, offset: int, records,
               punctuation: int | None, now: int, path: tuple[str, ...]) -> tuple[Intent, ...]:
        """Items ``offset …`` of a positioned stream replica: skip what we hold, process the rest.
        Returns a rebuilding replica's horizon check when its frontier moved (an intent for the
        lifecycle), else nothing."""
        skip = inbound.next - offset
        n = len(records) + (punctuation is not None)
        if skip >= n:
            return NONE
        inbound.next = offset + n
        if punctuation is not None:
            inbound.punctuation = punctuation          # §V-C: how late this stream replica is
        key = records.key if type(records) in _KEYED else None
        if skip:
            records, key = records[skip:], None
        hosted.records_in += len(records)
        out, forwarded = hosted.logic.on_batch(stream.port, inbound.index, records, punctuation, key)
        if self.tracer is not None:
            self.tracer.arrival(stream, hosted, records, key, punctuation, now, path)   # docs/tracing.md
        if out or forwarded is not None:               # (a copy another stream replica brought first: nothing)
            self.emit(hosted, out, forwarded, now, path)
        if punctuation is not None:
            self.failover.after_punctuation(hosted, stream.port)
        if forwarded is not None and hosted.state is ReplicaState.REBUILDING:
            return (CheckHorizon(hosted),)
        return NONE
