"""The SimPy driver: runs :class:`~engine.node.NodeCore` s over the simulated network (DESIGN.md §3, §8).

It mirrors :mod:`engine.aio.driver` duty for duty, with simulated time and links:

* **Time.** ``now`` is what the node's clock reads at ``env.now`` (µs; :mod:`simulator.clocks`:
  the true time unless the run gives the node an offset or a drift).  One timer per node, re-armed
  from ``next_timer()`` after every call into the core (aioquic's ``transmit``), at the first true
  time its clock reads that deadline; SimPy cannot cancel an event, so a stale timer firing is
  recognised by its generation and ignored.
* **Votes.** What the core asks to keep (``votes_to_persist()``) is kept per server before the
  messages of the same call go out, and handed to the core of the server's next start, as the
  asyncio driver's vote store does on disk (engine/core/views.py rule 1).
* **Links.** One connection per node pair that shares a stream replica (the TCP driver dials every
  node; connections that never carry data would only add heartbeats).  Up/down is told to the core
  with ``on_peer_up`` / ``on_peer_down``; a dropped connection loses what is in flight and comes
  back after the handshake's two RTTs once the trace shows the pair again; the core then replays from its
  acknowledged offsets.  ``PeerTimedOut`` drops the connection, as the TCP driver does.
* **Frames.** Everything the core drains for one node in one call is one link item, reported to
  the observer as one frame.  With a link bandwidth, the item's size is the exact
  :func:`engine.wire.encode` length of its messages; the recorder sizes what it reports itself.
  The driver never loops over records.
* **Sources.** External sources reach entry points as payloads (the MQTT role), over the network
  from the source's server; ``on_source`` is called on arrival.
* **CPU.** With :class:`~simulator.network.Processing` costs, a batch reaches the core only when
  the node has worked through it (records × cost of the target replica's kind).
* **Placement.** With ``coordination`` (:mod:`simulator.coordinator`) every server runs a node core
  that takes part in placement, all of them linked (as the TCP driver dials every node); the load
  each reports is its CPU work over the last timer interval.  A node restarted then runs only its
  entry points and applications: the rest is the coordinator's to redeploy, as in a live cluster.

No operator, routing or placement logic lives here: the core does all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import simpy
from mypy_extensions import mypyc_attr

from replicast.engine.node import add_replica, remove_replica
from replicast.engine.node import shape
from replicast.engine.node import Start, VoteMemory, Votes
from replicast.engine.messages import Batch, ConnectStream, DeployReplica
from replicast.operators.plan import ReplicaId
from replicast.engine.node import (DeadLetter, Decided, Delivered, NodeCore, NodeOptions, PeerTimedOut, ProtocolError, configure,
                         configure_pinned, placement_plan)
from replicast.engine.wire import encode
from replicast.operators.query import Query
from replicast.simulator.clocks import Clock, ClockSpec
from replicast.simulator.network import Calls, LinkEnvironment, Network, Processing

#: Retry period of a connection whose link is in an outage (the TCP driver's back-off cap).
RECONNECT_US = 2_000_000


@dataclass(frozen=True, slots=True)
class SourcePayload:
    """A payload from an external source for ``stream`` (what MQTT carries in the TCP runtime)."""

    stream: str
    payload: bytes


# Compiled natively (replicast/native_build.py): tests, benchmarks and epoch_commit subclass it.
@mypyc_attr(allow_interpreted_subclasses=True)
class Observer:
    """What the simulation reports to (the recorder); the defaults ignore everything."""

    def delivered(self, node: str, event: Delivered) -> None:
        """``event.path`` is the replicas the records came through, entry point first."""
    def sent(self, src: str, dst: str, messages: list, now: int, delay: int | None) -> None:
        """``messages`` leave ``src`` for ``dst`` at ``now`` as one frame (one link item); ``delay``
        is the link's one-way delay at ``now`` (None: in an outage)."""
    def dead_letter(self, node: str, event: DeadLetter) -> None: ...
    def decided(self, node: str, decision: Any, now: int) -> None:
        """The placement coordinator on ``node`` sent ``decision`` (:mod:`placement.decisions`)."""


