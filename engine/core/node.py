"""The node core: replicas, entry points and applications of one server, with no I/O (DESIGN.md §6, §6a).

Rules of this module (h11 style):

1. No clock, socket, thread, asyncio, simpy, time or random.  Time enters as ``now`` (int µs,
   keyword-only) on every call; the core never asks for it.
2. Inputs are calls: :meth:`NodeCore.receive` (a message from a node, by name),
   :meth:`~NodeCore.apply` (control from the node's own configuration),
   :meth:`~NodeCore.on_source` (a payload from an external source), :meth:`~NodeCore.on_peer_up` /
   :meth:`~NodeCore.on_peer_down` (the driver's connection state), :meth:`~NodeCore.handle_timer`
   and :meth:`~NodeCore.set_coordinator` (whose control messages count as the node's own).
3. Outputs are drained: :meth:`~NodeCore.votes_to_persist` (an intent: store the voter's votes
   durably, before any message of the same call leaves), :meth:`~NodeCore.messages_to_send`
   (``(node, message)`` pairs, in order per node), :meth:`~NodeCore.events` (deliveries, dead
   letters, protocol errors, state changes …) and :meth:`~NodeCore.next_timer`.  After any input
   call the driver drains all four, in that order.
4. The core assumes per-node FIFO delivery and nothing else: messages to a disconnected node are
   not queued; after :meth:`on_peer_up` each receiver asks for what it lacks (messages rule 6).
   Messages a core addresses to itself never leave it.
5. The work is split by job: :mod:`~engine.core.sender` (output logs, routes, acks, retention),
   :mod:`~engine.core.receiver` (inbound positions, batches), :mod:`~engine.core.lifecycle`
   (joining, rebuilding, snapshots), :mod:`~engine.core.control` (deploy, remove, connect,
   disconnect), :mod:`~engine.core.stamping` (sources), :mod:`~engine.core.stamper`,
   :mod:`~engine.core.view_changes` and :mod:`~engine.core.views` (entry-stamped mode: who stamps), :mod:`~engine.core.stats`,
   and, given a ``coordination`` setup, :mod:`~engine.core.coordination` (reports to the elected
   placement coordinator, and the coordinator itself on the elected node, §V).
6. Each component is given what it reads — the tables it works on (hosted replicas, inbound
   stream replicas), the :class:`~engine.core.outbox.Outbox`, counters, option values, and
   callbacks for what it asks a component below it to do — never this core; no module of
   ``engine/core/`` imports this one (``tests/engine/test_core_parts.py``; each is built alone there
   and in ``tests/engine/test_core_alone.py``).  What a component asks of another that it is not
   handed a callback for (the lifecycle and the control ask everything so) it returns as intents,
   which :meth:`NodeCore._route` hands on (:mod:`engine.core.intents`).  The engine mode's parts are plug-ins chosen here once:
   :class:`~engine.core.failover.Failover` or :class:`~engine.core.failover.AllFeed`,
   :class:`~engine.core.pairs.Pairs` or :class:`~engine.core.pairs.Unpaired`; so is placement's,
   :class:`~engine.core.coordination.Coordination` or
   :class:`~engine.core.uncoordinated.Uncoordinated`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from replicast.engine.core.control import Control
from replicast.engine.core.events import Event, NodeOptions
from replicast.engine.core.failover import AllFeed, Failover
from replicast.engine.core.heard import Heard
from replicast.engine.core.hosted import Hosted, Inbound, Start
from replicast.engine.core.intents import (AdoptFrontier, CheckHorizon, CheckPort, Connected, ConnectPeer,
                                           DisconnectPeer, Emit, ForgetReplica, ForgetStamped, HoldAcks, Intent,
                                           Rejoin, ReleaseHeld, RequestInputs, RequestStream, Retrim, ServeParked,
                                           StartReplica, StartStamping, StepJoin, TrackStamped)
from replicast.engine.core.key_seals import KeySealRelay
from replicast.engine.core.lifecycle import Lifecycle
from replicast.engine.core.links import Links
from replicast.engine.core.modes import TRAITS
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.pairs import Pairs, Unpaired
from replicast.engine.core.receiver import Receiver
from replicast.engine.core.sender import Sender
from replicast.engine.core.stamper import Stamper
from replicast.engine.core.stamping import Stamping
from replicast.engine.core.states import InboundState, ReplicaState
from replicast.engine.core.stats import COUNTERS, Latency, server_report, statistics
from replicast.engine.core.uncoordinated import Uncoordinated
from replicast.engine.core.views import PersistVotes, Voter, Votes
from replicast.engine.messages import (Ack, Batch, Committed, ConnectStream, DeployReplica,
                             DisconnectStream, Heartbeat, Hold, JoinStamping, KeySeals, Mark, Message, NoSnapshot, NotHosted,
                             RemoveReplica, Report, Resume, Snapshot,
                             SnapshotRequest, StampAck, Stamped, Standby, Statistics, StatisticsRequest, StreamHead,
                             ViewBallot, ViewDecided, ViewReply)
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.query import Query
from replicast.placement.reports import ServerReport

if TYPE_CHECKING:
    from replicast.engine.core.coordination import Coordination, CoordinationSetup
    from replicast.engine.core.tracepoints import Tracer


class NodeCore:
    """The pure node: see the module docstring for its contract."""

    def __init__(self, name: str, query: Query, options: NodeOptions = NodeOptions(), *, now: int,
                 incarnation: int | None = None, start: Start = Start.FRESH,
                 coordination: "CoordinationSetup | None" = None, votes: Votes = Votes()):
        self.name = name
        #: Whether this process continues an earlier one of this node (the driver knows: a state
        #: file, a simulated restart).  Entry points deployed by a first start claim their whole
        #: stream; any other start of an entry point with no live peer cannot know what it missed.
        self.start = start
        # Epochs name replica incarnations (messages rule 2) and must never repeat for one replica:
        # a restarted process starts above every epoch of the one before — its start time in µs
        # does on a real clock; a driver that may restart a node within one µs (a simulator, a
        # test) passes ``incarnation`` above the old core's :meth:`max_epoch`.
        self.incarnation = now if incarnation is None else incarnation
        self.query = query
        self.options = options
        self.hosted: dict[ReplicaId, Hosted] = {}
        self.inbound: dict[StreamReplica, Inbound] = {}
        self.connected: set[str] = set()
        self.rtt_us: dict[str, int] = {}
        self._now = now                       # the time of the input call under way (for draining)
        self._punctuate_at = now + options.punctuation_us
        self.latency: dict[str, Latency] = {app: Latency() for app in query.applications}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._build(now, votes)
        #: Placement's plug-in, chosen once: this node's part in placement (§V) or none.
        self.coordination: Coordination | Uncoordinated = Uncoordinated(self.counters)
        if coordination is not None:
            from replicast.engine.core.coordination import Coordination    # numpy and placement: only when asked for
            self.coordination = Coordination(self.out, coordination, now, server_report=self.server_report,
                                             set_coordinator=self.set_coordinator)

    def _build(self, now: int, votes: Votes) -> None:
        """The components, each given what it reads (rule 5; docs/architecture.md, "The node core's
        modules").  A callback ``lambda`` reaches a component built after the one it is handed to."""
        name, query, options, hosted, inbound = self.name, self.query, self.options, self.hosted, self.inbound
        counters, traits = self.counters, TRAITS[options.mode]
        #: What the components hand the driver (engine.core.outbox): they hold it, never this core.
        self.out = out = Outbox(name, self.connected)
        #: When each peer was last heard from; the failover modes' failure detector.
        self.heard = heard = Heard(name, now, options.peer_timeout_us)
        self.links = Links(options.heartbeat_us, options.peer_timeout_us, out, heard.last_heard, now)
        # The mode's plug-ins, chosen once (engine.core.modes): the failover model or every upstream
        # feeding; process pairs or none.
        self.pairs = Pairs(query, hosted, out, counters, heard,
                           release=lambda h, upto: self.sender.release(h, upto),
                           emit=lambda *a: self.sender.emit(*a)) \
            if traits.determinants else Unpaired()
        self.failover = Failover(hosted, inbound, out, counters, heard) if traits.follows_one else AllFeed()
        self.sender = sender = Sender(hosted, out, counters, self.latency, retention_items=options.retention_items,
                                      join_timeout_us=options.join_timeout_us, standbys=traits.follows_one,
                                      pairs=self.pairs)
        self.receiver = receiver = Receiver(query.schemas, hosted, inbound, out, counters, self.failover,
                                            ack=self.links.ack, emit=sender.emit)
        #: Seals per key (operators/key_seals.py) into and out of the hosted replicas.
        self.key_seals = key_seals = KeySealRelay(hosted, inbound, out, counters, emit=sender.emit)
        self.voter = Voter(set(query.streams), self.incarnation, counters, out, votes)
        self.stamper = stamper = Stamper(query, options, hosted, out, counters, self.incarnation, emit=sender.emit,
                                         serve_parked=sender.serve_parked, voter=self.voter)
        self.lifecycle = lifecycle = Lifecycle(options, hosted, inbound, out, counters, failover=self.failover,
                                               pairs=self.pairs, new_epoch=self.new_epoch,
                                               new_logic=lambda replica: self.control.new_logic(replica))
        self.stamping = Stamping(query.streams, hosted, out, counters, emit=sender.emit, stamp=stamper.on_items,
                                 seal=key_seals.emit)
        self.control = Control(query, options, hosted, inbound, out, counters, start=self.start,
                               new_epoch=self.new_epoch, failover=self.failover, pairs=self.pairs)
        self._handlers: dict[type, Callable[[str, Any, int], Any]] = {   # -> intents or None
            Batch: receiver.on_batch, StreamHead: receiver.on_head, Mark: receiver.on_mark,
            Ack: sender.on_ack, Resume: sender.on_resume, Hold: sender.on_hold,
            Standby: sender.on_standby, NotHosted: receiver.on_not_hosted, KeySeals: key_seals.on_seals,
            **self.pairs.handlers(),
        }
        self._handlers.update({
            SnapshotRequest: self.lifecycle.on_snapshot_request,
            Snapshot: self.lifecycle.on_snapshot, NoSnapshot: self.lifecycle.on_no_snapshot,
            Heartbeat: self._on_heartbeat, StatisticsRequest: self._on_statistics_request,
            Statistics: lambda src, m, now: None,
            ViewBallot: self.voter.on_ballot, ViewReply: self.stamper.views.on_reply,
            ViewDecided: self._on_view_decided, JoinStamping: self.stamper.views.on_join,
            Stamped: self.stamper.on_stamped, StampAck: self.stamper.on_ack, Committed: self.stamper.on_committed,
            Report: lambda src, m, now: self.coordination.on_report(src, m, now),
        })
        guarded = self.control.guarded              # control rule 5: only from this node or the coordinator
        self._handlers.update({DeployReplica: guarded(self.control.deploy), RemoveReplica: guarded(self.control.remove),
                               ConnectStream: guarded(self.control.connect),
                               DisconnectStream: guarded(self.control.disconnect)})
        #: Where each intent goes (engine.core.intents): what a component asks of another.
        self._routes: dict[type, Callable[[Any, int], None]] = {
            RequestStream: lambda i, now: receiver.request(i.stream, i.inbound, i.hosted),
            CheckPort: lambda i, now: self._route(lifecycle.check_port(i.hosted, i.port, now), now),
            CheckHorizon: lambda i, now: lifecycle.check_horizon(i.hosted, now),
            AdoptFrontier: lambda i, now: self._route(lifecycle.adopt(i.hosted, i.port, i.frontier, now), now),
            Rejoin: lambda i, now: self._route(lifecycle.rejoin(i.hosted, now, i.reason), now),
            StepJoin: lambda i, now: self._route(lifecycle.step(i.hosted, now), now),
            RequestInputs: lambda i, now: receiver.request_all(i.hosted),
            HoldAcks: lambda i, now: receiver.hold_acks(i.stream, i.offset, i.until),
            Retrim: lambda i, now: sender.retrim(i.hosted),
            ServeParked: lambda i, now: sender.serve_parked(i.hosted),
            Emit: lambda i, now: sender.emit(i.hosted, i.records, i.punctuation, now),
            StartStamping: lambda i, now: stamper.start(i.hosted, now),
            ReleaseHeld: lambda i, now: self.stamping.release_held(i.hosted, now, i.covered, i.copied),
            StartReplica: lambda i, now: self._route(lifecycle.start(i.hosted, now), now),
            ForgetReplica: lambda i, now: lifecycle.forget(i.replica),
            TrackStamped: lambda i, now: stamper.track(i.hosted),
            ForgetStamped: lambda i, now: stamper.forget(i.replica),
            ConnectPeer: lambda i, now: stamper.connect_peer(i.hosted, i.index, i.node, now),
            DisconnectPeer: lambda i, now: stamper.disconnect_peer(i.hosted, i.index, now),
            Connected: lambda i, now: sender.connected(i.stream, i.route, now),
        }

    def _route(self, intents: Iterable[Intent], now: int) -> Any:
        """Route each intent to the component it is for, before the next is taken
        (:mod:`engine.core.intents` rule 2); returns what a generator returned (None for a tuple)."""
        routes, pending = self._routes, iter(intents)
        while True:
            try:
                intent = next(pending)
            except StopIteration as done:
                return done.value
            routes[type(intent)](intent, now)

    # -- inputs ---------------------------------------------------------------------------------
    def receive(self, src: str, message: Message, *, now: int) -> None:
        """A message from node ``src`` (control messages may come from the node itself)."""
        self._now = now
        self.heard.note(src, now)
        handler = self._handlers.get(type(message))
        if handler is None:
            self.counters["protocol_errors"] += 1       # a handshake frame: the driver's, never ours
        else:
            intents: Any = handler(src, message, now)
            if intents:
                self._route(intents, now)
        if self.out.local:                              # (most inputs leave nothing for this node itself)
            self._drain_local(now)

    def apply(self, messages: Iterable[Message], *, now: int) -> None:
        """Apply control messages from the node's own configuration."""
        self._now = now
        for message in messages:
            intents: Any = self._handlers[type(message)](self.name, message, now)
            if intents:
                self._route(intents, now)
        self._drain_local(now)

    def set_coordinator(self, node: str | None) -> None:
        """The cluster elected ``node`` its coordinator (§V-A; None: none): control messages from it
        are applied, as the node's own configuration is (:mod:`engine.core.control_policy`)."""
        self.control.policy.coordinator = node

    def on_source(self, stream: str, payload: bytes, *, now: int) -> bool:
        """A payload for ``stream`` from an external source; returns whether an entry point here took it."""
        self._now = now
        taken = self._route(self.stamping.on_source(stream, payload, now), now)
        self._drain_local(now)
        return taken

    def on_peer_up(self, node: str, *, now: int) -> None:
        """The driver has a (new) authenticated connection to ``node``: ask it for what we lack."""
        self._now = now
        self.connected.add(node)
        self.heard.note(node, now)
        self.control.on_peer_up(node)
        self.receiver.on_peer_up(node)
        self.pairs.on_peer_up(node)
        self._route(self.lifecycle.on_peer_change(node, now), now)
        self.stamper.on_peer_change(node, now)
        self.coordination.elect(now)
        self._drain_local(now)

    def on_peer_down(self, node: str, *, now: int) -> None:
        """The connection to ``node`` is gone; nothing is sent to it until :meth:`on_peer_up`."""
        self._now = now
        self.connected.discard(node)
        self.links.on_peer_down(node)
        self.sender.on_peer_down(node)
        self._route(self.lifecycle.on_peer_change(node, now), now)
        self.lifecycle.after_peer_down(node, now)
        self.stamper.on_peer_change(node, now)
        self.coordination.elect(now)
        self._drain_local(now)

    def handle_timer(self, *, now: int) -> None:
        """Acks due, keep-alives, peer time-outs, join deadlines and entry-stamped punctuations due at ``now``."""
        self._now = now
        if self.links.on_timer(now):                 # a heartbeat round: the failure detectors check
            self._route(self.failover.check(now), now)
            self.pairs.check(now)
        if now >= self._punctuate_at:
            self._punctuate_at = now + self.options.punctuation_us
            self.stamper.punctuate(now)
        self._route(self.lifecycle.on_timer(now), now)
        self.stamper.on_timer(now)
        self.coordination.on_timer(now)
        self._drain_local(now)

    # -- outputs --------------------------------------------------------------------------------
    def messages_to_send(self) -> list[tuple[str, Message]]:
        """``(node, message)`` pairs to send, in order; drains the outbox (acks and RTT probes ride
        along with what goes to each node: :mod:`engine.core.links`)."""
        out, self.out.messages = self.out.messages, []
        return self.links.drain(out, self._now)

    def votes_to_persist(self) -> PersistVotes | None:
        """The voter's votes if they changed since the last call (with durable votes, else None).
        Drain this first: the driver must store it durably *before* it sends what
        :meth:`messages_to_send` returns for the same input, and hand it back as ``votes`` at the
        node's next start (:mod:`engine.core.views` rule 1)."""
        return self.voter.to_persist()

    @property
    def tracer(self) -> "Tracer | None":
        """Installed trace queries' tracepoints (engine.core.tracepoints); None, and free, while there
        are none.  The sender, the receiver and the seal relay hold it (their hooks are the tracepoints)."""
        return self.sender.tracer

    @tracer.setter
    def tracer(self, tracer: "Tracer | None") -> None:
        self.sender.tracer = self.receiver.tracer = self.key_seals.tracer = tracer

    @property
    def outbox(self) -> list[tuple[str, Message]]:
        """The messages not drained yet (a test's recording network puts back what it drained)."""
        return self.out.messages

    @outbox.setter
    def outbox(self, messages: list[tuple[str, Message]]) -> None:
        self.out.messages = messages

    @property
    def local(self) -> Any:
        """Messages to this node itself, drained within the input call under way (engine.core.outbox)."""
        return self.out.local

    def events(self) -> list[Event]:
        """Deliveries, dead letters, protocol errors, state changes since the last call; drains them."""
        out, self.out.events = self.out.events, []
        return out

    def next_timer(self) -> int:
        """When :meth:`handle_timer` must next be called (µs).  Asked after every transmission:
        what no replica here needs is skipped without a scan."""
        links = self.links                               # Links.next_timer, inline (asked after every input)
        when = links.heartbeat_at if links.earliest_ack is None or links.heartbeat_at < links.earliest_ack \
            else links.earliest_ack
        deadline = self.lifecycle.next_deadline()
        if deadline is not None and deadline < when:
            when = deadline
        stamper = self.stamper
        if stamper.stamped:
            if stamper.any and self._punctuate_at < when:
                when = self._punctuate_at
            deadline = stamper.next_deadline()
            if deadline is not None and deadline < when:
                when = deadline
        deadline = self.coordination.next_timer()
        if deadline is not None and deadline < when:
            when = deadline
        return when

    def statistics(self) -> dict[str, Any]:
        """Counters per replica and application (plain data, for reports and metrics)."""
        out = statistics(self.hosted, self.inbound, self.lifecycle.probes, self.latency, self.rtt_us, self.counters)
        out["key_seals"], out["stale_key_seals"] = self.key_seals.received, self.key_seals.stale
        out.update(self.coordination.placement_statistics())
        return out

    def server_report(self, now: int, load: float = 0.0, capacity: float = 1.0) -> ServerReport:
        """What this server tells the placement coordinator at ``now`` (:func:`engine.core.stats.server_report`)."""
        return server_report(self.name, self.hosted, self.inbound, self.rtt_us, self.options.punctuation_us, now,
                             load, capacity, self.options.utility)

    def ready(self) -> bool:
        """Whether every hosted replica is live (a node that says so is processing)."""
        return all(h.state is ReplicaState.LIVE for h in self.hosted.values())

    # -- for the parts (rule 5) -----------------------------------------------------------------
    def new_epoch(self, now: int, previous: int | None = None) -> int:
        """The epoch of a replica deployed (or, after ``previous``, rejoining) at ``now``."""
        epoch = max(now, self.incarnation)
        return epoch if previous is None else max(epoch, previous + 1)

    def max_epoch(self) -> int:
        """The largest epoch of any replica hosted here (a driver restarting this node starts above it)."""
        return max((h.epoch for h in self.hosted.values()), default=self.incarnation)

    @property
    def started(self) -> int:
        """When this core started (failure detectors suspect a node never heard from since then)."""
        return self.heard.started

    def last_heard(self, node: str, default: int) -> int:
        """When a message from ``node`` last arrived (µs), or ``default`` if none ever did."""
        return self.heard.last_heard(node, default)

    def suspected(self, node: str, now: int) -> bool:
        """The failure detector of the failover modes (:mod:`engine.core.heard` rule 2)."""
        return self.heard.suspected(node, now)

    def send(self, node: str, message: Message) -> None:
        """Address ``message`` to ``node``: itself through the local queue, a connected peer through the outbox."""
        self.out.send(node, message)

    def event(self, event: Event) -> None:
        self.out.event(event)


    def _drain_local(self, now: int) -> None:
        local, inbound_of, accept = self.out.local, self.inbound.get, self.receiver.accept
        while local:
            item = local.popleft()
            if len(item) == 2:
                src, message = item
                intents = self._handlers[type(message)](src, message, now)
            else:
                stream, epoch, offset, records, punctuation, path = item
                inbound = inbound_of(stream)
                if inbound is None or inbound.epoch != epoch or inbound.state is not InboundState.FOLLOWING \
                        or offset > inbound.next:
                    continue
                intents = accept(stream, inbound, self.hosted[stream.target], offset, records, punctuation, now, path)
            if intents:
                self._route(intents, now)

    # -- statistics -----------------------------------------------------------------------------
    def _on_heartbeat(self, src: str, message: Heartbeat, now: int) -> None:
        if message.echo_us is None:
            self.out.put(src, Heartbeat(now, message.sent_us))
        else:
            self.rtt_us[src] = now - message.echo_us

    def _on_view_decided(self, src: str, message: ViewDecided, now: int) -> Iterator[Intent]:
        self.voter.on_decided(message)
        return self.stamper.views.on_decided(src, message, now)

    def set_load(self, load: float, capacity: float = 1.0) -> None:
        """The CPU this server uses and has (cores), as the driver measured it, for placement reports
        (dropped by a node that takes no part in placement: :mod:`engine.core.uncoordinated`)."""
        self.coordination.set_load(load, capacity)

    def _on_statistics_request(self, src: str, message: StatisticsRequest, now: int) -> None:
        self.out.put(src, Statistics(self.name, self.statistics()))
