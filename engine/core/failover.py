"""The failover model (§VII): each port of a replica follows one upstream replica and keeps the rest on standby.

Used by the modes whose :class:`~engine.core.modes.Traits` say ``follows_one`` (``failover``, and
the baselines built on it).  Every stream replica is connected as in replication; only
the receiver's choice differs.

Rules of this module:

1. Each port of a hosted operator or application follows one upstream replica, its *active*
   stream replica: replica ``j`` prefers upstream ``j mod k``, then the next indexes
   (:func:`engine.core.modes.preference`).  Entry points in entry-stamped mode emit what the
   stamper of their view stamped (:mod:`engine.core.stamper`), not this module.
2. The port asks the active stream replica for its stream (:class:`~engine.messages.Resume`) and
   every other one to stand by (:class:`~engine.messages.Standby`, with the port's punctuation).
   Each time the port's punctuation advances, the standbys are told, so their logs keep only what a
   switch would need and memory stays bounded as in replication.
3. The failure detector: an upstream node is *suspected* once nothing was heard from it for
   ``peer_timeout`` (since this core started, if never).  A connection that breaks is not enough —
   links come back — which is what makes failover pay the detector's time after a crash.  At every
   heartbeat tick a port whose active upstream is suspected switches to its next preferred upstream
   that is not (event + ``failovers`` counter).  The new stream starts where its standby log does;
   its head's frontier is at or below the port's punctuation (rule 2), so it is trusted at once,
   and the duplicate filter drops what the port already has (§IV-B).
4. A followed stream replica that is complete only above where the port is — a new incarnation or
   a gap whose base the port has not reached (:mod:`engine.core.receiver` rule 2), e.g. an
   entry-stamped member that left a view and starts again at the stamper's last punctuation — is
   never trusted by itself: in replication the other stream replicas bring the port to its base,
   but here they stand by and send nothing.  So at every heartbeat tick such a port switches, as
   for a suspected node, to its next preferred upstream that is reachable, not suspected and not
   known to be complete only above the port (a standby keeps its log above the port's
   punctuation, rule 2, so its stream fills the gap and the held punctuations then count).  With
   no such upstream it stays: every input it can hear is then complete only above the port, and
   the replica rejoins (lifecycle rule 4).
5. A joined replica follows what its donor followed (the snapshot's positions); a port with no
   position takes its preference again.
"""

from __future__ import annotations

from typing import Iterator

from replicast.engine.core.events import ReplicaChanged
from replicast.engine.core.heard import Heard
from replicast.engine.core.hosted import Hosted, Inbound, ReplicaKind
from replicast.engine.core.intents import NONE, CheckPort, Intent, RequestStream
from replicast.engine.core.modes import preference
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.states import InboundEvent, InboundState, ReplicaState, advance
from replicast.engine.messages import Standby
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import ReplicaId, StreamReplica

Port = tuple[ReplicaId, int]


class AllFeed:
    """The modes where every upstream replica feeds every port (``replication``, ``none``): the
    plug-in the node core holds instead of :class:`Failover`, chosen once at construction."""

    def follows(self, stream: StreamReplica, hosted: Hosted) -> bool:
        return True

    def stand_by(self, stream: StreamReplica, inbound: Inbound, hosted: Hosted) -> None:
        raise AssertionError("no standbys where every upstream feeds")   # follows() is always True

    def after_punctuation(self, hosted: Hosted, port: int) -> None:
        pass

    def restored(self, hosted: Hosted) -> None:
        pass

    def disconnected(self, stream: StreamReplica) -> tuple[Intent, ...]:
        return NONE

    def forget(self, replica: ReplicaId) -> None:
        pass

    def check(self, now: int) -> tuple[Intent, ...]:
        return NONE