class SimNode:
    """One server's node core, driven like :class:`engine.aio.driver.NodeDriver` drives it."""

    def __init__(self, sim: "Simulation", name: str, *, now: int, incarnation: int | None = None,
                 start: Start = Start.FRESH):
        self.sim, self.name = sim, name
        self.calls: Calls = sim.env.calls               # the simulated time, read after every hop
        self.clock = sim.clock(name)
        self.skewed = not self.clock.exact              # (the hot path skips the conversion otherwise)
        now = self.clock.local(now)
        setup = sim.coordination(name) if sim.coordination is not None else None
        self.core = NodeCore(name, sim.query, sim.options, now=now,
                             incarnation=None if incarnation is None else max(now, incarnation),
                             start=start, coordination=setup,
                             votes=sim.votes.get(name, Votes(VoteMemory.DURABLE)))
        if setup is not None and incarnation is not None:       # restarted: the coordinator deploys the rest
            self.core.apply(configure_pinned(sim.query, sim.placement, name, sim.options.entry_modes), now=now)
        else:
            self.core.apply(configure(sim.query, sim.placement, name, sim.options.entry_modes, sim.physical,
                                      sim.options.mode), now=now)
        self.work_us, self._load_at = 0.0, (now, 0.0)           # CPU work done, for placement reports
        self.alive = True
        #: Batches waiting for this node's CPU (timed calls not run yet): a later arrival waits behind
        #: them even when its own work is done at once, so the node takes a link's items in order.
        self.waiting = 0
        self.up: set[str] = set()                     # peers with a connection (Simulation keeps it)
        self._timer_when: int | None = None
        self._timer_generation = 0
        self._transmit()

    # -- inputs (the network calls these) --------------------------------------------------------
    def deliver(self, src: str, items: list) -> None:
        if not self.alive:
            return
        processing = self.sim.processing
        if processing is not None:
            work, cost_of = 0.0, self.sim.cost_of
            for item in items:
                if type(item) is Batch:
                    work += len(item.records) * cost_of[item.stream.target.name]
                elif type(item) is SourcePayload:
                    work += cost_of.get(item.stream, 0.0)
            now = self.calls.now
            self.work_us += work
            done = processing.finish(self.name, now, work)
            if done > now or self.waiting:
                # A timed call, not a SimPy Timeout: most batches wait for the CPU a few µs.  One due
                # now while others wait (a batch of no work arriving the moment the CPU frees) goes
                # behind them: run at once, it overtook a batch it follows on its link (a Batch
                # skipping offsets: a protocol error, and the connection dropped).
                self.waiting += 1
                self.calls.push(done, self._processed, (src, items))
                return
        self._receive(src, items)

    def _processed(self, src: str, items: list) -> None:
        self.waiting -= 1
        if self.alive:
            self._receive(src, items)

    def now(self) -> int:
        """What this node's clock reads now."""
        return self.clock.local(self.sim.env.now) if self.skewed else self.sim.env.now

    def _receive(self, src: str, items: list) -> None:
        now, core = self.clock.local(self.calls.now) if self.skewed else self.calls.now, self.core
        if len(items) == 1 and type(items[0]) is not SourcePayload:
            core.receive(src, items[0], now=now)    # the common case: one message
        else:
            for item in items:
                if type(item) is SourcePayload:
                    core.on_source(item.stream, item.payload, now=now)
                else:
                    core.receive(src, item, now=now)
        self._transmit()

    def on_peer_up(self, peer: str) -> None:
        self.core.on_peer_up(peer, now=self.now())
        self._transmit()

    def on_peer_down(self, peer: str) -> None:
        self.core.on_peer_down(peer, now=self.now())
        self._transmit()

    def _on_timer(self, generation: int) -> None:
        if not self.alive or generation != self._timer_generation:
            return                                    # stale: the timer was re-armed since
        self._timer_when = None
        now = self.now()
        if now > self._load_at[0]:                    # the core's placement plug-in takes it or drops it
            at, work = self._load_at
            self.core.set_load((self.work_us - work) / (now - at))
            self._load_at = (now, self.work_us)
        self.core.handle_timer(now=now)
        self._transmit()

    # -- the core's outputs ---------------------------------------------------------------------
    def _transmit(self) -> None:
        """Keep the votes, send the core's outbox per destination, handle its events, re-arm the timer.

        Called after every input (a few hundred thousand times per simulated hour): an empty outbox
        or event list is seen on the core's :class:`~engine.core.outbox.Outbox` without draining it."""
        sim, core = self.sim, self.core
        now = self.calls.now
        record = core.votes_to_persist()
        if record is not None:                        # kept before anything the votes guard leaves
            sim.votes[self.name] = Votes(VoteMemory.DURABLE, record.streams)
        out = core.out
        if out.messages:
            outbox = core.messages_to_send()
            if len(outbox) == 1:
                node, message = outbox[0]
                frames = {node: [message]}
            else:
                frames = {}
                for node, message in outbox:
                    frame = frames.get(node)
                    if frame is None:
                        frames[node] = [message]
                    else:
                        frame.append(message)
            name, network, up, sent = self.name, sim.network, self.up, sim.observer.sent
            sizes = network.bandwidth_bps is not None
            for node, messages in frames.items():
                if node not in up:
                    continue                          # replayed by on_peer_up when the link returns
                size = sum(len(encode(message)) for message in messages) if sizes else 0
                taken = network.send(name, node, messages, now, size)
                sent(name, node, messages, now, network.sent_delay)
                if not taken:
                    sim.drop_connection(name, node)   # drop-mode outage: the connection breaks
        if out.events:
            self._events()
        when = core.next_timer()
        if when != self._timer_when:
            self._timer_when = when
            self._timer_generation += 1
            generation = self._timer_generation
            if self.skewed:
                when = self.clock.true(when)
            sim.env.timeout(max(0, when - now)).callbacks.append(lambda event: self._on_timer(generation))

    def _events(self) -> None:
        for event in self.core.events():
            if type(event) is Delivered:
                self.sim.observer.delivered(self.name, event)
            elif type(event) is DeadLetter:
                self.sim.observer.dead_letter(self.name, event)
            elif type(event) is PeerTimedOut or type(event) is ProtocolError:
                self.sim.drop_connection(self.name, event.node)
            elif type(event) is Decided:
                self.sim.observer.decided(self.name, event.decision, self.now())


