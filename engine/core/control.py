"""The control plane of a node core: deploy and remove replicas, connect and disconnect stream replicas.

Rules of this module:

1. Control messages come from the node's own configuration, a coordinator, or a peer node; they are
   applied the same way, mid-stream or at start (messages rule 4).
2. A deployed replica starts joining (:mod:`engine.core.lifecycle`); a connected stream replica
   starts pending at both ends — the sender keeps its log from where it starts, the receiver asks
   for the stream when its replica can take it.
3. Removing a replica tells the nodes at the other end of each of its stream replicas
   (:class:`~engine.messages.DisconnectStream`), so upstream logs stop waiting for it; a node that
   is not connected is told when it comes back.
4. A message that names what this node does not host, or a replica it cannot build, is counted and
   ignored: a control frame can never stop a node.
5. Only the node itself and the cluster's coordinator may deploy, remove or connect; a peer may
   only disconnect a stream replica whose other end it is (:mod:`engine.core.control_policy`).
   Refusals are counted and reported like rule 4's.
6. Disconnecting an input changes what its port can hear: the port is checked at once (lifecycle
   rule 4), so a port left with only inputs complete above it rejoins — garbage collection that
   takes a port's last whole input after a revival based above it (§V-B, §V-C) left it stalled
   for good before.
7. Connecting a stream replica the receiver already has, from the same node, while it waits for
   its sender's answer or was told the sender does not host it (``UNPOSITIONED``, ``VANISHED``),
   asks for it again: a coordinator re-connects what a restarted node lost
   (docs/placement.md, "A server that restarted"), and the receiver's first request may have
   expired at the sender before the route was back.
8. Connecting a stream replica this node already has with its other end on *another* node follows
   it there: the replica at that end was placed again under the same name (a coordinator elected
   after the one that placed it knows only what runs, and revives the lost replica with its free
   index, docs/placement.md, "A crashed coordinator").  The sender's route is made anew towards the
   new node, from its log's base; the receiver drops its input from the old node (as a disconnect
   would, rule 6) and asks the new one.  Before, both ends kept the old node: the revived replica's
   requests were stale at its sender and it never received a record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from replicast.engine.core.control_policy import ControlPolicy
from replicast.engine.core.events import ControlRefused
from replicast.engine.core.hosted import Hosted, Inbound, Origin, ReplicaKind, Route, Start
from replicast.engine.core.configure import peer_stream
from replicast.engine.core.intents import (CheckPort, Connected, ConnectPeer, DisconnectPeer, ForgetReplica,
                                           ForgetStamped, Intent, RequestStream, Retrim, StartReplica, TrackStamped)
from replicast.engine.core.modes import TRAITS
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.stamp_state import StampState
from replicast.engine.core.states import InboundState, ReplicaEvent, ReplicaState, advance
from replicast.engine.entry import EntryMode, EntryPoint
from replicast.engine.messages import ConnectStream, DeployReplica, DisconnectStream, RemoveReplica
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.key_seals import key_sealing
from replicast.operators.replica import OperatorReplica, application_sink

if TYPE_CHECKING:
    from replicast.engine.core.events import NodeOptions
    from replicast.engine.core.failover import AllFeed, Failover
    from replicast.engine.core.pairs import Pairs, Unpaired
    from replicast.operators.query import Query


#: Inbound states in which a repeated ConnectStream asks for the stream replica again (rule 7).
_ASK_AGAIN = (InboundState.UNPOSITIONED, InboundState.VANISHED)


class Control:
    """Applies control messages to one node's tables.  It reads the query and the node's options,
    writes the hosted replicas, their routes and the inbound table, sends through the outbox, and
    calls the mode's plug-ins (failover, pairs).  What the other components do about a replica or
    stream replica it starts or stops it returns as intents the node core routes
    (:mod:`engine.core.intents`): the lifecycle's joins, timers and port checks
    (:class:`~engine.core.intents.StartReplica`, :class:`~engine.core.intents.ForgetReplica`,
    :class:`~engine.core.intents.CheckPort`), the stamper's tracking and peers
    (:class:`~engine.core.intents.TrackStamped`, :class:`~engine.core.intents.ForgetStamped`,
    :class:`~engine.core.intents.ConnectPeer`, :class:`~engine.core.intents.DisconnectPeer`), the
    sender's retention and early requests (:class:`~engine.core.intents.Retrim`,
    :class:`~engine.core.intents.Connected`) and the receiver's requests
    (:class:`~engine.core.intents.RequestStream`).  It holds no other component."""

    def __init__(self, query: "Query", options: "NodeOptions", hosted: dict[ReplicaId, Hosted],
                 inbound: dict[StreamReplica, Inbound], outbox: Outbox, counters: dict[str, int], *,
                 start: Start, new_epoch: Callable[[int], int], failover: "Failover | AllFeed",
                 pairs: "Pairs | Unpaired"):
        self.query, self.options, self.hosted, self.inbound = query, options, hosted, inbound
        self.out, self.counters, self.start, self.new_epoch = outbox, counters, start, new_epoch
        self.failover, self.pairs = failover, pairs
        self.to_tell: dict[str, list[DisconnectStream]] = {}    # rule 3: for nodes not connected now
        self.policy = ControlPolicy(outbox.name, hosted, inbound, self.peer_stream)   # rule 5

    def peer_stream(self, stream: StreamReplica) -> bool:
        """Whether ``stream`` only tells entry-stamped replicas where a peer is
        (:func:`engine.core.configure.peer_stream`)."""
        return peer_stream(self.query, self.options.entry_modes, stream)

    def guarded(self, handler: Callable) -> Callable:
        """``handler`` behind the policy (rule 5): what the policy refuses is counted, not applied."""
        def apply(src: str, message, now: int):
            reason = self.policy.refusal(src, message)
            if reason is None:
                return handler(src, message, now)           # its intents, for the node core to route
            self._refuse(reason, src)
            return None
        return apply

    def new_logic(self, replica: ReplicaId) -> OperatorReplica | None:
        """Fresh input machinery for a replica of ``replica.name`` (None for an entry point)."""
        query, name = self.query, replica.name
        if name in query.applications:
            return application_sink(0, query.applications[name].ordered)
        if name in query.operators:
            logic = OperatorReplica(query.new_operator(name), [0] * len(query.inputs_of(name)),
                                    query.order_sensitive(name), merged=TRAITS[self.options.mode].merged_order,
                                    sealing=key_sealing(query, name))
            self.pairs.tap_into(replica, logic)                      # process pairs see every step
            return logic
        return None

    def deploy(self, src: str, message: DeployReplica, now: int) -> Iterator[Intent]:
        replica = message.replica
        if replica in self.hosted:
            return
        name, query = replica.name, self.query
        if name in query.streams:
            kind = ReplicaKind.ENTRY
            entry = EntryPoint(query.streams[name], self.options.entry_modes.get(name, EntryMode.SOURCE))
        elif name in query.applications or name in query.operators:
            kind = ReplicaKind.APPLICATION if name in query.applications else ReplicaKind.OPERATOR
            entry = None
        else:
            self._refuse(f"cannot deploy {replica}: {name!r} is not in the query", src)
            return
        hosted = self.hosted[replica] = Hosted(replica, kind, self.new_logic(replica), entry, message.peers,
                                                    self.new_epoch(now))
        if self.options.trace_paths:
            hosted.hop = (f"{replica}@{self.out.name}",)
        if src == self.out.name and self.start is Start.FRESH:          # a first start's own configuration
            hosted.origin = Origin.FIRST_START
        self.pairs.attach(hosted)
        if entry is not None and entry.mode is EntryMode.ENTRY:
            hosted.stamp = StampState({i: n for i, n in enumerate(message.peers) if n}, {})
        yield TrackStamped(hosted)
        yield StartReplica(hosted)

    def remove(self, src: str, message: RemoveReplica, now: int) -> Iterator[Intent]:
        hosted = self.hosted.pop(message.replica, None)
        if hosted is None:
            self._refuse(f"cannot remove {message.replica}: it is not hosted here", src)
            return
        hosted.state = advance(hosted.state, ReplicaEvent.REMOVE)
        yield ForgetReplica(message.replica)
        yield ForgetStamped(message.replica)
        self.pairs.forget(message.replica)
        self.failover.forget(message.replica)
        for stream in [s for s in self.inbound if s.target == message.replica]:
            self._tell(self.inbound.pop(stream).node, DisconnectStream(stream))
        for stream, route in hosted.routes.items():
            self._tell(route.node, DisconnectStream(stream))
        if hosted.stamp is not None:                  # its peers stop counting on it (stamper)
            for index, node in hosted.stamp.peers.items():
                if index != message.replica.index:
                    self._tell(node, DisconnectStream(StreamReplica(message.replica,
                                                                    ReplicaId(message.replica.name, index), 0)))

    def connect(self, src: str, message: ConnectStream, now: int) -> Iterator[Intent]:
        stream = message.stream
        if self.peer_stream(stream):                  # entry → entry, entry-stamped: where a peer is
            for mine, other, node in ((stream.source, stream.target, message.target_node),
                                      (stream.target, stream.source, message.source_node)):
                hosted = self.hosted.get(mine)
                if hosted is not None and hosted.stamp is not None and node:
                    yield ConnectPeer(hosted, other.index, node)
            return
        if message.source_node == self.out.name:
            source = self.hosted.get(stream.source)
            if source is None:
                self._refuse(f"cannot connect {stream.source} -> {stream.target}: {stream.source} is not hosted here", src)
            else:
                known = source.routes.get(stream)
                if known is None or known.node != message.target_node:           # rule 8: placed again
                    if known is not None:
                        self.counters["moved_streams"] += 1
                    source.parked.pop(stream, None)
                    route = source.routes[stream] = Route(message.target_node, source.log.base)   # pins what is retained
                    yield Retrim(source)
                    yield Connected(stream, route)
        inbound = self.inbound.get(stream)
        if message.target_node == self.out.name and inbound is not None:
            if inbound.node == message.source_node:
                if inbound.state in _ASK_AGAIN:                                  # rule 7
                    yield RequestStream(stream, inbound, self.hosted[stream.target])
                return
            del self.inbound[stream]                                             # rule 8: placed again
            self.counters["moved_streams"] += 1
            yield from self.failover.disconnected(stream)
        if message.target_node == self.out.name:
            target = self.hosted.get(stream.target)
            if target is None:
                self._refuse(f"cannot connect {stream.source} -> {stream.target}: {stream.target} is not hosted here", src)
                return
            if target.logic is None or stream.port >= len(target.logic.filters):
                self._refuse(f"cannot connect {stream.source} -> {stream.target}: no input port {stream.port}", src)
                return
            inbound = self.inbound[stream] = Inbound(message.source_node, now)
            yield RequestStream(stream, inbound, target)

    def disconnect(self, src: str, message: DisconnectStream, now: int) -> Iterator[Intent]:
        """Rules 3, 6; yields the failover plug-in's request of the stream its port follows next
        (:mod:`engine.core.intents` rule 2)."""
        stream = message.stream
        if self.peer_stream(stream):
            for mine, other in ((stream.source, stream.target), (stream.target, stream.source)):
                hosted = self.hosted.get(mine)
                if hosted is not None and hosted.stamp is not None:
                    yield DisconnectPeer(hosted, other.index)
            return
        if self.inbound.pop(stream, None) is not None:
            yield from self.failover.disconnected(stream)
            target = self.hosted.get(stream.target)
            if target is not None and target.logic is not None \
                    and target.state in (ReplicaState.LIVE, ReplicaState.REBUILDING):
                yield CheckPort(target, stream.port)      # rule 6: its port's inputs changed
        source = self.hosted.get(stream.source)
        if source is not None and source.routes.pop(stream, None) is not None:
            source.parked.pop(stream, None)
            yield Retrim(source)

    def on_peer_up(self, node: str) -> None:
        for message in self.to_tell.pop(node, ()):
            self.out.send(node, message)

    def _tell(self, node: str, message: DisconnectStream) -> None:
        if node == self.out.name or node in self.out.connected:
            self.out.send(node, message)
        else:
            self.to_tell.setdefault(node, []).append(message)

    def _refuse(self, reason: str, src: str) -> None:
        self.counters["refused_control"] += 1
        self.out.event(ControlRefused(src, reason))