class Failover:
    """Which upstream replica each port of one node's hosted replicas follows.  It reads the hosted
    replicas and inbound stream replicas, the failure detector (:class:`~engine.core.heard.Heard`),
    and sends through the outbox.  What it asks of the receiver (request a stream the port now
    follows) and of the lifecycle (check a port with nothing to switch to) it yields as intents
    from :meth:`check` and :meth:`disconnected` (:mod:`engine.core.intents`): it holds neither."""

    def __init__(self, hosted: dict[ReplicaId, Hosted], inbound: dict[StreamReplica, Inbound], outbox: Outbox,
                 counters: dict[str, int], heard: Heard):
        self.hosted, self.inbound, self.out, self.counters, self.heard = hosted, inbound, outbox, counters, heard
        self.active: dict[Port, ReplicaId] = {}        # (replica, port) -> upstream replica it follows
        self.told: dict[StreamReplica, int] = {}       # standby stream replica -> punctuation last told

    # -- rule 1, 2: which stream replica a port follows -------------------------------------------
    def follows(self, stream: StreamReplica, hosted: Hosted) -> bool:
        """Whether ``stream`` is the one its port follows (the port's choice is made on first ask)."""
        if hosted.kind is ReplicaKind.ENTRY:
            return True
        key = (stream.target, stream.port)
        active = self.active.get(key)
        if active is None:
            active = self.active[key] = self._choose(key, suspected=())
        return active == stream.source

    def stand_by(self, stream: StreamReplica, inbound: Inbound, hosted: Hosted) -> None:
        """Tell ``stream``'s sender to stand by with the port's punctuation (rule 2)."""
        inbound.state = advance(inbound.state, InboundEvent.STAND_BY)
        p = hosted.logic.filters[stream.port].max_punctuation if hosted.logic is not None else NO_PUNCTUATION
        self.told[stream] = p
        self.out.send(inbound.node, Standby(stream, p))

    def after_punctuation(self, hosted: Hosted, port: int) -> None:
        """The port's punctuation may have advanced: tell its standbys that are reachable (rule 2)."""
        p = hosted.logic.filters[port].max_punctuation
        for stream, inbound in self.inbound.items():
            if stream.target == hosted.replica and stream.port == port and inbound.state is InboundState.STANDBY \
                    and self.told.get(stream, NO_PUNCTUATION) < p:
                self.told[stream] = p
                self.out.send(inbound.node, Standby(stream, p))

    def restored(self, hosted: Hosted) -> None:
        """``hosted`` restored a snapshot: each port follows what the donor followed (rule 4)."""
        for stream, inbound in self.inbound.items():
            if stream.target == hosted.replica:
                self.active.pop((stream.target, stream.port), None)
        for stream, inbound in self.inbound.items():
            if stream.target == hosted.replica and inbound.state is InboundState.FOLLOWING:
                self.active[(stream.target, stream.port)] = stream.source

    def disconnected(self, stream: StreamReplica) -> Iterator[Intent]:
        """``stream`` was disconnected: if its port followed it, the port takes its next preference
        (yields the request for it: :mod:`engine.core.intents` rule 2)."""
        key = (stream.target, stream.port)
        if self.active.get(key) != stream.source:
            return
        del self.active[key]
        hosted = self.hosted.get(stream.target)
        for other, inbound in self.inbound.items():
            if hosted is not None and (other.target, other.port) == key and self.follows(other, hosted):
                if inbound.state is InboundState.STANDBY:
                    inbound.state = advance(inbound.state, InboundEvent.FOLLOW)
                yield RequestStream(other, inbound, hosted)

    def forget(self, replica: ReplicaId) -> None:
        """``replica`` was removed."""
        for key in [k for k in self.active if k[0] == replica]:
            del self.active[key]

    # -- rule 3: the failure detector -------------------------------------------------------------
    def check(self, now: int) -> Iterator[Intent]:
        """Switch every port whose followed upstream's node is suspected (rule 3) or whose followed
        stream is complete only above the port (rule 4); called at heartbeat ticks.  Yields the
        requests of the streams switched to and the checks of ports with nothing to switch to
        (:mod:`engine.core.intents` rule 2: each is routed before the next port is looked at)."""
        followed = {}
        for stream, inbound in self.inbound.items():
            if self.active.get((stream.target, stream.port)) == stream.source:
                followed[(stream.target, stream.port)] = inbound
        for key, inbound in followed.items():
            node = inbound.node
            if self.heard.suspected(node, now):
                suspected = {i.node for s, i in self.inbound.items() if (s.target, s.port) == key
                             and self.heard.suspected(i.node, now)}
                choice: ReplicaId | None = self._choose(key, suspected)
                if choice != self.active[key]:
                    seconds = (now - self.heard.last_heard(node, self.heard.started)) / 1e6
                    yield from self._switch(key, choice, f"nothing heard from node {node} for {seconds:.1f} s")
            elif inbound.state is InboundState.FOLLOWING and self.above_port(key, inbound):
                choice = self._whole(key, now)
                hosted = self.hosted[key[0]]
                if choice is None and hosted.state in (ReplicaState.LIVE, ReplicaState.REBUILDING):
                    yield CheckPort(hosted, key[1])          # nothing to switch to: it rejoins if stuck
                elif choice != self.active[key]:
                    yield from self._switch(key, choice, f"{self.active[key]}'s stream is complete only above "
                                                         f"the port's punctuation")

    def above_port(self, key: Port, inbound: Inbound) -> bool:
        """Whether the stream replica of ``inbound`` is known to be complete only above where port
        ``key`` is (its punctuations wait for the port to reach its base: rule 4)."""
        hosted = self.hosted.get(key[0])
        return hosted is not None and hosted.logic is not None and inbound.index is not None \
            and hosted.logic.filters[key[1]].waiting(inbound.index)

    def _order(self, key: Port) -> tuple[list[ReplicaId], dict[ReplicaId, Inbound]]:
        """Port ``key``'s upstream replicas, preferred first (rule 1), and their inbound streams."""
        target, port = key
        candidates = {s.source: i for s, i in self.inbound.items() if s.target == target and s.port == port}
        by_index = {r.index: r for r in candidates}
        return [by_index[i] for i in preference(target.index, list(by_index))], candidates

    def _choose(self, key: Port, suspected) -> ReplicaId:
        """The preferred upstream replica of port ``key`` whose node is not suspected (else the preferred)."""
        order, candidates = self._order(key)
        return next((r for r in order if candidates[r].node not in suspected), order[0])

    def _whole(self, key: Port, now: int) -> ReplicaId | None:
        """The preferred upstream replica of port ``key`` whose node is reachable and not suspected and
        whose stream is not known to be complete only above the port (else None: rule 4)."""
        order, candidates = self._order(key)
        return next((r for r in order if self.out.reachable(candidates[r].node)
                     and not self.heard.suspected(candidates[r].node, now)
                     and not self.above_port(key, candidates[r])), None)

    def _switch(self, key: Port, choice: ReplicaId, why: str) -> Iterator[Intent]:
        target, port = key
        old = self.active[key]
        self.active[key] = choice
        self.counters["failovers"] += 1
        self.out.event(ReplicaChanged(target, "live", "live", f"port {port} fails over from {old} to {choice}: {why}"))
        hosted = self.hosted[target]
        for stream, inbound in self.inbound.items():
            if stream.target != target or stream.port != port:
                continue
            if stream.source == old and inbound.state is not InboundState.STANDBY:
                self.stand_by(stream, inbound, hosted)
            elif stream.source == choice:
                inbound.state = advance(inbound.state, InboundEvent.FOLLOW)
                yield RequestStream(stream, inbound, hosted)