class Simulation:
    """A SimPy environment, the network, and one :class:`SimNode` per server that hosts something.

    ``placement`` is a manual placement as :func:`engine.node.configure` takes it (every stream,
    operator and application → its servers by replica index).  Faults are methods: :meth:`crash`,
    :meth:`restart`, :meth:`drop_connection`; link cuts and congestion are on :attr:`network`.
    """

    def __init__(self, query: Query, placement: dict[str, list[str | None]], trace: Any, servers: dict[str, int], *,
                 options: NodeOptions = NodeOptions(), start_us: int = 0, outage: str = "hold",
                 bandwidth_bps: float | None = None, processing: Processing | None = None,
                 observer: Observer | None = None, origin_us: int | None = None,
                 coordination: Callable[[str], Any] | None = None, clocks: dict[str, ClockSpec] | None = None):
        # Paths are the recorder's ``path`` column (engine.messages rule 5): always traced here.
        options = replace(options, trace_paths=True)
        placement = shape(options.mode, placement, query.applications)    # the replicas the mode runs
        self.query, self.placement, self.options = query, placement, options
        self.env = LinkEnvironment(initial_time=start_us)
        #: Each server's clock (simulator.clocks; exact unless ``clocks`` names it), from the run's start.
        self.clocks = {name: Clock(spec, start_us) for name, spec in (clocks or {}).items()}
        self._exact = Clock(ClockSpec(), start_us)
        #: What each server's voter asked to keep (engine/core/views.py rule 1): it survives restarts.
        self.votes: dict[str, Votes] = {}
        self.network = Network(self.env, trace, servers, self._deliver, outage=outage, bandwidth_bps=bandwidth_bps,
                               origin_us=start_us if origin_us is None else origin_us)
        self.processing = processing if processing is not None and processing.enabled else None
        self.cost_of = self._costs(processing)
        self.observer = observer or Observer()
        self.connected: set[frozenset] = set()
        self.physical = placement_plan(query, placement)    # one set of ids for every node: lookups by identity
        self.coordination = coordination
        self.nodes: dict[str, SimNode] = {}
        self.retired: list[NodeCore] = []                   # cores of crashed incarnations (their counters)
        hosts = sorted({n for nodes in placement.values() for n in nodes if n})
        if coordination is not None:
            hosts = sorted(servers)
        for name in hosts:
            self.nodes[name] = SimNode(self, name, now=start_us)
        self.pairs = {frozenset((m.source_node, m.target_node)) for name in hosts
                      for m in configure(query, placement, name, options.entry_modes, self.physical, options.mode)
                      if isinstance(m, ConnectStream) and m.source_node != m.target_node}
        # Peers of one operator talk too: a replica that (re)joins asks them for a snapshot.
        self.pairs |= {frozenset((a, b)) for nodes in placement.values() for a in nodes for b in nodes
                       if a and b and a != b}
        if coordination is not None:
            self.pairs = {frozenset((a, b)) for a in hosts for b in hosts if a < b}
        # The links come up once the run starts, as a real cluster's do after its processes start
        # (and after the caller has attached its observer: the first messages are the nodes').
        self.env.timeout(0).callbacks.append(
            lambda event: [self._connect(*sorted(pair)) for pair in sorted(self.pairs, key=sorted)])

    def clock(self, server: str) -> Clock:
        return self.clocks.get(server, self._exact)

    def _costs(self, processing: Processing | None) -> dict[str, float]:
        table = processing.cost_us if processing is not None else {}
        q = self.query
        cost = {name: table.get("entry", 0.0) for name in q.streams}
        cost.update({name: table.get(spec.kind, 0.0) for name, spec in q.operators.items()})
        cost.update({name: table.get("application", 0.0) for name in q.applications})
        return cost

    # -- sources --------------------------------------------------------------------------------
    def publish(self, server: str, stream: str, payload: bytes) -> None:
        """A source on ``server`` publishes ``payload``: it travels to every entry replica of ``stream``."""
        item = [SourcePayload(stream, payload)]
        now = self.env.now
        for node in self.placement[stream]:
            if node is None:
                continue                               # a removed replica
            if node == server:
                self._deliver(node, server, item)
            else:
                self.network.send(server, node, item, now, len(payload), connection=False)

    def _deliver(self, dst: str, src: str, items: list) -> None:
        node = self.nodes.get(dst)
        if node is not None:
            node.deliver(src, items)

    # -- connections ----------------------------------------------------------------------------
    def _connect(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair in self.connected or not (self.nodes[a].alive and self.nodes[b].alive):
            return
        self.connected.add(pair)
        self.nodes[a].up.add(b)
        self.nodes[b].up.add(a)
        self.nodes[a].on_peer_up(b)
        self.nodes[b].on_peer_up(a)

    def drop_connection(self, a: str, b: str) -> None:
        """The connection between ``a`` and ``b`` breaks: in-flight messages are lost; redial later."""
        pair = frozenset((a, b))
        if pair not in self.connected:
            return
        self.connected.discard(pair)
        self.nodes[a].up.discard(b)
        self.nodes[b].up.discard(a)
        self.network.drop(a, b)
        self.network.drop(b, a)
        for x, y in ((a, b), (b, a)):
            if self.nodes[x].alive:
                self.nodes[x].on_peer_down(y)
        self._redial(a, b, self.env.now)

    def _redial(self, a: str, b: str, at: int) -> None:
        def attempt(event: simpy.Event) -> None:
            if frozenset((a, b)) in self.connected:
                return
            if not (self.nodes[a].alive and self.nodes[b].alive):
                return                                 # restart() redials
            now = self.env.now
            there, back = self.network.delay_us(a, b, now), self.network.delay_us(b, a, now)
            if there is None or back is None:
                self._redial(a, b, now + RECONNECT_US)
                return
            # The handshake (engine/handshake.py) takes the dialer two round trips: Hello each way,
            # then its Proof and the acceptor's.
            self.env.timeout(2 * (there + back)).callbacks.append(lambda event: self._connect(a, b))
        self.env.timeout(max(0, at - self.env.now)).callbacks.append(attempt)

    # -- faults ---------------------------------------------------------------------------------
    def crash(self, server: str) -> None:
        """Fail-stop crash of the node process on ``server`` (§II-A): its state is lost."""
        node = self.nodes.get(server)
        if node is None or not node.alive:
            return
        node.alive = False
        for pair in [p for p in self.connected if server in p]:
            (peer,) = pair - {server}
            self.drop_connection(server, peer)

    def all_cores(self) -> list[NodeCore]:
        """Every node core of the run, those of crashed incarnations included (for counters)."""
        return [*self.retired, *(node.core for node in self.nodes.values())]

    def restart(self, server: str) -> None:
        """Start a fresh node process on ``server`` with the same configuration; peers redial."""
        old = self.nodes.get(server)
        if old is None or old.alive:
            return
        now = self.env.now
        self.retired.append(old.core)
        self.nodes[server] = SimNode(self, server, now=now, incarnation=old.core.max_epoch() + 1,
                                     start=Start.RESTARTED)
        for pair in self.pairs:
            if server in pair:
                self._redial(*sorted(pair), self.env.now)

    # -- replicas added and removed mid-stream (a coordinator's decisions, docs/lifecycle.md) -----
    def add_replica(self, name: str, server: str) -> None:
        """A new replica of ``name`` on ``server``: it joins from a live peer's snapshot."""
        self.placement, messages = add_replica(self.query, self.placement, name, server, self.options.entry_modes)
        self._control(messages)

    def remove_replica(self, replica: ReplicaId) -> None:
        self.placement, messages = remove_replica(self.placement, replica)
        self._control(messages)

    def _control(self, messages: dict[str, list]) -> None:
        now = self.env.now
        for node, batch in messages.items():
            if node not in self.nodes:
                self.nodes[node] = SimNode(self, node, now=now, start=Start.RESTARTED)   # joins a running cluster
            if self.nodes[node].alive:
                self.nodes[node].core.apply(batch, now=self.nodes[node].now())
                self.nodes[node]._transmit()
        for node, batch in messages.items():
            for m in batch:
                if isinstance(m, ConnectStream):
                    pairs = [(m.source_node, m.target_node)]
                elif isinstance(m, DeployReplica):           # its peers: it asks them for a snapshot
                    pairs = [(node, peer) for peer in m.peers if peer]
                else:
                    continue
                for a, b in pairs:
                    pair = frozenset((a, b))
                    if a != b and pair not in self.pairs:
                        self.pairs.add(pair)
                        self._connect(*sorted(pair))

    # -- running --------------------------------------------------------------------------------
    def run(self, until: int | simpy.Event, tick: Callable[[int], None] | None = None, step_us: int = 0) -> None:
        """Run to ``until`` (µs or an event); with ``tick``, stop every ``step_us`` to report progress."""
        if tick is None or not step_us or not isinstance(until, int):
            self.env.run(until=until)
            return
        while self.env.now < until:
            self.env.run(until=min(until, self.env.now + step_us))
            tick(self.env.now)
